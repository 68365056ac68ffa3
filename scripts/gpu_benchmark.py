"""The benchmark on a GPU, as the GPU acceptance run (`python -m scripts.gpu_acceptance`) records it: ours against
MarianMTModel at the paper's base size in bf16 autocast, in one run.

    python -m scripts.gpu_benchmark --json FILE [--dry_run]

- training at a batch that fills the GPU (FILLED_BATCH pairs, about 25,000 target tokens: the paper's batch) with the
  benchmark's loss, optimizer and sentence lengths: target tokens/s, peak memory, and model FLOP utilisation against
  the card's dense bf16 peak (DENSE_BF16_TFLOPS, found by the GPU's name) and against a large bf16 matmul measured in
  the same run;
- the benchmark's own workload (`scripts.benchmark`): training at its batch of 32 pairs, greedy and beam-4 generation;
- CTranslate2 on CUDA (MarianMTModel converted, and our export), where its wheel runs;
- greedy generation through the compiled static-cache path (ours with bf16 weights), against the same model's
  uncompiled greedy generation.

Every measurement runs in a fresh process, ours and MarianMTModel alternating; FILE is rewritten after each one, so a
run stopped early keeps what it measured. `--dry_run`: the same steps on the CPU at the tiny size, in this process (the
fresh processes would take most of its time), for CI.
"""

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers
from transformers.generation import CompileConfig

from . import benchmark
from .benchmark import NEW_TOKENS, OURS, PAD, REFERENCE, in_fresh_process, quiet, timed


# Dense (no sparsity) bf16 tensor-core peaks from the vendors' datasheets, in TFLOP/s, by a name that appears as a
# whole word in torch.cuda.get_device_name(); the longest such name wins (A100 over A10, L40S over L4, H100 NVL over
# H100, which is the SXM part: "NVIDIA H100 80GB HBM3").
DENSE_BF16_TFLOPS = {
    "B200": 2250,
    "H200": 989,
    "H200 NVL": 835,
    "GH200": 989,
    "H100": 989,
    "H100 NVL": 835,
    "H100 PCIe": 756,
    "A100": 312,
    "A10": 125,
    "L40S": 362,
    "L40": 181,
    "L4": 121,
    "RTX 4090": 165,
}
FILLED_BATCH = 1024  # pairs of 10-40 tokens: about 25,600 target and 25,600 source tokens, as in the paper
RUNS = {  # the GPU run, and the dry run that checks the same steps on a CPU in seconds
    "gpu": dict(
        device="cuda",
        size="base",
        filled_batch=FILLED_BATCH,
        passes=5,
        repeats=2,
        matmul=8192,
        fresh=True,
        threads=os.cpu_count(),
    ),
    # One thread: on a busy machine with few cores, a second one spin-waits and makes each step ten times slower.
    "dry_run": dict(
        device="cpu", size="tiny", filled_batch=16, passes=1, repeats=1, matmul=256, fresh=False, threads=1
    ),
}
CT2_COMPUTE_TYPES = {"cuda": ("bfloat16", "int8_bfloat16"), "cpu": ("float32",)}
TARGET_SPEEDUP, TARGET_UTILISATION = 1.3, 0.40  # training, ours vs MarianMTModel; fraction of the dense bf16 peak
# The compiled static-cache path against eager generate() at COMPILED_BATCH sources per call (transformers measured
# 3.5x for T5 this way).
COMPILED_BATCH, TARGET_COMPILED_SPEEDUP = 64, 3.0


def card_peak(device_name: str) -> tuple[str, float] | None:
    """(card, dense bf16 FLOP/s) of a GPU named `device_name`, or None for a card not in DENSE_BF16_TFLOPS."""
    found = [
        card
        for card in DENSE_BF16_TFLOPS
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(card)}(?![A-Za-z0-9])", device_name)
    ]
    if not found:
        return None
    card = max(found, key=len)
    return card, DENSE_BF16_TFLOPS[card] * 1e12


# ---------------------------------------------------------------------------------------------------- measurements


def measure_matmul(device: str, size: int) -> float:
    """FLOP/s of a bf16 (size x size) @ (size x size) product on random data: median of 5 timings after a warm-up."""
    a, b = (torch.randn(size, size, device=device, dtype=torch.bfloat16) for _ in range(2))
    calls = 10 if device == "cuda" else 1
    times = [timed(lambda: [a @ b for _ in range(calls)], device)[0] for _ in range(6)][1:]
    return calls * 2 * size**3 / statistics.median(times)


