"""The benchmark on a GPU, as the GPU acceptance run (`python -m scripts.gpu_acceptance`) records it: ours (eager
and compiled) against MarianMTModel at the paper's base and big sizes in bf16 autocast, in one run.

    python -m scripts.gpu_benchmark --json FILE [--measure NAME ...] [--dry_run]

The measurements (`--measure`: a subset, in MEASUREMENTS' order; FILE's earlier measurements are kept, so that two
calls can split them around other work):
- `SIZE-SYSTEM`: training at a batch that fills the GPU (FILLED_BATCH pairs, about 25,000 target tokens: the paper's
  batch) with the benchmark's loss, sentence lengths and fused AdamW, for SIZE base or big and SYSTEM ours (eager),
  compiled (ours under `torch.compile`, its first pass timed as the compilation), cudagraphs (compiled with
  `mode="reduce-overhead"`: CUDA graphs), regional (each layer compiled on its own, as accelerate's regional
  compilation compiles) or marian: target tokens/s, peak
  memory, model FLOP utilisation against the card's dense bf16 peak (DENSE_BF16_TFLOPS, found by the GPU's name) and
  against a large bf16 matmul measured in the same run, and one step under `torch.profiler`: kernel time by kind,
  the time the GPU sat idle between kernels and the host's longest operators;
- `decoding`: greedy generation through the compiled static-cache path (ours with bf16 weights) against the same
  model's uncompiled greedy generation at batch COMPILED_BATCH, with a profile of one compiled call;
- `standard`: the benchmark's own workload (`scripts.benchmark`): training at its batch of 32 pairs, greedy and
  beam-4 generation, ours and MarianMTModel; and CTranslate2 on CUDA where its wheel runs;
- `attention`: self-attention with a padding mask alone, forward and backward in bf16, through each of torch's
  attention kernels that takes a mask (ATTENTION_BACKENDS; cuDNN's is the one torch tries first on Hopper and
  Blackwell GPUs): seconds per call at the paper's batch, and the first call at each of ATTENTION["new_lengths"], where
  cuDNN builds an execution plan. The package's commands take cuDNN's kernel out of first place
  (`hf_vanilla_transformer.cuda.CUDA_DEFAULTS`); this says what that costs at one shape and saves at every new one;
- `shapes`: a bf16 linear layer of the demo's sizes alone, forward and backward, small enough that the host's work sets
  its time: seconds per call at one row count, and at a new row count every call, where cuBLAS chooses its kernels
  anew (as packed rows not rounded up, `hf_vanilla_transformer.model.padding.PACKED_ROWS_MULTIPLE`, would meet at
  every batch);
- `loss`: the output projection and the loss alone, forward and backward, at the paper's batch (LOSS_SHAPE: 25,000
  target tokens, bf16 hidden states and weight), seconds and peak memory beyond the inputs (`scripts.loss_benchmark`):
  the model's own loss (a float32 copy of all logits), the trainer's `chunked_token_cross_entropy` (float32 one chunk
  of rows at a time, at LOSS_CHUNK_ROWS and the rows of LOSS_CHUNKS), the former under `torch.compile` (as a compiled
  model runs it), and Liger-Kernel's fused linear cross-entropy where `liger_kernel` imports.

Every measurement runs in a fresh process; FILE is rewritten after each one, so a run stopped early keeps what it
measured. `--dry_run`: the same steps on the CPU at the tiny size, in this process (the fresh processes would take
most of its time), for CI.
"""

import argparse
import functools
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

