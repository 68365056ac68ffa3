#!/usr/bin/env python
"""Where a decoding step spends its time: our model and MarianMTModel on the benchmark's generation workload.

    python -m scripts.profile_decoding                       # small and base, greedy and beam 4, batch 1 and 16
    python -m scripts.profile_decoding --sizes small --batch_sizes 16 --beams 1

For each configuration and system: milliseconds per decoding step (wall clock, median of `--repeats` generations of 30
tokens, the systems alternating after a warm-up of each), split with torch.profiler into matrix products, the attention
kernel and the other tensor operations (self CPU time of the aten ops; with `--static_compiled` also inductor's own
kernels and dynamo's guards), the rest being Python and framework work; then the cProfile cumulative time of the
framework pieces that run at every step (generate()'s loop and logits processors, preparing the step's inputs, masks,
the cache, output recording, building output objects).

`--static_compiled` decodes through transformers' static cache with the step compiled (`CompileConfig(fullgraph=True)`,
inductor's CPU kernels, no CUDA graphs). At the tiny size the step is the host's work that a compiled GPU step leaves
too: generate()'s loop, the compiled call's guards and wrappers, the inputs prepared for it.
"""

import argparse
import cProfile
import os
import pstats
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import CompileConfig

from . import benchmark


SYSTEMS = {"ours-sdpa": "ours", "marian-sdpa": "MarianMTModel"}
MATMUL_OPS = {"aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm"}
ATTENTION_OPS = {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math"}
OPS = ("matmul", "attention", "other ops", "inductor's kernels", "dynamo's guards")  # ms per step, by torch.profiler
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
    "the compiled step's call (--static_compiled)": [("_dynamo/eval_frame.py", "compile_wrapper")],
    "signatures read (inspect.signature)": [("inspect.py", "signature")],
}


def generation(static_compiled: bool):
    """`benchmark.generate`, or the same through the static cache with the step compiled."""
    if not static_compiled:
        return benchmark.generate
    config = CompileConfig(fullgraph=True, mode=None)
    config._compile_all_devices = True  # transformers compiles only on accelerators by itself

    def generate(model, system, input_ids, attention_mask, num_beams):
        return model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            num_beams=num_beams,
            do_sample=False,
            min_new_tokens=benchmark.NEW_TOKENS,
            max_new_tokens=benchmark.NEW_TOKENS,
            cache_implementation="static",
            compile_config=config,
        )[:, 1:]

    return generate


def inputs(batch_size: int):
    sources = benchmark.make_workload(100)["sources"][:batch_size]
    ids = benchmark.pad(sources, benchmark.PAD, "cpu")
    return ids, (ids != benchmark.PAD).long()


def step_ms(generate, models: dict, ids, mask, beams, repeats) -> dict:
    """{system: median milliseconds per step}: every system warmed up first, then the systems alternate within each
    repeat, in an order that rotates (the first measurements of a process run slower: measuring one system fully
    before the other made whichever came first look slower)."""
    systems = list(models)
    for system in systems:
        generate(models[system], system, ids, mask, beams)
    times = {system: [] for system in systems}
    for repeat in range(repeats):
        for system in systems[repeat % len(systems) :] + systems[: repeat % len(systems)]:
            start = time.perf_counter()
            generate(models[system], system, ids, mask, beams)
            times[system].append(time.perf_counter() - start)
    return {system: statistics.median(seconds) * 1000 / benchmark.NEW_TOKENS for system, seconds in times.items()}


def op_breakdown(generate, model, system, ids, mask, beams) -> dict:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        generate(model, system, ids, mask, beams)
    totals = dict.fromkeys(OPS, 0.0)
    for event in prof.key_averages():
        if event.key.startswith("aten::"):
            key = "matmul" if event.key in MATMUL_OPS else "attention" if event.key in ATTENTION_OPS else "other ops"
        elif "CompiledFxGraph" in event.key:  # the compiled step's own kernels, beside the aten ops it calls
            key = "inductor's kernels"
        elif event.key == "TorchDynamo Cache Lookup":  # the compiled call's guards on its inputs
            key = "dynamo's guards"
        else:
            continue
        totals[key] += event.self_cpu_time_total / 1000
    return {key: value / benchmark.NEW_TOKENS for key, value in totals.items()}  # ms per step


def framework_breakdown(generate, model, system, ids, mask, beams) -> dict:
    """cProfile time of each framework piece, as a share of the step (cProfile slows Python down, not the ops)."""
    profiler = cProfile.Profile()
    profiler.runcall(generate, model, system, ids, mask, beams)
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
    parser.add_argument("--static_compiled", action="store_true", help="through the compiled static cache")
    args = parser.parse_args()
    generate = generation(args.static_compiled)
    torch.set_num_threads(args.threads)
    benchmark.quiet()
    path = "the compiled static cache" if args.static_compiled else "the dynamic cache, eager"
    print(f"torch {torch.__version__}, {args.threads} threads, {path}; milliseconds per decoding step")
    for size in args.sizes:
        models = {system: benchmark.build_model(system, size).eval() for system in SYSTEMS}
        for batch_size in args.batch_sizes:
            ids, mask = inputs(batch_size)
            for beams in args.beams:
                print(f"\n{size}, batch {batch_size}, {'greedy' if beams == 1 else f'beam {beams}'}")
                rows = {}
                with torch.no_grad():
                    steps = step_ms(generate, models, ids, mask, beams, args.repeats)
                    for system, model in models.items():
                        ops = op_breakdown(generate, model, system, ids, mask, beams)
                        rows[system] = {"step": steps[system], **ops, "python": steps[system] - sum(ops.values())}
                        rows[system].update(framework_breakdown(generate, model, system, ids, mask, beams))
                print(f"  {'':40s}" + "".join(f"{SYSTEMS[s]:>15s}" for s in rows))
                for key in next(iter(rows.values())):
                    unit = "ms" if key in ("step", *OPS, "python") else "% of step"
                    print(f"  {f'{key} ({unit})':40s}" + "".join(f"{rows[s][key]:15.2f}" for s in rows))
                speedup = rows["marian-sdpa"]["step"] / rows["ours-sdpa"]["step"]
                print(f"  ours is {speedup:.2f}x MarianMTModel")


if __name__ == "__main__":
    main()