def measure_training(system: str, size: str, device: str, workload: dict, passes: int) -> dict:
    """Seconds per pass over the workload's training batches in bf16 autocast (after a warm-up pass over every
    batch), and the peak memory in MB."""
    quiet()
    model = benchmark.build_model(system, size).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [benchmark.training_batch(pairs, device) for pairs in workload["train"]]

    def one_pass():
        for batch in batches:
            with torch.autocast(device, torch.bfloat16):
                loss = benchmark.training_loss(model, system, batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    one_pass()  # warm-up: every batch shape once
    seconds = timed(lambda: [one_pass() for _ in range(passes)], device)[0]
    return {"seconds": seconds / passes, "peak_mb": benchmark.peak_memory_mb(device)}


def measure_compiled_greedy(size: str, device: str, workload: dict) -> dict:
    """Seconds of greedy generation of the workload's sources, COMPILED_BATCH per call, by our model with bf16 weights:
    with the default dynamic cache, and through the static cache with the decoding step compiled (fullgraph, so a graph
    break fails), with the compilation's own time and how many rows came out identical. Sources are padded to one
    length: one compilation."""
    quiet()
    model = benchmark.build_model(OURS, size).to(device, torch.bfloat16).eval()
    width = max(map(len, workload["sources"]))
    rows = [source + [PAD] * (width - len(source)) for source in workload["sources"]]
    batches = []
    for i in range(0, len(rows), COMPILED_BATCH):
        ids = torch.tensor(rows[i : i + COMPILED_BATCH], device=device)
        batches.append((ids, (ids != PAD).long()))
    # On a GPU, transformers' default: CUDA graphs ("reduce-overhead") through inductor. On the CPU (the dry run), the
    # same capture without code generation.
    compile_config = (
        CompileConfig(fullgraph=True)
        if device == "cuda"
        else CompileConfig(fullgraph=True, backend="eager", mode=None)
    )
    compile_config._compile_all_devices = True  # transformers compiles only on accelerators by itself

    def greedy(batch_list, **extra):
        with torch.no_grad():
            return [
                model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    num_beams=1,
                    do_sample=False,
                    min_new_tokens=NEW_TOKENS,
                    max_new_tokens=NEW_TOKENS,
                    **extra,
                )
                for ids, mask in batch_list
            ]

    greedy(batches[:1])  # warm-up
    dynamic_seconds, dynamic = timed(lambda: greedy(batches), device)
    static = dict(cache_implementation="static", compile_config=compile_config)
    compile_seconds = timed(lambda: greedy(batches[:1], **static), device)[0]
    greedy(batches[:1], **static)  # a second call: CUDA graphs are recorded after a warm-up run
    compiled_seconds, compiled = timed(lambda: greedy(batches, **static), device)
    identical = sum(torch.equal(a, b) for x, y in zip(dynamic, compiled) for a, b in zip(x, y))
    return {
        "dynamic": dynamic_seconds,
        "compiled": compiled_seconds,
        "compile_seconds": compile_seconds,
        "identical_rows": identical,
        "rows": len(rows),
        "batch": COMPILED_BATCH,
    }


# ---------------------------------------------------------------------------------------------------- the run


class Results:
    """What the run has measured so far, rewritten to `path` after every measurement."""

    def __init__(self, path: str, settings: dict):
        self.path, self.fresh = Path(path), settings["fresh"]
        self.data = {"settings": settings, "peaks": {}, "measurements": {}, "errors": {}, "skipped": {}}
        self.save()

    def record(self, name: str, value) -> None:
        self.data["measurements"].setdefault(name, []).append(value)
        self.save()

    def save(self) -> None:
        partial = self.path.with_name(self.path.name + ".partial")  # replaced at once: never half a file
        partial.write_text(json.dumps(self.data, indent=2) + "\n")
        os.replace(partial, self.path)


def attempt(results: Results, name: str, fn, *args):
    """fn(*args), in a fresh process unless a dry run; a failure is recorded under `name` and the run goes on."""
    start = time.perf_counter()
    try:
        value = in_fresh_process(fn, *args) if results.fresh else fn(*args)
    except Exception as error:  # one measurement's failure must not lose the others
        results.data["errors"][name] = f"{type(error).__name__}: {error}"[-2000:]
        results.save()
        print(f"{name}: FAILED ({error})", flush=True)
        return None
    print(f"{name}: {value} ({time.perf_counter() - start:.0f} s)", flush=True)
    return value


