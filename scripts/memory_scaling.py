"""How peak memory grows with batch size and sequence length (the demo-sized model, CPU or CUDA).

    python -m scripts.memory_scaling [--modes ...] [--batch_sizes 1 16 64 256] [--lengths 16 64 256] [--json FILE]

Each cell runs in a fresh process and reports the peak memory above what the loaded model already holds: an inference
forward pass (no gradients, full logits), a training step (forward + backward with labels, SDPA and eager attention)
and greedy generation of 32 tokens. Lengths go up to the configured `max_position_embeddings`. Expected: memory grows
linearly in batch x length (the MB per 1,000 tokens column stays flat), plus heads x length^2 attention weights per
layer when eager attention has to materialise them.
"""

import argparse
import json

import torch

from hf_vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.recipes.common import DEMO_SIZES, expand_sizes

from .benchmark import in_fresh_process, peak_memory_mb, quiet


DEMO = dict(**expand_sizes(**DEMO_SIZES), vocab_size=8000, max_position_embeddings=256)
MODES = {"forward": "sdpa", "train": "sdpa", "train-eager": "eager", "generate": "sdpa"}
NEW_TOKENS = 32


def resident_mb(device: str) -> float:
    if device == "cuda":
        return torch.cuda.memory_allocated() / 2**20
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def measure(mode: str, batch_size: int, length: int, device: str) -> float:
    """Peak MB above the loaded model for one pass of `mode` on a full (batch_size, length) batch."""
    quiet()
    torch.manual_seed(0)
    config = VanillaTransformerConfig(**DEMO, label_smoothing=0.1, attn_implementation=MODES[mode])
    model = VanillaTransformerForConditionalGeneration(config).to(device).train(mode.startswith("train"))
    ids = torch.randint(4, config.vocab_size, (batch_size, length), device=device)
    mask = torch.ones_like(ids)
    baseline = resident_mb(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    if mode.startswith("train"):
        model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    elif mode == "forward":
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids)
    else:
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)
    return peak_memory_mb(device) - baseline


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if max(args.lengths) > DEMO["max_position_embeddings"]:
        parser.error(f"--lengths: at most max_position_embeddings={DEMO['max_position_embeddings']}")

    rows = []
    print(f"{'mode':<12}{'batch':>6}{'length':>7}{'tokens':>8}{'peak MB':>10}{'MB/1k tokens':>14}")
    for mode in args.modes:
        for batch_size in args.batch_sizes:
            for length in args.lengths:
                mb = in_fresh_process(measure, mode, batch_size, length, args.device)
                tokens = batch_size * length
                rows.append(dict(mode=mode, batch_size=batch_size, length=length, tokens=tokens, peak_mb=round(mb, 1)))
                print(
                    f"{mode:<12}{batch_size:>6}{length:>7}{tokens:>8}{mb:>10.1f}{1000 * mb / tokens:>14.2f}",
                    flush=True,
                )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "config": DEMO, "new_tokens": NEW_TOKENS, "rows": rows}, f, indent=2)
    return {"rows": rows}


if __name__ == "__main__":
    main()
