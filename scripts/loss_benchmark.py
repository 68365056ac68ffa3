"""The loss over the vocabulary, forward and backward: the translation trainer's `chunked_token_cross_entropy` (float32
one chunk of rows at a time) against the model's own, `cross_entropy(logits.float(), ...)`; seconds and peak memory of
each, every variant in a fresh process.

    python -m scripts.loss_benchmark                 # 8,192 rows of 37,000 logits, float32 and bf16, on the CPU
    python -m scripts.loss_benchmark --rows 512 --vocab 1000

The CPU run times the loss on given logits. On a GPU, the `loss` measurement of `scripts.gpu_benchmark` runs the same
function with the output projection included (hidden states in, gradients of the hidden states and the weight out),
so that Liger-Kernel's fused linear cross-entropy, which never makes the logits, can stand beside them.
"""

import argparse
import json
import statistics

import torch

from hf_vanilla_transformer.model.modeling_vanilla_transformer import token_cross_entropy
from hf_vanilla_transformer.training import loss as training_loss
from hf_vanilla_transformer.training.loss import chunked_token_cross_entropy

from .benchmark import DTYPES, LABEL_SMOOTHING, cpu_model, in_fresh_process, timed


ROWS, VOCAB = 8192, 37000
IGNORED = 0.05  # the share of rows without a target (-100)
# Each variant: (logits, labels) -> summed loss over the targets / their count, as the model's loss returns it.
VARIANTS = {
    "reference": "cross_entropy(logits.float(), ...): a float32 copy of all logits",
    "ours": "chunked_token_cross_entropy: float32 one chunk of rows at a time",
    "reference-compiled": "the reference under torch.compile (inductor fuses it, as in a compiled model's own loss)",
    "liger": "Liger-Kernel's LigerFusedLinearCrossEntropyLoss (the projection and the loss fused)",
}


def reference(logits, labels):
    return token_cross_entropy(logits, labels, None, LABEL_SMOOTHING)


def loss_step(variant: str, projection: bool):
    """The function the variant times: (inputs, weight, labels) -> loss, with `inputs` the hidden states when
    `projection` (the logits are `inputs @ weight.T`), else the logits themselves (and `weight` None)."""
    if variant == "liger":
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        fused = LigerFusedLinearCrossEntropyLoss(label_smoothing=LABEL_SMOOTHING, reduction="sum")
        return lambda hidden, weight, labels: fused(weight, hidden, labels) / (labels != -100).sum().clamp(min=1)
    loss = {
        "reference": reference,
        "ours": lambda logits, labels: chunked_token_cross_entropy(logits, labels, None, LABEL_SMOOTHING),
        "reference-compiled": torch.compile(reference, dynamic=False),
    }[variant]
    if projection:
        return lambda hidden, weight, labels: loss(hidden @ weight.T, labels)
    return lambda logits, weight, labels: loss(logits, labels)


def inputs(rows: int, vocab: int, dtype: torch.dtype, device: str, d_model: int | None):
    """Seeded (inputs, weight, labels): logits of the scale of a trained model's, or hidden states and a weight."""
    g = torch.Generator(device).manual_seed(0)
    labels = torch.randint(0, vocab, (rows,), generator=g, device=device)
    labels[torch.rand(rows, generator=g, device=device) < IGNORED] = -100
    if d_model is None:
        logits = torch.randn(rows, vocab, generator=g, device=device).mul_(4)
        return logits.to(dtype).requires_grad_(), None, labels
    hidden = torch.randn(rows, d_model, generator=g, device=device).to(dtype).requires_grad_()
    weight = (torch.randn(vocab, d_model, generator=g, device=device) / d_model**0.5).to(dtype).requires_grad_()
    return hidden, weight, labels


def status_mb(field: str) -> float:
    """VmRSS (resident memory) or VmHWM (its peak) of this process, in MB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(f"{field}:"))


def reset_peak() -> None:
    """VmHWM back to the resident memory (Linux), so that making the inputs does not count as the variant's peak."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def measure_loss(
    variant: str,
    rows: int,
    vocab: int,
    dtype: str,
    device: str,
    d_model: int | None = None,
    repeats: int = 3,
    chunk_rows: int | None = None,
) -> dict:
    """Seconds of forward + backward of one variant (the median of `repeats` after a first, untimed call, whose own
    time is returned: for the compiled variant, its compilation), the peak memory it takes beyond its inputs in MB
    (on a CPU, of the whole process), and the loss, to compare the variants. `chunk_rows`:
    the rows per chunk of ours (`training.loss.LOSS_CHUNK_ROWS`, for this call)."""
    step = loss_step(variant, projection=d_model is not None)
    tensors = inputs(rows, vocab, DTYPES[dtype], device, d_model)
    leaves = [t for t in tensors[:2] if t is not None]
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
    else:
        reset_peak()
        baseline = status_mb("VmRSS")

    def forward_backward():
        for leaf in leaves:
            leaf.grad = None
        loss = step(*tensors)
        loss.backward()
        return loss.item()

    default_chunk_rows = training_loss.LOSS_CHUNK_ROWS
    training_loss.LOSS_CHUNK_ROWS = chunk_rows or default_chunk_rows
    try:
        first_seconds, loss = timed(forward_backward, device)
        seconds = statistics.median(timed(forward_backward, device)[0] for _ in range(repeats))
    finally:
        training_loss.LOSS_CHUNK_ROWS = default_chunk_rows
    peak = (
        (torch.cuda.max_memory_allocated() - baseline) / 2**20 if device == "cuda" else status_mb("VmHWM") - baseline
    )
    return {"seconds": seconds, "first_seconds": first_seconds, "peak_mb": peak, "loss": loss}


def ratio(value: float, reference: float) -> float | None:
    """value / reference to 2 decimals, or None where the reference measured nothing (a shape too small)."""
    return round(value / reference, 2) if reference else None


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=ROWS, help="target tokens (rows of logits)")
    parser.add_argument("--vocab", type=int, default=VOCAB, help="vocabulary size (columns)")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per variant (the median counts)")
    args = parser.parse_args(argv)
    results = {"cpu": cpu_model(), "rows": args.rows, "vocab": args.vocab, "threads": torch.get_num_threads()}
    for dtype in ("fp32", "bf16"):
        measured = {
            variant: in_fresh_process(measure_loss, variant, args.rows, args.vocab, dtype, "cpu", None, args.repeats)
            for variant in ("reference", "ours")
        }
        ours, ref = measured["ours"], measured["reference"]
        ratios = {
            "time_ratio": ratio(ours["seconds"], ref["seconds"]),
            "peak_ratio": ratio(ours["peak_mb"], ref["peak_mb"]),
        }
        results[dtype] = {**measured, **ratios}
        print(
            f"{dtype} logits, {args.rows} x {args.vocab}: reference {ref['seconds'] * 1e3:.0f} ms, "
            f"{ref['peak_mb']:.0f} MB; ours {ours['seconds'] * 1e3:.0f} ms ({ratios['time_ratio']}x), "
            f"{ours['peak_mb']:.0f} MB ({ratios['peak_ratio']}x); losses {ref['loss']:.6f} and {ours['loss']:.6f}",
            flush=True,
        )
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