def run(json_path: str, dry_run: bool) -> dict:
    plan = RUNS["dry_run" if dry_run else "gpu"]
    device, size, threads = plan["device"], plan["size"], plan["threads"]
    torch.set_num_threads(threads)
    device_name = torch.cuda.get_device_name(0) if device == "cuda" else benchmark.cpu_model()
    card = card_peak(device_name) if device == "cuda" else None
    vocab_size = benchmark.SIZES[size]["vocab_size"]
    filled = benchmark.make_workload(vocab_size, train_batch=plan["filled_batch"])
    standard = benchmark.make_workload(vocab_size)
    results = Results(
        json_path,
        {
            **plan,
            "device_name": device_name,
            "card": card and card[0],
            "precision": "bf16",
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "sizes": benchmark.SIZES[size],
            "filled_workload": {
                "pairs_per_batch": plan["filled_batch"],
                "batches": len(filled["train"]),
                "target_tokens_per_batch": benchmark.workload_counts(size, filled)["train"][0] / len(filled["train"]),
            },
        },
    )
    results.data["peaks"]["card_dense_bf16"] = card and card[1]
    matmul = attempt(results, f"matmul {plan['matmul']}", measure_matmul, device, plan["matmul"])
    results.data["peaks"][f"matmul_{plan['matmul']}"] = matmul
    results.save()

    systems = [OURS, REFERENCE]
    for repeat in range(plan["repeats"]):
        for system in systems[repeat % 2 :] + systems[: repeat % 2]:
            value = attempt(
                results, f"{system} training, filled batch", measure_training, system, size, device, filled,
                plan["passes"],
            )  # fmt: skip
            if value:
                results.record(f"{system}/train_filled", value)
    for system in systems:
        value = attempt(
            results, f"{system}, the benchmark's workload", benchmark.measure_torch, system, size, "bf16", device,
            threads, standard,
        )  # fmt: skip
        if value:
            results.record(f"{system}/standard", value)
    measure_ctranslate2(results, size, device, threads, standard)
    # Last: compiling takes the longest, and a run stopped at its time budget keeps the rest.
    value = attempt(results, "compiled static cache", measure_compiled_greedy, size, device, standard)
    if value:
        results.record(f"{OURS}-compiled/compiled", value)
    results.data["rows"] = summarize(results.data, size, filled, standard)
    results.data["targets"] = check_targets(results.data["rows"], results.data["peaks"])
    results.save()
    return results.data


def measure_ctranslate2(results: Results, size: str, device: str, threads: int, workload: dict) -> None:
    """CTranslate2's greedy and beam-4 rows: MarianMTModel converted by its converter, and our export."""
    systems = {s: t for s, t in benchmark.ct2_systems(device).items() if t in CT2_COMPUTE_TYPES[device]}
    if not systems:
        results.data["skipped"]["ctranslate2"] = "ctranslate2 is not installed, or this build has no CUDA support"
        results.save()
        return
    with tempfile.TemporaryDirectory() as tmp:
        folders = {
            "ct2": attempt(results, "convert MarianMTModel", benchmark.convert_for_ct2, size, f"{tmp}/ct2"),
            "ct2-ours": attempt(results, "export ours", benchmark.export_ours_for_ct2, size, f"{tmp}/ct2-ours"),
        }
        for system, compute_type in systems.items():
            folder = folders["ct2-ours" if system.startswith("ct2-ours") else "ct2"]
            if folder is None:
                continue
            try:  # CTranslate2 times itself in a process of its own, without torch
                seconds = benchmark.measure_ct2(folder, compute_type, device, threads, workload)
            except RuntimeError as error:
                results.data["errors"][system] = str(error)[-2000:]
                results.save()
                continue
            results.record(f"{system}/standard", seconds)
            results.data.setdefault("ct2_labels", {})[system] = benchmark.label(system, systems)
            results.save()


# ---------------------------------------------------------------------------------------------------- the summary


