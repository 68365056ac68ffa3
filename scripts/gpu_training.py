"""`hf-vanilla-transformer train translation` with a probe, for the GPU acceptance run: launched as the command itself
would be (`accelerate launch ... -m scripts.gpu_training`), it also writes steady-state training figures to a file.

    accelerate launch --config_file CONFIG -m scripts.gpu_training --probe FILE [--warmup_steps K] -- [recipe options]

The probe times the steps of this run after its first K (to the end of its last step: the final checkpoint, the
evaluation and the saving come after), and each span of `--logging_steps` steps among them (a first epoch slower than
the next shows there); counts the target tokens those steps trained on and their model FLOPs (the matmuls of the real
tokens, `scripts.benchmark.pair_flops`, x3 for training) as running sums on the device (no host synchronisation); and
reads the peak GPU memory, the allocator's work and the attention setting; under `--torch_compile`, how many graphs
torch compiled and how many graph breaks it met. The last warm-up step (with at least 2) runs under torch.profiler,
from the end of the step before: fetching its batch, the step and the update, summarised as the GPU benchmark's
profiles are (`scripts.gpu_benchmark.profile`: kernel time by kind, the GPU's idle share, the host's longest
operators). Every process's tokens and FLOPs are summed and its memory maxed. The utilisation is against the card's
dense bf16 peak (`scripts.gpu_benchmark.DENSE_BF16_TFLOPS`) times the process count.
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from hf_vanilla_transformer.cuda import cuda_defaults
from hf_vanilla_transformer.recipes import translation

from .benchmark import pair_flops
from .gpu_benchmark import card_peak, profile_summary, profiler_activities


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Probe(TrainerCallback):
    def __init__(self, trainer, path: Path, warmup_steps: int):
        self.trainer, self.path, self.warmup_steps = trainer, path, warmup_steps
        self.tokens = torch.zeros((), dtype=torch.long, device=trainer.args.device)  # target tokens trained on
        self.flops = torch.zeros((), dtype=torch.float64, device=trainer.args.device)  # their model FLOPs
        self.first_step = self.start = self.start_tokens = self.start_flops = None
        self.window = None  # (steps, seconds, tokens) of the timed steps
        self.marks = []  # (step, time) at the start of the timed steps and every logging_steps steps after
        self.profiler = self.profile_start = self.profile = None  # the last warm-up step under torch.profiler

    def on_train_begin(self, args, state, control, **kwargs):
        self.first_step = state.global_step  # > 0 when resumed
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.first_step + self.warmup_steps:
            synchronize()
            self.start, self.start_tokens, self.start_flops = (
                time.perf_counter(),
                self.tokens.clone(),
                self.flops.clone(),
            )
            self.marks = [(state.global_step, self.start)]

    def on_step_end(self, args, state, control, **kwargs):
        if self.warmup_steps >= 2 and state.global_step == self.first_step + self.warmup_steps - 1:
            synchronize()
            self.profiler = torch.profiler.profile(activities=profiler_activities(args.device.type))
            self.profiler.start()
            self.profile_start = time.perf_counter()
        elif self.profiler is not None:  # the step after: its batch, forward, backward and update
            self.profile = self.stop_profiler(args.device.type)
        if self.start is None:
            return
        last = state.global_step >= state.max_steps or control.should_training_stop
        if last or state.global_step % state.logging_steps == 0:  # the Trainer waits for the device there anyway
            synchronize()
            self.marks.append((state.global_step, time.perf_counter()))
        if last:
            steps = state.global_step - self.first_step - self.warmup_steps
            self.window = (
                steps,
                time.perf_counter() - self.start,
                self.tokens - self.start_tokens,
                self.flops - self.start_flops,
            )

    def stop_profiler(self, device: str) -> dict:
        synchronize()
        wall, profiler, self.profiler = time.perf_counter() - self.profile_start, self.profiler, None
        try:
            profiler.stop()
            return {"step": self.first_step + self.warmup_steps, **profile_summary(profiler, wall, device)}
        except Exception as error:  # a profiler's failure must not cost the measurement
            return {"error": f"{type(error).__name__}: {error}"[-500:]}

    def on_train_end(self, args, state, control, **kwargs):
        if self.profiler is not None:  # the run ended before the step to profile
            self.profiler.stop()
            self.profiler = None
        steps, seconds, tokens, flops = self.window or (0, 0.0, torch.zeros_like(self.tokens), self.flops * 0)
        peaks = torch.tensor(
            [torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()]
            if torch.cuda.is_available()
            else [0, 0],
            dtype=torch.float64,
            device=args.device,
        )
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(tokens)
            torch.distributed.all_reduce(flops)
            torch.distributed.all_reduce(peaks, op=torch.distributed.ReduceOp.MAX)
        if not state.is_world_process_zero:
            return
        accelerator = self.trainer.accelerator
        card = card_peak(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None
        flops_per_second = flops.item() / seconds if seconds else None
        figures = {
            "first_step": self.first_step,
            "last_step": state.global_step,
            "warmup_steps": self.warmup_steps,
            "timed_steps": steps,
            "timed_seconds": seconds,
            "steps_per_second": steps / seconds if seconds else None,
            "spans": [
                {"steps": [a, b], "steps_per_second": (b - a) / (tb - ta)}
                for (a, ta), (b, tb) in zip(self.marks, self.marks[1:])
                if b > a
            ],
            "target_tokens": int(tokens),
            "target_tokens_per_second": int(tokens) / seconds if seconds else None,
            "model_flops_per_second": flops_per_second,
            "utilisation": flops_per_second / (card[1] * args.world_size) if card and flops_per_second else None,
            "max_tokens": self.trainer.max_tokens,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "torch_compile": args.torch_compile,
            **compilations(),
            "peak_memory_allocated_mb": peaks[0].item() / 2**20,
            "peak_memory_reserved_mb": peaks[1].item() / 2**20,
            **allocator_figures(),
            "cudnn_attention_deprioritized": os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED"),
            "world_size": args.world_size,
            "distributed_type": getattr(accelerator.distributed_type, "value", str(accelerator.distributed_type)),
            "mixed_precision": accelerator.mixed_precision,
            "wrapped_model": type(self.trainer.model_wrapped).__name__,
            "device": str(args.device),
            "profile": self.profile,
        }
        self.path.write_text(json.dumps(figures, indent=2) + "\n")


def allocator_figures() -> dict:
    """The CUDA caching allocator's setting and its work over the run (this process): segments it asked CUDA for, and
    the times it found no free block and released its cache to retry (each a device synchronisation)."""
    if not torch.cuda.is_available():
        return {}
    stats = torch.cuda.memory_stats()
    return {
        "allocator_settings": os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF"),
        "device_allocations": stats.get("num_device_alloc"),
        "allocation_retries": stats.get("num_alloc_retries"),
    }


def compilations() -> dict:
    """Graphs compiled and graph breaks met by torch.compile in this process (dynamo's counters)."""
    from torch._dynamo.utils import counters  # the one place that reads them: there is no public API yet

    return {
        "compiled_graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
    }


def batch_flops(model, inputs) -> torch.Tensor:
    """Training FLOPs of a batch's real tokens (forward x3), on the device."""
    config = model.config
    source = inputs["attention_mask"].sum(1, dtype=torch.float64)
    target = (inputs["labels"] != -100).sum(1, dtype=torch.float64)
    sizes = (config.d_model, config.encoder_ffn_dim, config.encoder_layers, config.vocab_size)
    return 3 * pair_flops(*sizes, source, target).sum()


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
                self.probe.flops += batch_flops(self.model, inputs)
            return super().compute_loss(model, inputs, *args, **kwargs)

    return ProbedTrainer


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", type=Path, required=True, help="the JSON file of the figures")
    parser.add_argument("--warmup_steps", type=int, default=10, help="steps left out of the timing")
    parser.add_argument("recipe", nargs=argparse.REMAINDER, help="-- then the options of `train translation`")
    args = parser.parse_args(argv)
    recipe = args.recipe[1:] if args.recipe[:1] == ["--"] else args.recipe
    cuda_defaults()  # as the command's own process starts
    translation.TranslationTrainer = probed_trainer(args.probe, args.warmup_steps)
    return translation.main(recipe)


if __name__ == "__main__":
    raise SystemExit(main())