from . import benchmark, loss_benchmark
from .benchmark import (
    COMPILED,
    COMPILED_SYSTEMS,
    CUDA_GRAPHS,
    NEW_TOKENS,
    OURS,
    PAD,
    REFERENCE,
    REGIONAL,
    in_fresh_process,
    quiet,
    timed,
)


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
        sizes={"base": "base", "big": "big"},
        filled_batch=FILLED_BATCH,
        passes=3,
        matmul=8192,
        fresh=True,
        threads=os.cpu_count(),
        loss_shape=dict(rows=25000, vocab=37000, d_model=512),
        attention=dict(batch=1024, heads=8, head_dim=64, length=32, new_lengths=tuple(range(17, 25))),
        shapes=dict(rows=1000, d_model=256, ffn_dim=1024, calls=200),
    ),
    # One thread: on a busy machine with few cores, a second one spin-waits and makes each step ten times slower.
    "dry_run": dict(
        device="cpu",
        sizes={"base": "tiny", "big": "tiny"},
        filled_batch=16,
        passes=1,
        matmul=256,
        fresh=False,
        threads=1,
        loss_shape=dict(rows=100, vocab=300, d_model=32),
        attention=dict(batch=4, heads=2, head_dim=16, length=8, new_lengths=(5, 6)),
        shapes=dict(rows=20, d_model=32, ffn_dim=64, calls=5),
    ),  # fmt: skip
}
# Every measurement, in the order of a full run: what the targets need first, the compilations of the big size last.
DECODING = "ours-static-compiled"  # the decoding measurement's row
TRAINING_SYSTEMS = {
    "ours": OURS,
    "compiled": COMPILED,
    "cudagraphs": CUDA_GRAPHS,
    "regional": REGIONAL,
    "marian": REFERENCE,
}
MEASUREMENTS = ["base-ours", "base-marian", "attention", "shapes", "base-compiled", "base-regional", "base-cudagraphs"]
MEASUREMENTS += ["decoding", "big-ours", "big-compiled", "big-regional", "big-marian", "standard", "loss"]
# torch's attention kernels that take a padding mask, by device (flash attention takes none).
ATTENTION_BACKENDS = {"cuda": ("CUDNN_ATTENTION", "EFFICIENT_ATTENTION"), "cpu": ("MATH",)}
# Rows per chunk of `chunked_token_cross_entropy` measured beside its default, `training.loss.LOSS_CHUNK_ROWS`.
LOSS_CHUNKS = (512, 8192)
CT2_COMPUTE_TYPES = {"cuda": ("bfloat16", "int8_bfloat16"), "cpu": ("float32",)}
# Training, ours (the fastest of eager and the compiled systems) vs MarianMTModel; fraction of the dense bf16 peak
# per size.
TARGET_SPEEDUP, TARGET_UTILISATION = 2.0, {"base": 0.30, "big": 0.40}
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


def measure_attention(device: str, backend: str, shape: dict) -> dict:
    """Seconds per forward and backward of bf16 self-attention (`shape`: batch rows of `length` positions, a quarter of
    them padding, `heads` of `head_dim`), through SDPA's `backend` only: at one shape after a warm-up (median of 5),
    and on the first call at each of `new_lengths` (mean and most)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    batch, heads, head_dim = shape["batch"], shape["heads"], shape["head_dim"]

    def call(length):
        q, k, v = (
            torch.randn(batch, heads, length, head_dim, device=device, dtype=torch.bfloat16, requires_grad=True)
            for _ in range(3)
        )
        keep = torch.arange(length, device=device) < length - length // 4  # each row's padding at its end
        mask = keep[None, None, None, :].expand(batch, 1, length, length)
        with sdpa_kernel(getattr(SDPBackend, backend)):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()

    call(shape["length"])
    steady = statistics.median(timed(lambda: call(shape["length"]), device)[0] for _ in range(5))
    first = [timed(functools.partial(call, n), device)[0] for n in shape["new_lengths"]]
    return {"seconds": steady, "first_call_seconds": statistics.mean(first), "first_call_most": max(first)}


def measure_training(system: str, size: str, device: str, workload: dict, passes: int) -> dict:
    """Seconds per pass over the workload's training batches in bf16 autocast with fused AdamW (after a warm-up pass
    over every batch: for the compiled model, its compilation), the peak memory in MB, and one step's profile."""
    quiet()
    model = benchmark.build_model(system, size).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    batches = [benchmark.training_batch(pairs, device) for pairs in workload["train"]]

    def step(batch):
        with torch.autocast(device, torch.bfloat16):
            loss = benchmark.training_loss(model, system, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def one_pass():
        for batch in batches:
            step(batch)

    warmup_seconds = timed(one_pass, device)[0]  # every batch shape once
    seconds = timed(lambda: [one_pass() for _ in range(passes)], device)[0]
    return {
        "seconds": seconds / passes,
        "warmup_seconds": warmup_seconds,
        "peak_mb": benchmark.peak_memory_mb(device),
        "profile": profile(lambda: step(batches[0]), device),
    }


# Kernel kinds by the substrings of their names (lower case), the first that matches; on a CPU, operator names.
KERNEL_KINDS = {
    "matmul": ("gemm", "cutlass", "nvjet", "xmma", "cublas", "aten::mm", "aten::addmm", "aten::bmm"),
    "attention": ("flash", "fmha", "attention", "efficient"),
    "optimizer": ("multi_tensor", "adam"),
    "compiled (inductor's fused kernels)": ("triton",),
    "softmax and loss": ("softmax", "nll", "cross_entropy"),
    "layer norm": ("layer_norm", "layernorm"),
    "reductions": ("reduce",),
    "element-wise and copies": ("elementwise", "vectorized", "unrolled", "copy", "fill", "dropout", "index", "cat"),
}


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, keys in KERNEL_KINDS.items() if any(key in lowered for key in keys)), "other")


