#!/usr/bin/env python
"""Where a decoding step spends its time: our model and MarianMTModel on the benchmark's generation workload.

    python -m scripts.profile_decoding                       # small and base, greedy and beam 4, batch 1 and 16
    python -m scripts.profile_decoding --sizes small --batch_sizes 16 --beams 1

For each configuration and system: milliseconds per decoding step (wall clock, median of `--repeats` generations of 30
tokens, the systems alternating after a warm-up of each), split with torch.profiler into matrix products, the attention
kernel and the other tensor operations (self CPU time of the aten ops), the rest being Python and framework work; then
the cProfile cumulative time of the framework pieces that run at every step (generate()'s loop and logits processors,
preparing the step's inputs, masks, the cache, output recording, building output objects).
"""

import argparse
import cProfile
import os
import pstats
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from . import benchmark


SYSTEMS = {"ours-sdpa": "ours", "marian-sdpa": "MarianMTModel"}
MATMUL_OPS = {"aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm"}
ATTENTION_OPS = {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math"}
# cProfile functions (file suffix, function name) -> the framework piece they stand for
PIECES = {
    "logits processors and stopping": [("logits_process.py", "__call__"), ("stopping_criteria.py", "__call__")],
    "prepare_inputs_for_generation": [("generation/utils.py", "prepare_inputs_for_generation")],
    "update model kwargs": [("generation/utils.py", "_update_model_kwargs_for_generation")],
    "masks": [("masking_utils.py", "create_causal_mask"), ("masking_utils.py", "create_bidirectional_mask")],
    "cache updates": [("cache_utils.py", "update")],
    "output recording (capture_outputs)": [("output_capturing.py", "wrapper")],
    "output objects (ModelOutput)": [("utils/generic.py", "__post_init__")],
    "config attribute reads": [("configuration_utils.py", "__getattribute__")],
}


def inputs(batch_size: int):
    sources = benchmark.make_workload(100)["sources"][:batch_size]
    ids = benchmark.pad(sources, benchmark.PAD, "cpu")
    return ids, (ids != benchmark.PAD).long()


def step_ms(models: dict, ids, mask, beams, repeats) -> dict:
    """{system: median milliseconds per step}: every system warmed up first, then the systems alternate within each
    repeat, in an order that rotates (the first measurements of a process run slower: measuring one system fully
    before the other made whichever came first look slower)."""
    systems = list(models)
    for system in systems:
        benchmark.generate(models[system], system, ids, mask, beams)
    times = {system: [] for system in systems}
    for repeat in range(repeats):
        for system in systems[repeat % len(systems) :] + systems[: repeat % len(systems)]:
            start = time.perf_counter()
            benchmark.generate(models[system], system, ids, mask, beams)
            times[system].append(time.perf_counter() - start)
    return {system: statistics.median(seconds) * 1000 / benchmark.NEW_TOKENS for system, seconds in times.items()}


def op_breakdown(model, system, ids, mask, beams) -> dict:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        benchmark.generate(model, system, ids, mask, beams)
    totals = {"matmul": 0.0, "attention": 0.0, "other ops": 0.0}
    for event in prof.key_averages():
        key = "matmul" if event.key in MATMUL_OPS else "attention" if event.key in ATTENTION_OPS else "other ops"
        if event.key.startswith("aten::"):
            totals[key] += event.self_cpu_time_total / 1000
    return {key: value / benchmark.NEW_TOKENS for key, value in totals.items()}  # ms per step


def framework_breakdown(model, system, ids, mask, beams) -> dict:
    """cProfile time of each framework piece, as a share of the step (cProfile slows Python down, not the ops)."""
    profiler = cProfile.Profile()
    profiler.runcall(benchmark.generate, model, system, ids, mask, beams)
    stats = pstats.Stats(profiler)
    total = stats.total_tt
    pieces = {}
    for piece, functions in PIECES.items():
        seconds = 0.0
        for (filename, _, name), (_, _, tottime, cumtime, _) in stats.stats.items():
            if any(filename.endswith(suffix) and name == function for suffix, function in functions):
                seconds += tottime if piece == "output recording (capture_outputs)" else cumtime
        pieces[piece] = 100 * seconds / total
    return pieces


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["small", "base"], choices=["tiny", "small", "base"])
    parser.add_argument("--batch_sizes", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    benchmark.quiet()
    print(f"torch {torch.__version__}, {args.threads} threads; milliseconds per decoding step")
    for size in args.sizes:
        models = {system: benchmark.build_model(system, size).eval() for system in SYSTEMS}
        for batch_size in args.batch_sizes:
            ids, mask = inputs(batch_size)
            for beams in args.beams:
                print(f"\n{size}, batch {batch_size}, {'greedy' if beams == 1 else f'beam {beams}'}")
                rows = {}
                with torch.no_grad():
                    steps = step_ms(models, ids, mask, beams, args.repeats)
                    for system, model in models.items():
                        ops = op_breakdown(model, system, ids, mask, beams)
                        rows[system] = {"step": steps[system], **ops, "python": steps[system] - sum(ops.values())}
                        rows[system].update(framework_breakdown(model, system, ids, mask, beams))
                print(f"  {'':40s}" + "".join(f"{SYSTEMS[s]:>15s}" for s in rows))
                for key in next(iter(rows.values())):
                    unit = "ms" if key in ("step", "matmul", "attention", "other ops", "python") else "% of step"
                    print(f"  {f'{key} ({unit})':40s}" + "".join(f"{rows[s][key]:15.2f}" for s in rows))
                speedup = rows["marian-sdpa"]["step"] / rows["ours-sdpa"]["step"]
                print(f"  ours is {speedup:.2f}x MarianMTModel")


if __name__ == "__main__":
    main()
