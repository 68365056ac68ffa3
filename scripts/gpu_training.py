"""`hf-vanilla-transformer train translation` with a probe, for the GPU acceptance run: launched as the command itself
would be (`accelerate launch ... -m scripts.gpu_training`), it also writes steady-state training figures to a file.

    accelerate launch --config_file CONFIG -m scripts.gpu_training --probe FILE [--warmup_steps K] -- [recipe options]

The probe times the steps of this run after its first K (to the end of its last step: the final checkpoint, the
evaluation and the saving come after), counts the target tokens those steps trained on as a running sum on the device
(no host synchronisation), and reads the peak GPU memory. Every process's tokens are summed and its memory maxed.
"""

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from hf_vanilla_transformer.recipes import translation


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Probe(TrainerCallback):
    def __init__(self, trainer, path: Path, warmup_steps: int):
        self.trainer, self.path, self.warmup_steps = trainer, path, warmup_steps
        self.tokens = torch.zeros((), dtype=torch.long, device=trainer.args.device)  # target tokens trained on
        self.first_step = self.start = self.start_tokens = None
        self.window = None  # (steps, seconds, tokens) of the timed steps

    def on_train_begin(self, args, state, control, **kwargs):
        self.first_step = state.global_step  # > 0 when resumed
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.first_step + self.warmup_steps:
            synchronize()
            self.start, self.start_tokens = time.perf_counter(), self.tokens.clone()

    def on_step_end(self, args, state, control, **kwargs):
        if self.start is not None and (state.global_step >= state.max_steps or control.should_training_stop):
            synchronize()
            steps = state.global_step - self.first_step - self.warmup_steps
            self.window = (steps, time.perf_counter() - self.start, self.tokens - self.start_tokens)

    def on_train_end(self, args, state, control, **kwargs):
        steps, seconds, tokens = self.window or (0, 0.0, torch.zeros_like(self.tokens))
        peaks = torch.tensor(
            [torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()]
            if torch.cuda.is_available()
            else [0, 0],
            dtype=torch.float64,
            device=args.device,
        )
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(tokens)
            torch.distributed.all_reduce(peaks, op=torch.distributed.ReduceOp.MAX)
        if not state.is_world_process_zero:
            return
        accelerator = self.trainer.accelerator
        figures = {
            "first_step": self.first_step,
            "last_step": state.global_step,
            "warmup_steps": self.warmup_steps,
            "timed_steps": steps,
            "timed_seconds": seconds,
            "steps_per_second": steps / seconds if seconds else None,
            "target_tokens": int(tokens),
            "target_tokens_per_second": int(tokens) / seconds if seconds else None,
            "peak_memory_allocated_mb": peaks[0].item() / 2**20,
            "peak_memory_reserved_mb": peaks[1].item() / 2**20,
            "world_size": args.world_size,
            "distributed_type": getattr(accelerator.distributed_type, "value", str(accelerator.distributed_type)),
            "mixed_precision": accelerator.mixed_precision,
            "wrapped_model": type(self.trainer.model_wrapped).__name__,
            "device": str(args.device),
        }
        self.path.write_text(json.dumps(figures, indent=2) + "\n")


def probed_trainer(path: Path, warmup_steps: int) -> type:
    """The recipe's trainer class, with a `Probe` and the count of the target tokens of every training batch."""

    class ProbedTrainer(translation.TranslationTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.probe = Probe(self, path, warmup_steps)
            self.add_callback(self.probe)

        def compute_loss(self, model, inputs, *args, **kwargs):
            if model.training:
                self.probe.tokens += (inputs["labels"] != -100).sum()
            return super().compute_loss(model, inputs, *args, **kwargs)

    return ProbedTrainer


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", type=Path, required=True, help="the JSON file of the figures")
    parser.add_argument("--warmup_steps", type=int, default=10, help="steps left out of the timing")
    parser.add_argument("recipe", nargs=argparse.REMAINDER, help="-- then the options of `train translation`")
    args = parser.parse_args(argv)
    recipe = args.recipe[1:] if args.recipe[:1] == ["--"] else args.recipe
    translation.TranslationTrainer = probed_trainer(args.probe, args.warmup_steps)
    return translation.main(recipe)


if __name__ == "__main__":
    raise SystemExit(main())