def profile(fn, device: str) -> dict:
    """One call of `fn` under torch.profiler: its wall time, the GPU's kernel time by kind (on a CPU: operators' own
    time), the time no kernel ran (idle: the GPU waiting for the host), and the longest kernels; or the error that
    kept it from being measured (the timings beside it stay)."""
    try:
        return profiled(fn, device)
    except Exception as error:  # a profiler's failure must not cost the measurement it describes
        return {"error": f"{type(error).__name__}: {error}"[-500:]}


def profiled(fn, device: str) -> dict:
    fn()  # as measured: warm
    with torch.profiler.profile(activities=profiler_activities(device)) as prof:
        wall = timed(fn, device)[0]
    return profile_summary(prof, wall, device)


def profiler_activities(device: str) -> list:
    return [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])


def profile_summary(prof, wall: float, device: str) -> dict:
    """What `profile` reports of a finished profiler that ran for `wall` seconds; on a GPU also the host's operators
    that took the longest (their own time: waits for the device show as cudaStreamSynchronize and the like)."""
    if device == "cuda":
        spans = [
            (event.name, event.time_range.start, event.time_range.end)
            for event in prof.events()
            if event.device_type == torch.autograd.DeviceType.CUDA
        ]
    else:
        spans = [
            (event.key, 0, event.self_cpu_time_total)
            for event in prof.key_averages()
            if event.key.startswith("aten::")
        ]
    by_kind, by_name = {}, {}
    for name, begin, end in spans:
        kind = by_kind.setdefault(kernel_kind(name), {"ms": 0.0, "kernels": 0})
        kind["ms"] += (end - begin) / 1e3
        kind["kernels"] += 1
        by_name[name] = by_name.get(name, 0.0) + (end - begin) / 1e3
    busy, last = 0.0, None  # the union of the kernels' intervals, in ms
    if device == "cuda":
        for begin, end in sorted((b, e) for _, b, e in spans):
            if last is None or begin > last:
                busy += (end - begin) / 1e3
                last = end
            elif end > last:
                busy += (end - last) / 1e3
                last = end
    kernel_ms = sum(kind["ms"] for kind in by_kind.values())
    for kind in by_kind.values():
        kind["share"] = kind["ms"] / kernel_ms if kernel_ms else None
    return {
        "wall_ms": wall * 1e3,
        "kernel_ms": kernel_ms,
        "busy_ms": busy if device == "cuda" else None,
        "idle_fraction": 1 - busy / (wall * 1e3) if device == "cuda" and wall else None,
        "kernels": len(spans),
        "kinds": dict(sorted(by_kind.items(), key=lambda item: -item[1]["ms"])),
        "top": [[name[:100], ms] for name, ms in sorted(by_name.items(), key=lambda item: -item[1])[:8]],
        "host_top": [
            [event.key[:100], event.self_cpu_time_total / 1e3]
            for event in sorted(prof.key_averages(), key=lambda event: -event.self_cpu_time_total)[:8]
        ]
        if device == "cuda"  # on a CPU, `top` lists the same operators
        else None,
    }


def measure_compiled_greedy(size: str, device: str, workload: dict) -> dict:
    """Seconds of greedy generation of the workload's sources, COMPILED_BATCH per call, by our model with bf16 weights:
    with the default dynamic cache, and through the static cache with the decoding step compiled (fullgraph, so a graph
    break fails), with the compilation's own time, how many rows came out identical and a profile of one compiled call.
    Sources are padded to one length: one compilation."""
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
        "profile": profile(lambda: greedy(batches[:1], **static), device),
        "eager_profile": profile(lambda: greedy(batches[:1]), device),
    }


