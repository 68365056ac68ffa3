"""The run report of a training run: `metrics.json` beside the saved model (one schema for every head, read by the
model card), the training curves, and the machine it ran on.

    {
      "task": "translation" | "language-modeling" | "text-classification",
      "source_lang", "target_lang": the translation direction (None for the other heads),
      "dataset": {"name", "id" (a Hub dataset), "config", "license", "attribution"},
      "model": {"architecture", "parameters", "d_model", "encoder_layers", "decoder_layers", "vocab_size"},
      "training": {"steps", "epochs", "runtime_seconds", "total_seconds", "train_samples", "hardware",
                   "learning_rate", "lr_scheduler", "lr_scheduler_kwargs", "warmup_steps", "label_smoothing",
                   "per_device_train_batch_size", "world_size", "bf16", "seed", ...the recipe's own settings},
      "validation": {metric: value}, "test": {metric: value},
      "command": the command line that trained it
    }
"""

import json
import math
import os
import platform
from pathlib import Path

import torch
from transformers.utils import logging


logger = logging.get_logger(__name__)

REPORT_FILE = "metrics.json"
TASKS = ("translation", "language-modeling", "text-classification")
CPU_VECTORS = [("avx512_bf16", "AVX-512 BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2, no AVX-512")]


def cpu_model() -> str:
    """The CPU's model name with its widest vector instructions: cloud CPUs often report only "AMD EPYC", and the
    vector width is what sets the speed of these models."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            first_cpu = f.read().split("\n\n")[0]
    except OSError:
        return platform.processor() or platform.machine()
    info = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first_cpu.splitlines())}
    flags = set(info.get("flags", "").split())
    vectors = next((name for flag, name in CPU_VECTORS if flag in flags), None)
    name = info.get("model name") or platform.machine()
    return f"{name} ({vectors})" if vectors else name


def hardware() -> str:
    """The GPUs a run uses, or the CPU with the threads torch runs on."""
    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    return f"{cpu_model()}, {torch.get_num_threads()} threads ({os.cpu_count()} cores visible)"


def run_report(
    trainer,
    *,
    task: str,
    dataset: dict,
    train_samples: int,
    total_seconds: float,
    validation: dict | None = None,
    test: dict | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
    recipe: dict | None = None,
    command: str | None = None,
) -> dict:
    """The report of a finished `Trainer` run (its model, arguments and state) with the evaluation results; `recipe`
    adds settings of the recipe to the training section, `command` is the command line that ran it."""
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {TASKS}, got {task!r}.")
    model, args, state = trainer.model, trainer.args, trainer.state
    config = model.config
    runtime = next((entry["train_runtime"] for entry in state.log_history if "train_runtime" in entry), 0.0)
    scheduler = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    return {
        "task": task,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "dataset": {key: dataset.get(key) for key in ("name", "id", "config", "license", "attribution")},
        "model": {
            "architecture": type(model).__name__,
            "parameters": sum(p.numel() for p in model.parameters()),
            "d_model": config.d_model,
            "encoder_layers": config.encoder_layers,
            "decoder_layers": config.decoder_layers,
            "vocab_size": config.vocab_size,
        },
        "training": {
            "steps": state.global_step,
            "epochs": round(state.epoch, 2) if state.epoch is not None and not math.isnan(state.epoch) else 0.0,
            "runtime_seconds": round(runtime, 1),
            "total_seconds": round(total_seconds, 1),
            "train_samples": train_samples,
            "hardware": hardware(),
            "learning_rate": args.learning_rate,
            "lr_scheduler": str(scheduler),
            "lr_scheduler_kwargs": args.lr_scheduler_kwargs or {},
            "warmup_steps": args.warmup_steps,
            "adam_betas": [args.adam_beta1, args.adam_beta2],
            "adam_epsilon": args.adam_epsilon,
            "label_smoothing": getattr(config, "label_smoothing", 0.0) or args.label_smoothing_factor,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "world_size": args.world_size,
            "bf16": args.bf16,
            "seed": args.seed,
            **(recipe or {}),
        },
        "validation": validation or {},
        "test": test or {},
        "command": command,
    }


def write_run_report(output_dir: str | Path, report: dict, log_history: list[dict] | None = None) -> Path:
    """Write `report` as `metrics.json` into `output_dir`, and the training curves beside it when given the log."""
    path = Path(output_dir) / REPORT_FILE
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if log_history:
        plot_training_curves(log_history, Path(output_dir) / "training_curves.png")
    return path


def read_run_report(model_dir: str | Path) -> dict:
    """The run report saved with a model, or `{}` for a folder without one (saved by hand, or fine-tuned elsewhere)."""
    path = Path(model_dir) / REPORT_FILE
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def plot_training_curves(log_history: list[dict], path: str | Path) -> Path:
    """Training loss, learning rate and the first validation metric against the optimizer step, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    def series(key):
        points = [(entry["step"], entry[key]) for entry in log_history if key in entry and "step" in entry]
        return [p[0] for p in points], [p[1] for p in points]

    metrics = [key for entry in log_history for key in entry if key.startswith("eval_") and key != "eval_loss"]
    metric = next((key for key in ("eval_bleu", *metrics) if key in metrics), "eval_loss")
    panels = [("loss", "training loss"), ("learning_rate", "learning rate"), (metric, f"validation {metric[5:]}")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, (key, title) in zip(axes, panels):
        steps, values = series(key)
        ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if not steps:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["REPORT_FILE", "cpu_model", "hardware", "plot_training_curves", "read_run_report", "run_report"]