def summarize(data: dict, size: str, filled: dict, standard: dict) -> list[dict]:
    """One row per system: medians of its measurements as tokens/s, utilisation and ratios to MarianMTModel."""
    filled_tokens, filled_flops = benchmark.workload_counts(size, filled)["train"]
    counts = benchmark.workload_counts(size, standard)
    card, matmul = (
        data["peaks"].get("card_dense_bf16"),
        next((v for k, v in data["peaks"].items() if k.startswith("matmul")), None),
    )
    rows = {}
    for name, values in data["measurements"].items():
        system, kind = name.split("/")
        row = rows.setdefault(system, {"system": system, "label": system_label(system, data)})
        if kind == "train_filled":
            seconds = statistics.median(v["seconds"] for v in values)
            row["train_filled_tokens_per_s"] = filled_tokens / seconds
            row["train_filled_peak_mb"] = max(v["peak_mb"] for v in values)
            if card:
                row["train_filled_utilisation"] = filled_flops / seconds / card
            if matmul:
                row["train_filled_of_matmul"] = filled_flops / seconds / matmul
        elif kind == "compiled":
            (value,) = values
            generated = counts["greedy"][0]
            row["greedy_tokens_per_s"] = generated / value["compiled"]
            row["uncompiled_greedy_tokens_per_s"] = generated / value["dynamic"]
            row["compile_seconds"] = value["compile_seconds"]
            row["identical_rows"] = f"{value['identical_rows']}/{value['rows']}"
            row["compiled_batch"] = value["batch"]
            row["compiled_speedup"] = value["dynamic"] / value["compiled"]
        else:
            (value,) = values
            for task in benchmark.TASKS:
                if task in value:
                    row[f"{task}_tokens_per_s"] = counts[task][0] / value[task]
            if "train_peak_mb" in value:
                row["train_peak_mb"] = value["train_peak_mb"]
    reference = rows.get(REFERENCE, {})
    for row in rows.values():
        if "compiled_speedup" in row:  # another batch size than MarianMTModel's rows: compared with its own eager run
            row["vs_marian"] = {}
            continue
        row["vs_marian"] = {
            metric: row[metric] / reference[metric]
            for metric in (
                "train_filled_tokens_per_s",
                "train_tokens_per_s",
                "greedy_tokens_per_s",
                "beam4_tokens_per_s",
            )
            if metric in row and metric in reference
        }
    return list(rows.values())


def system_label(system: str, data: dict) -> str:
    if system == f"{OURS}-compiled":
        return "ours, compiled static cache (bf16 weights)"
    return benchmark.TORCH_SYSTEMS.get(system) or data.get("ct2_labels", {}).get(system, system)


def check_targets(rows: list[dict], peaks: dict) -> list[dict]:
    """The targets: training at the base size in bf16 with a batch that fills the GPU (against MarianMTModel and the
    card's peak), and the compiled static-cache path against eager generation."""
    ours = next((row for row in rows if row["system"] == OURS), {})
    compiled = next((row for row in rows if "compiled_speedup" in row), {})
    targets = []
    if "train_filled_tokens_per_s" in ours.get("vs_marian", {}):
        ratio = ours["vs_marian"]["train_filled_tokens_per_s"]
        targets.append(
            {"target": f"training >= {TARGET_SPEEDUP}x MarianMTModel (sdpa) tokens/s", "value": ratio,
             "passed": ratio >= TARGET_SPEEDUP}
        )  # fmt: skip
    if "train_filled_utilisation" in ours:
        utilisation = ours["train_filled_utilisation"]
        targets.append(
            {"target": f"training >= {TARGET_UTILISATION:.0%} of the dense bf16 peak", "value": utilisation,
             "passed": utilisation >= TARGET_UTILISATION}
        )  # fmt: skip
    if compiled:
        speedup = compiled["compiled_speedup"]
        targets.append(
            {"target": f"compiled static-cache greedy >= {TARGET_COMPILED_SPEEDUP}x eager at batch "
             f"{compiled['compiled_batch']}", "value": speedup, "passed": speedup >= TARGET_COMPILED_SPEEDUP}
        )  # fmt: skip
    return targets


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="the results file, rewritten after every measurement")
    parser.add_argument("--dry_run", action="store_true", help="the same steps on the CPU at the tiny size")
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("CUDA is not available: this benchmark needs a GPU (or --dry_run)")
    data = run(args.json, args.dry_run)
    for row in data["rows"]:
        print(row)
    return data


if __name__ == "__main__":
    main()