# ---------------------------------------------------------------------------------------------------- the run


class Results:
    """What the run has measured so far, rewritten to `path` after every measurement."""

    def __init__(self, path: str, settings: dict):
        self.path, self.fresh = Path(path), settings["fresh"]
        self.data = {
            "settings": settings,
            "peaks": {},
            "measurements": {},
            "errors": {},
            "skipped": {},
            "loss": {},
            "attention": {},
            "shapes": {},
        }
        try:  # an earlier call's measurements of the same run (--measure splits them)
            earlier = json.loads(self.path.read_text())
        except (OSError, ValueError):
            earlier = {}
        if earlier.get("settings", {}).get("device_name") == settings["device_name"]:
            for key in ("peaks", "measurements", "errors", "skipped", "loss", "attention", "shapes"):
                self.data[key].update(earlier.get(key, {}))
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
    shown = {k: v for k, v in value.items() if "profile" not in k} if isinstance(value, dict) else value
    print(f"{name}: {shown} ({time.perf_counter() - start:.0f} s)", flush=True)
    return value


def measure_matmul_shapes(device: str, shape: dict) -> dict:
    """Seconds per forward and backward of a bf16 (d_model -> ffn_dim) linear layer on `rows` states: at one row count
    (after a warm-up), and at a new row count every call (`rows` + 1, + 2, ...); `calls` calls each."""
    layer = torch.nn.Linear(shape["d_model"], shape["ffn_dim"], device=device, dtype=torch.bfloat16)

    def call(rows):
        states = torch.randn(rows, shape["d_model"], device=device, dtype=torch.bfloat16, requires_grad=True)
        layer(states).sum().backward()

    rows, calls = shape["rows"], shape["calls"]
    for _ in range(3):
        call(rows)
    same = timed(lambda: [call(rows) for _ in range(calls)], device)[0]
    new = timed(lambda: [call(rows + i) for i in range(1, calls + 1)], device)[0]
    return {"same_rows_seconds": same / calls, "new_rows_seconds": new / calls}


def run(json_path: str, dry_run: bool, measure: list[str]) -> dict:
    plan = RUNS["dry_run" if dry_run else "gpu"]
    device, sizes, threads = plan["device"], plan["sizes"], plan["threads"]
    torch.set_num_threads(threads)
    device_name = torch.cuda.get_device_name(0) if device == "cuda" else benchmark.cpu_model()
    card = card_peak(device_name) if device == "cuda" else None
    filled = {name: benchmark.make_workload(benchmark.SIZES[size]["vocab_size"], train_batch=plan["filled_batch"])
              for name, size in sizes.items()}  # fmt: skip
    standard = benchmark.make_workload(benchmark.SIZES[sizes["base"]]["vocab_size"])
    results = Results(
        json_path,
        {
            **plan,
            "device_name": device_name,
            "card": card and card[0],
            "precision": "bf16",
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "model_sizes": {name: benchmark.SIZES[size] for name, size in sizes.items()},
            "filled_workload": {
                "pairs_per_batch": plan["filled_batch"],
                "batches": len(filled["base"]["train"]),
                "target_tokens_per_batch": benchmark.workload_counts(sizes["base"], filled["base"])["train"][0]
                / len(filled["base"]["train"]),
            },
        },
    )
    results.data["peaks"]["card_dense_bf16"] = card and card[1]

    def save() -> None:  # with the rows and targets of everything measured so far, an earlier call's measurements too
        results.data["rows"] = summarize(results.data, sizes, filled, standard)
        results.data["targets"] = check_targets(results.data["rows"])
        results.save()

    save()
    if not any(k.startswith("matmul") for k in results.data["peaks"]):
        matmul = attempt(results, f"matmul {plan['matmul']}", measure_matmul, device, plan["matmul"])
        results.data["peaks"][f"matmul_{plan['matmul']}"] = matmul
        results.save()
    for name in [m for m in MEASUREMENTS if m in measure]:
        if name == "decoding":
            value = attempt(results, name, measure_compiled_greedy, sizes["base"], device, standard)
            if value:
                results.record(f"base/{DECODING}/decoding", value)
        elif name == "loss":
            measure_losses(results, device, plan["loss_shape"])
        elif name == "attention":
            for backend in ATTENTION_BACKENDS[device]:
                shape = plan["attention"]
                value = attempt(results, f"attention {backend}", measure_attention, device, backend, shape)
                if value:
                    results.data["attention"][backend] = {**value, **shape}
        elif name == "shapes":
            value = attempt(results, "matmul shapes", measure_matmul_shapes, device, plan["shapes"])
            if value:
                results.data["shapes"] = {**value, **plan["shapes"]}
        elif name == "standard":
            for system in (OURS, REFERENCE):
                value = attempt(
                    results, f"{system}, the benchmark's workload", benchmark.measure_torch, system, sizes["base"],
                    "bf16", device, threads, standard,
                )  # fmt: skip
                if value:
                    results.record(f"base/{system}/standard", value)
            measure_ctranslate2(results, sizes["base"], device, threads, standard)
        else:
            size, system = name.split("-")
            system = TRAINING_SYSTEMS[system]
            value = attempt(
                results, f"{size} {system} training, filled batch", measure_training, system, sizes[size], device,
                filled[size], plan["passes"],
            )  # fmt: skip
            if value:
                results.record(f"{size}/{system}/train_filled", value)
        save()
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
            results.record(f"base/{system}/standard", seconds)
            results.data.setdefault("ct2_labels", {})[system] = benchmark.label(system, systems)
            results.save()


