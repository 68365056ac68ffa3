"""Where a training step's time goes on this machine, eager and compiled (`torch.compile`, inductor: the whole model,
and each layer on its own as accelerate's regional compilation does), on batches without padding and on the
benchmark's padded batches, in one process:

    python -m scripts.compile_profile [--size small] [--threads 2] [--repeats 3]

Each workload trains our model eager and compiled (forward, backward; label smoothing 0.1, dropout 0.1) on the same
batches: `equal` gives every pair 25 source and 25 target tokens, `varied` the benchmark's random lengths of 10-40
(right-padded: about a third of the positions are padding, which the eager and regional steps pack away and the
whole-model graph computes). Passes over the batches alternate between the models; the fastest of `--repeats` counts.
One more pass of each runs under torch.profiler, and the operators' own time is split into matrix products, attention,
inductor's compiled kernels and the rest. Prints one line of JSON.
"""

import argparse
import json
import random
import time

import torch

from hf_vanilla_transformer.training.report import cpu_model

from .benchmark import COMPILED, REGIONAL, SIZES, TRAIN_LENGTHS, build_model, training_batch


WORKLOADS = {"equal": (25, 25), "varied": TRAIN_LENGTHS}
SYSTEMS = {"eager": "ours-sdpa", "compiled": COMPILED, "regional": REGIONAL}
BATCHES, PAIRS = 4, 32
# Operators by kind, the first whose key is in the name; inductor's kernels run inside "CompiledFxGraph" calls.
KINDS = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm"),
    "attention": ("attention",),
    "compiled kernels": ("compiledfxgraph",),
}


def batches(size: str, lengths: tuple[int, int], seed: int = 0) -> list[dict]:
    rng, vocab_size = random.Random(seed), SIZES[size]["vocab_size"]

    def sentence():
        return [rng.randrange(4, vocab_size) for _ in range(rng.randint(*lengths) - 1)] + [2]

    return [training_batch([(sentence(), sentence()) for _ in range(PAIRS)], "cpu") for _ in range(BATCHES)]


def train_pass(model, workload: list[dict]) -> float:
    start = time.perf_counter()
    for batch in workload:
        model(**batch).loss.backward()
    return time.perf_counter() - start


def shares(model, workload: list[dict]) -> dict:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        train_pass(model, workload)
    by_kind = dict.fromkeys([*KINDS, "other"], 0.0)
    for event in prof.key_averages():
        name = event.key.lower()
        kind = next((kind for kind, keys in KINDS.items() if any(key in name for key in keys)), "other")
        by_kind[kind] += event.self_cpu_time_total / 1e6
    total = sum(by_kind.values())
    return {kind: round(seconds / total, 3) for kind, seconds in by_kind.items()}


def measure(size: str, repeats: int) -> dict:
    results = {}
    for name, lengths in WORKLOADS.items():
        workload = batches(size, lengths)
        models = {system: build_model(model, size).train() for system, model in SYSTEMS.items()}
        first = {system: train_pass(model, workload) for system, model in models.items()}  # compiles
        seconds = {system: [] for system in models}
        for _ in range(repeats):
            for system, model in models.items():
                seconds[system].append(train_pass(model, workload))
        tokens = sum(int((batch["labels"] != -100).sum()) for batch in workload)
        padded = sum(batch["labels"].numel() for batch in workload)
        results[name] = {
            "target_tokens": tokens,
            "target_padding": round(1 - tokens / padded, 3),
            "first_pass_seconds": first,
            "seconds": {system: min(times) for system, times in seconds.items()},
            "speedups": {system: round(min(seconds["eager"]) / min(times), 3) for system, times in seconds.items()},
            "shares": {system: shares(model, workload) for system, model in models.items()},
        }
    return results


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=list(SIZES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    summary = {
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "size": args.size,
        "threads": args.threads,
        "workloads": measure(args.size, args.repeats),
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
