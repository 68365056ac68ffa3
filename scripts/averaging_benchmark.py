"""What the moving average of the weights costs a training step of the demo model, measured in one run.

    python -m scripts.averaging_benchmark [--steps 200] [--updates 500] [--json FILE]

Trains the demo's model (7.6M parameters, its batches and recipe) for `--steps` steps without averaging, then times
`--updates` updates of an `ExponentialAverage` of its weights (what `WeightAveragingCallback` does after every
optimizer step) and swaps for evaluation, and prints the update's time as a share of the mean step's. Not part of
the test suite; record a run's figures under docs/results/.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

from hf_vanilla_transformer.recipes import translation
from hf_vanilla_transformer.training.averaging import ExponentialAverage, trained_parameters
from hf_vanilla_transformer.training.report import cpu_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--updates", type=int, default=500)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    trainers = []
    original_init = translation.TranslationTrainer.__init__

    def init(self, *a, **kw):
        original_init(self, *a, **kw)
        trainers.append(self)

    with tempfile.TemporaryDirectory() as folder, mock.patch.object(translation.TranslationTrainer, "__init__", init):
        translation.main(
            ["--output_dir", str(Path(folder) / "run"), "--max_steps", str(args.steps), "--ema_decay", "0"]
            + ["--eval_strategy", "no", "--save_strategy", "no", "--max_eval_samples", "1", "--max_test_samples", "1"]
            + ["--translate", "Hallo."]
        )
    trainer = trainers[-1]
    runtime = next(entry["train_runtime"] for entry in trainer.state.log_history if "train_runtime" in entry)
    step = runtime / args.steps
    parameters = trained_parameters(trainer.model)
    average = ExponentialAverage(parameters, decay=0.998)
    weights = list(parameters.values())
    average.update(weights)  # warm
    started = time.perf_counter()
    for _ in range(args.updates):
        average.update(weights)
    update = (time.perf_counter() - started) / args.updates
    figures = {
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "parameters": sum(p.numel() for p in weights),
        "steps": args.steps,
        "step_ms": round(step * 1000, 2),
        "update_ms": round(update * 1000, 3),
        "update_share_of_step": round(update / step, 4),
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