def measure_losses(results: Results, device: str, shape: dict) -> None:
    """The `loss` measurement: each variant of `scripts.loss_benchmark` with the output projection, in bf16, with its
    time and peak memory relative to the reference's. The dry run leaves out the compiled variant (a compilation takes
    minutes on a CPU) and Liger-Kernel (Triton kernels, CUDA only)."""
    variants = {variant: (variant, None) for variant in loss_benchmark.VARIANTS}
    variants.update({f"ours, {rows} rows per chunk": ("ours", rows) for rows in LOSS_CHUNKS})
    skipped = {"liger": "Liger-Kernel's kernels need CUDA", "reference-compiled": "compiled on a GPU run only"}
    if device == "cuda":
        skipped = {}
        try:
            import liger_kernel.transformers  # noqa: F401
        except Exception as error:  # not installed, or without the Triton it needs
            skipped["liger"] = f"liger_kernel does not import: {type(error).__name__}: {error}"[:500]
    for name, (variant, chunk_rows) in variants.items():
        if name in skipped:
            results.data["skipped"][f"loss {name}"] = skipped[name]
            continue
        value = attempt(
            results, f"loss {name}", loss_benchmark.measure_loss, variant, shape["rows"], shape["vocab"], "bf16",
            device, shape["d_model"], 3, chunk_rows,
        )  # fmt: skip
        if value:
            results.data["loss"][name] = value
    reference = results.data["loss"].get("reference")
    for value in results.data["loss"].values():
        if reference:
            value["time_vs_reference"] = loss_benchmark.ratio(value["seconds"], reference["seconds"])
            value["peak_vs_reference"] = loss_benchmark.ratio(value["peak_mb"], reference["peak_mb"])
    results.save()


# ---------------------------------------------------------------------------------------------------- the summary


