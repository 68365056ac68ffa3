"""One candidate of the demo's recipe, scored on the validation split only: the run's BLEU curve and the final BLEU and
chrF of its weights, of exponential averages of them at several decays and of the mean of its last checkpoints a
short window apart (LAWA), in one training run.

    python -m scripts.recipe_sweep --name linear -- --lr_scheduler_type linear
    python -m scripts.recipe_sweep --name wsd --ema 0.99 0.998 --lawa 5x20 5x50 -- --lr_scheduler_type \
        warmup_stable_decay --lr_scheduler_kwargs '{"num_decay_steps": 460, "decay_type": "1-sqrt"}'

Runs `train translation` (the demo unless the options after `--` say otherwise) in this process with every validation
pair scored at each evaluation, and without the test split, which is never read: choosing settings is done on
validation data alone. Writes `<output_root>/<name>.json`; docs/results/ records the candidates.
"""

import argparse
import json
import sys
import time
from pathlib import Path
from unittest import mock

import torch
from transformers import TrainerCallback

from hf_vanilla_transformer.recipes import translation
from hf_vanilla_transformer.training.averaging import ExponentialAverage, trained_parameters
from hf_vanilla_transformer.training.report import cpu_model


class Trackers(TrainerCallback):
    """Exponential averages at several decays, and rings of the last k weights taken every w steps (LAWA), kept
    beside a training run without touching it."""

    def __init__(self, decays: list[float], windows: list[tuple[int, int]]):
        self.decays, self.windows = decays, windows
        self.averages, self.rings, self.parameters = {}, {}, []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        named = trained_parameters(model)
        self.parameters = list(named.values())
        self.averages = {decay: ExponentialAverage(named, decay) for decay in self.decays}
        self.rings = {window: [] for window in self.windows}

    def on_step_end(self, args, state, control, **kwargs):
        for average in self.averages.values():
            average.update(self.parameters)
        for (k, w), ring in self.rings.items():
            if (state.max_steps - state.global_step) % w == 0 and state.max_steps - state.global_step < k * w:
                ring.append([p.detach().clone() for p in self.parameters])

    def variants(self) -> dict[str, list[torch.Tensor]]:
        found = {f"ema {decay}": average.weights for decay, average in self.averages.items()}
        for (k, w), ring in self.rings.items():
            found[f"lawa {k}x{w}"] = [torch.stack(weights).mean(0) for weights in zip(*ring)]
        return found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, recipe = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name")
    parser.add_argument("--output_root", default="outputs/recipe-sweep")
    parser.add_argument("--ema", type=float, nargs="*", default=[0.99, 0.995, 0.998, 0.999])
    parser.add_argument("--lawa", nargs="*", default=["5x23", "5x46", "10x23"], help="k snapshots w steps apart: kxw")
    parser.add_argument("--score", help="instead: score this saved model on the validation split (the engine, beam 4)")
    parser.add_argument("--plot", nargs="+", metavar=("PNG", "JSON"), help="instead: draw the candidates' curves")
    args = parser.parse_args(own)
    if args.score:
        return score_saved(args.score, args.name, Path(args.output_root))
    if args.plot:
        plot_curves(args.plot[0], args.plot[1:])
        return 0
    windows = [tuple(int(n) for n in spec.split("x")) for spec in args.lawa]
    trackers = Trackers(args.ema, windows)
    trainers = []
    original_init = translation.TranslationTrainer.__init__

    def init(self, *a, **kw):
        original_init(self, *a, **kw)
        self.add_callback(trackers)
        trainers.append(self)

    def without_test(*a, **kw):
        corpus, dropped = read(*a, **kw)
        corpus.pop("test", None)
        return corpus, dropped

    read = translation.read_training_corpus
    output_dir = Path(args.output_root) / args.name
    started = time.time()
    with (
        mock.patch.object(translation.TranslationTrainer, "__init__", init),
        mock.patch.object(translation, "read_training_corpus", without_test),
    ):
        every_pair = [] if "--max_eval_samples" in recipe else ["--max_eval_samples", "1000"]
        trained = [] if "--ema_decay" in recipe else ["--ema_decay", "0"]  # the trackers average beside it
        translation.main([*recipe, "--output_dir", str(output_dir), "--overwrite", *every_pair, *trained])
    minutes = (time.time() - started) / 60
    trainer = trainers[-1]
    history = list(trainer.state.log_history)
    parameters = trained_parameters(trainer.model)
    final = {"final": [p.detach().clone() for p in parameters.values()], **trackers.variants()}
    scores = {}
    for name, weights in final.items():
        with torch.no_grad():
            torch._foreach_copy_(list(parameters.values()), weights)
        metrics = trainer.evaluate()
        scores[name] = {"bleu": round(metrics["eval_bleu"], 2), "chrf": round(metrics["eval_chrf"], 2)}
        print(f"{args.name} {name}: validation BLEU {scores[name]['bleu']:.2f} chrF {scores[name]['chrf']:.2f}")
    record = {
        "name": args.name,
        "recipe_options": recipe,
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "validation_pairs": len(trainer.eval_dataset),
        "train_runtime_seconds": next((e["train_runtime"] for e in history if "train_runtime" in e), None),
        "wall_minutes": round(minutes, 2),
        "curve": {e["step"]: round(e["eval_bleu"], 2) for e in history if "eval_bleu" in e},
        "validation": scores,
    }
    Path(args.output_root, f"{args.name}.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


def score_saved(model: str, name: str, output_root: Path) -> int:
    """A saved model's BLEU and chrF on the whole validation split, translated by the engine with the model's own
    generation settings (beam 4, length penalty 0.6): a candidate trained before this script, such as the old recipe's
    demo."""
    from hf_vanilla_transformer.data.corpus import load_parallel_corpus
    from hf_vanilla_transformer.training.metrics import corpus_scores
    from hf_vanilla_transformer.translate.translator import load_translator

    validation = load_parallel_corpus("de", "en")["validation"]
    sources = [row["translation"]["de"] for row in validation]
    references = [row["translation"]["en"] for row in validation]
    translations = load_translator(model).translate(sources, scores=False)
    hypotheses = [line.hypotheses[0].text for line in translations]
    found = corpus_scores(hypotheses, references)
    scores = {"bleu": round(found["bleu"], 2), "chrf": round(found["chrf"], 2)}
    print(f"{name} (saved, engine): validation BLEU {scores['bleu']:.2f} chrF {scores['chrf']:.2f}")
    record = {"name": name, "model": model, "cpu": cpu_model(), "validation_pairs": len(sources), "engine": scores}
    output_root.mkdir(parents=True, exist_ok=True)
    Path(output_root, f"{name}-saved.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


def plot_curves(path: str, records: list[str]) -> None:
    """The candidates' validation BLEU against the step (left) and their learning rates (right), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from transformers import HfArgumentParser, Seq2SeqTrainingArguments, get_scheduler

    from hf_vanilla_transformer.recipes.translation import DEMO_DEFAULTS
    from hf_vanilla_transformer.training.schedule import COOLDOWN_FRACTION, COOLDOWN_SHAPE

    fig, (curves, rates) = plt.subplots(1, 2, figsize=(12, 4))
    for file in records:
        record = json.loads(Path(file).read_text())
        steps = sorted(map(int, record["curve"]))
        curves.plot(steps, [record["curve"][str(step)] for step in steps], marker="o", label=record["name"])
        options = ["--output_dir", "unused", *record["recipe_options"]]
        defaults = {k: v for k, v in DEMO_DEFAULTS.items() if k != "output_dir"}
        parser = HfArgumentParser(Seq2SeqTrainingArguments)
        parser.set_defaults(**defaults)
        args = parser.parse_args_into_dataclasses(options, return_remaining_strings=True)[0]
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
        kwargs = dict(args.lr_scheduler_kwargs or {})
        if args.lr_scheduler_type == "warmup_stable_decay":
            kwargs = {
                "num_decay_steps": round(COOLDOWN_FRACTION * args.max_steps),
                "decay_type": COOLDOWN_SHAPE,
                **kwargs,
            }
        scheduler = get_scheduler(
            args.lr_scheduler_type, optimizer, args.warmup_steps, args.max_steps, scheduler_specific_kwargs=kwargs
        )
        lrs = []
        for _ in range(args.max_steps):
            lrs.append(scheduler.get_last_lr()[0])
            optimizer.step()
            scheduler.step()
        rates.plot(range(1, args.max_steps + 1), lrs, label=record["name"])
    curves.set(title=f"validation BLEU ({record['validation_pairs']} pairs, beam 4)", xlabel="step")
    rates.set(title="learning rate", xlabel="step")
    for ax in (curves, rates):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