def summarize(data: dict, sizes: dict, filled: dict, standard: dict) -> list[dict]:
    """One row per (size, system): medians of its measurements as tokens/s, utilisation, profiles and ratios to
    MarianMTModel at the same size."""
    card = data["peaks"].get("card_dense_bf16")
    matmul = next((v for k, v in data["peaks"].items() if k.startswith("matmul")), None)
    counts = benchmark.workload_counts(sizes["base"], standard)
    rows = {}
    for name, values in data["measurements"].items():
        size, system, kind = name.split("/")
        row = rows.setdefault(
            (size, system), {"size": size, "system": system, "label": system_label(system, data, kind)}
        )
        if kind == "train_filled":
            filled_tokens, filled_flops = benchmark.workload_counts(sizes[size], filled[size])["train"]
            seconds = statistics.median(v["seconds"] for v in values)
            row["train_filled_tokens_per_s"] = filled_tokens / seconds
            row["train_filled_peak_mb"] = max(v["peak_mb"] for v in values)
            row["warmup_seconds"] = values[-1].get("warmup_seconds")
            row["profile"] = values[-1].get("profile")
            if card:
                row["train_filled_utilisation"] = filled_flops / seconds / card
            if matmul:
                row["train_filled_of_matmul"] = filled_flops / seconds / matmul
        elif kind == "decoding":
            value = values[-1]
            generated = counts["greedy"][0]
            row["greedy_tokens_per_s"] = generated / value["compiled"]
            row["uncompiled_greedy_tokens_per_s"] = generated / value["dynamic"]
            row["compile_seconds"] = value["compile_seconds"]
            row["identical_rows"] = f"{value['identical_rows']}/{value['rows']}"
            row["compiled_batch"] = value["batch"]
            row["compiled_speedup"] = value["dynamic"] / value["compiled"]
            row["profile"], row["eager_profile"] = value.get("profile"), value.get("eager_profile")
        else:
            value = values[-1]
            for task in benchmark.TASKS:
                if task in value:
                    row[f"{task}_tokens_per_s"] = counts[task][0] / value[task]
            if "train_peak_mb" in value:
                row["train_peak_mb"] = value["train_peak_mb"]
    for (size, _), row in rows.items():
        reference = rows.get((size, REFERENCE), {})
        row["vs_marian"] = {
            metric: row[metric] / reference[metric]
            for metric in (
                "train_filled_tokens_per_s",
                "train_tokens_per_s",
                "greedy_tokens_per_s",
                "beam4_tokens_per_s",
            )
            if metric in row and metric in reference and "compiled_speedup" not in row
        }
    order = {"base": 0, "big": 1}
    return sorted(rows.values(), key=lambda row: (order.get(row["size"], 2), "compiled_speedup" in row))


def system_label(system: str, data: dict, kind: str) -> str:
    if kind == "decoding":
        return "ours, compiled static cache (bf16 weights)"
    return benchmark.TORCH_SYSTEMS.get(system) or data.get("ct2_labels", {}).get(system, system)


def check_targets(rows: list[dict]) -> list[dict]:
    """The targets: training with a batch that fills the GPU (ours, the fastest of eager and the compiled systems,
    against MarianMTModel and the card's peak, at each size), and the compiled static-cache path against eager
    generation."""
    targets = []
    for size in ("base", "big"):
        trained = {row["system"]: row for row in rows if row["size"] == size and "train_filled_tokens_per_s" in row}
        ours = [trained[s] for s in (OURS, *COMPILED_SYSTEMS) if s in trained]
        if not ours:
            continue
        best = max(ours, key=lambda row: row["train_filled_tokens_per_s"])
        if REFERENCE in trained:
            ratio = best["train_filled_tokens_per_s"] / trained[REFERENCE]["train_filled_tokens_per_s"]
            targets.append(
                {"target": f"{size}: training ({best['label']}) >= {TARGET_SPEEDUP}x MarianMTModel (sdpa) tokens/s",
                 "value": ratio, "passed": ratio >= TARGET_SPEEDUP}
            )  # fmt: skip
        if "train_filled_utilisation" in best:
            utilisation = best["train_filled_utilisation"]
            targets.append(
                {"target": f"{size}: training ({best['label']}) >= {TARGET_UTILISATION[size]:.0%} of the dense bf16 "
                 "peak", "value": utilisation, "passed": utilisation >= TARGET_UTILISATION[size]}
            )  # fmt: skip
    for compiled in (row for row in rows if "compiled_speedup" in row):
        speedup = compiled["compiled_speedup"]
        targets.append(
            {"target": f"compiled static-cache greedy >= {TARGET_COMPILED_SPEEDUP}x eager at batch "
             f"{compiled['compiled_batch']}", "value": speedup, "passed": speedup >= TARGET_COMPILED_SPEEDUP}
        )  # fmt: skip
    return targets


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="the results file, rewritten after every measurement")
    parser.add_argument(
        "--measure", nargs="+", choices=MEASUREMENTS, default=MEASUREMENTS, help="these measurements (default: all)"
    )
    parser.add_argument("--dry_run", action="store_true", help="the same steps on the CPU at the tiny size")
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("CUDA is not available: this benchmark needs a GPU (or --dry_run)")
    data = run(args.json, args.dry_run, args.measure)
    for row in data["rows"]:
        print({k: v for k, v in row.items() if "profile" not in k})
    return data


if __name__ == "__main__":
    main()
