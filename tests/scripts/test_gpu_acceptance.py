"""`python -m scripts.gpu_acceptance`, the GPU acceptance run, as far as a CPU can check it: its dry run end to end,
the time budgets and failures of its parts, and the card table of the GPU benchmark."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts import gpu_acceptance
from scripts.gpu_benchmark import card_peak, check_targets
from scripts.gpu_environment import commit
from tests.helpers import NO_CUDA, ROOT


@pytest.mark.parametrize(
    "name, card, tflops",
    [
        ("NVIDIA H100 80GB HBM3", "H100", 989),  # the SXM part
        ("NVIDIA H100 PCIe", "H100 PCIe", 756),
        ("NVIDIA H100 NVL", "H100 NVL", 835),
        ("NVIDIA H200", "H200", 989),
        ("NVIDIA GH200 480GB", "GH200", 989),
        ("NVIDIA A100-SXM4-80GB", "A100", 312),
        ("NVIDIA A100 80GB PCIe", "A100", 312),
        ("NVIDIA A10", "A10", 125),
        ("NVIDIA L40S", "L40S", 362),
        ("NVIDIA L4", "L4", 121),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", 165),
    ],
)
def test_the_dense_bf16_peak_is_found_by_the_gpu_name(name, card, tflops):
    assert card_peak(name) == (card, tflops * 1e12)


@pytest.mark.parametrize("name", ["NVIDIA A10G", "Tesla V100-SXM2-16GB", "NVIDIA GeForce RTX 3090", "AMD EPYC"])
def test_a_card_not_in_the_table_has_no_peak(name):
    assert card_peak(name) is None


def test_without_git_history_the_commit_is_the_one_written_beside_the_wheels(tmp_path):
    (tmp_path / "repository").mkdir()  # a copy of the checkout without .git, as a GPU machine gets it
    (tmp_path / "wheels").mkdir()
    assert commit(tmp_path / "repository", tmp_path / "wheels") == "unknown"
    (tmp_path / "wheels" / "COMMIT").write_text("0123abc\n")
    assert commit(tmp_path / "repository", tmp_path / "wheels") == "0123abc (written beside the wheels)"
    if not (ROOT / ".git").exists():
        return  # a copy without history here too
    assert (
        commit(ROOT, tmp_path / "wheels").split()[0]
        == subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
    )


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A dry run's bookkeeping, with budgets of one second."""
    monkeypatch.setitem(gpu_acceptance.BUDGETS, "tests", (1, 1))
    (tmp_path / "out").mkdir()
    return gpu_acceptance.Run(tmp_path / "out", tmp_path, dry_run=True, time_limit=60, wheels=None)


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie waiting for its parent to read its exit status does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_part_past_its_budget_is_stopped_with_what_it_started_and_recorded(run, tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(child.pid)); print('started', flush=True); time.sleep(60)"
    )
    start = time.monotonic()
    part = run.command("sleeper", "tests", python(code))
    assert time.monotonic() - start < 30
    assert part["status"] == "stopped" and part["note"] == "stopped at its budget of 1 s"
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(grandchild)  # the child's own child went with it
    saved = json.loads((tmp_path / "out" / "gpu_acceptance.json").read_text())
    assert saved["parts"][0]["status"] == "stopped"
    assert "| sleeper | stopped |" in (tmp_path / "out" / "gpu_acceptance.md").read_text()


def test_a_failing_part_is_recorded_and_the_next_one_still_runs(run, tmp_path):
    failed = run.command("fails", "environment", python("import sys; print('boom'); sys.exit(3)"))
    passed = run.command("passes", "environment", python("print('fine')"))
    assert (failed["status"], failed["returncode"], passed["status"]) == ("failed", 3, "ok")
    log = (tmp_path / "out" / "gpu_acceptance.log").read_text()
    assert "boom" in log and "fine" in log
    assert [p["name"] for p in json.loads((tmp_path / "out" / "gpu_acceptance.json").read_text())["parts"]] == [
        "fails",
        "passes",
    ]


def test_a_part_left_without_time_is_not_run(run, tmp_path):
    run.deadline = time.monotonic() + 2
    part = run.command("late", "environment", python("print('never')"))
    assert part["status"] == "not run" and "never" not in (tmp_path / "out" / "gpu_acceptance.log").read_text()


def test_the_decoding_part_translates_with_the_model_given_or_says_which_folder_it_lacks(run, tmp_path, monkeypatch):
    commands = []
    monkeypatch.setattr(run, "command", lambda name, kind, argv: commands.append(argv) or {"status": "ok"})
    gpu_acceptance.decoding(run)  # the training part's demo, which no training part left here
    assert not commands and run.results["decoding"]["status"] == (
        f"not run: no model in {tmp_path / 'tiny-ddp'} (the training part)"
    )
    run.translation_model = tmp_path / "trained"
    gpu_acceptance.decoding(run)
    assert run.results["decoding"]["status"] == f"not run: no model in {tmp_path / 'trained'} (--translation_model)"
    (tmp_path / "trained").mkdir()
    (tmp_path / "trained" / "config.json").write_text("{}")
    gpu_acceptance.decoding(run)
    assert commands[0][commands[0].index("--model") + 1] == str(tmp_path / "trained")


def test_the_outcomes_of_a_stopped_pytest_come_from_its_log(tmp_path):
    log = tmp_path / "gpu_acceptance.log"
    log.write_text(
        "\n===== tests (budget 120 s): python -m pytest\n"
        "tests/gpu/test_training.py::test_step[bf16] PASSED [ 10%]\n"
        "tests/gpu/test_generation.py::test_compile FAILED [ 20%]\n"
        "tests/gpu/test_attention.py::test_flash[fp16] SKIPPED (no flash) [ 30%]\n"
    )
    outcomes = gpu_acceptance.test_outcomes_from_log(log, {"name": "tests"})
    assert outcomes == {
        "test_training::test_step[bf16]": {"outcome": "passed"},
        "test_generation::test_compile": {"outcome": "failed"},
        "test_attention::test_flash[fp16]": {"outcome": "skipped"},
    }


@pytest.mark.slow
def test_the_dry_run_runs_every_part_on_the_cpu_and_writes_the_results(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.gpu_acceptance", "--dry_run", "--output_dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # What comes back from the GPU machine: at most 8 files, none in a folder.
    assert sorted(p.name for p in out.iterdir()) == ["gpu_acceptance.json", "gpu_acceptance.log", "gpu_acceptance.md"]
    results = json.loads((out / "gpu_acceptance.json").read_text())
    runs = [f"{kind} tiny ddp" for kind in ("train", "resume")] + ["compiled tiny-compiled ddp"]
    assert [(p["name"], p["status"]) for p in results["parts"]] == [
        (name, "ok") for name in ["environment", "benchmark", "recipe base", *runs, "decoding", "tests"]
    ]
    assert not [p["command"] for p in results["parts"] if str(ROOT) in p["command"]]  # as run, from the root

    env = results["environment"]
    assert env["packages"]["torch"] and env["commit"] and env["cuda_available"] is False

    tests = results["tests"]  # every CUDA test skips here, saying why
    assert "test_training::test_a_half_precision_training_step_is_finite_and_close_to_float32[bf16]" in tests
    assert len(tests) >= 10 and all(t == {**t, "outcome": "skipped", "message": NO_CUDA} for t in tests.values())

    benchmark = results["benchmark"]
    assert not benchmark["errors"]
    rows = {row["system"]: row for row in benchmark["rows"]}
    for system in ("ours-sdpa", "marian-sdpa"):
        assert rows[system]["train_filled_tokens_per_s"] > 0 and rows[system]["train_tokens_per_s"] > 0
        assert rows[system]["greedy_tokens_per_s"] > 0 and rows[system]["beam4_tokens_per_s"] > 0
        assert rows[system]["profile"]["kinds"]["matmul"]["ms"] > 0  # one step under torch.profiler
    assert rows["ours-static-compiled"]["identical_rows"] == "64/64"
    attention = benchmark["attention"]["MATH"]  # the CPU's kernel here; cuDNN's and the efficient one on a GPU
    assert attention["seconds"] > 0 and attention["first_call_seconds"] > 0 and attention["new_lengths"] == [5, 6]
    shapes = benchmark["shapes"]  # a linear layer at one row count, and at a new one every call
    assert shapes["same_rows_seconds"] > 0 and shapes["new_rows_seconds"] > 0 and shapes["rows"] == 20
    assert [t["target"] for t in benchmark["targets"]] == [
        "base: training (ours (sdpa)) >= 2.0x MarianMTModel (sdpa) tokens/s",
        "compiled static-cache greedy >= 3.0x eager at batch 64",
    ]

    recipe = results["recipe"]  # the recipe's defaults on the synthetic corpus, one batch per update
    assert recipe["status"] == "ok" and (recipe["first_step"], recipe["last_step"], recipe["timed_steps"]) == (0, 6, 4)
    assert recipe["max_tokens"] == 4096 and recipe["gradient_accumulation_steps"] == 1
    assert recipe["target_tokens_per_second"] > 0 and recipe["model_flops_per_second"] > 0
    assert [span["steps"] for span in recipe["spans"]] == [[2, 4], [4, 6]]  # every --logging_steps 2 after step 2
    assert all(span["steps_per_second"] > 0 for span in recipe["spans"])
    assert recipe["profile"]["step"] == 2 and recipe["profile"]["kinds"]["matmul"]["ms"] > 0  # the last warm-up step

    eager, compiled = results["training"]
    run = compiled["runs"]["compiled"]  # the same recipe compiled: one graph for every batch shape, not resumed
    assert list(compiled["runs"]) == ["compiled"] and (run["first_step"], run["last_step"]) == (0, 6)
    assert run["torch_compile"] and run["compiled_graphs"] == 1 and run["steps_per_second"] > 0
    train, resume = eager["runs"]["train"], eager["runs"]["resume"]
    assert (train["first_step"], train["last_step"], resume["first_step"], resume["last_step"]) == (0, 6, 6, 9)
    assert train["timed_steps"] == 4 and resume["timed_steps"] == 1  # after 2 warm-up steps
    assert (train["profile"]["step"], resume["profile"]["step"]) == (2, 8)  # each run's last warm-up step
    assert train["target_tokens_per_second"] > 0 and resume["target_tokens"] > 0
    assert eager["report"]["validation"]["num_samples"] == 8 == compiled["report"]["validation"]["num_samples"]

    decoding = results["decoding"]["rows"]  # the trained tiny model through both caches, on the CPU uncompiled
    assert (
        decoding["translate-static"]["identical_to_translate"] == 40 and decoding["translate"]["sentences_per_wall_s"]
    )

    summary = (out / "gpu_acceptance.md").read_text()
    headings = ("## Parts", "## CUDA tests", "## Benchmark", "## The recipe", "## Training", "## Decoding")
    profiled = ("| recipe base, step 2 |", "| tiny ddp train, step 2 |", "| tiny ddp resume, step 8 |")
    for heading in (
        *headings,
        *profiled,
        "### One step under torch.profiler",
        "by SDPA kernel: MATH",
        "Steps/s by span of logging steps: 2-4 ",
        "- the demo with --torch_compile: ",
    ):
        assert heading in summary
    assert summary in proc.stdout  # the end of the output is what a job's log shows last


@pytest.mark.slow
def test_a_run_stopped_from_outside_ends_its_running_part_and_keeps_the_results(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "scripts.gpu_acceptance", "--dry_run", "--parts", "benchmark"]
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # its work folder, named in its parts' command lines
    orchestrator = subprocess.Popen([*command, "--output_dir", str(out)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    results = out / "gpu_acceptance.json"
    deadline = time.monotonic() + 300
    while not benchmarks(tmp_path) and time.monotonic() < deadline:  # the benchmark part has started
        time.sleep(0.2)
    assert benchmarks(tmp_path)
    assert json.loads(results.read_text())["parts"][-1]["status"] == "running"
    orchestrator.terminate()  # as a job scheduler does at its time limit
    assert orchestrator.wait(timeout=60) == 128 + 15
    saved = json.loads(results.read_text())
    assert saved["interrupted"] == "SIGTERM"
    assert [p["name"] for p in saved["parts"]] == ["environment", "benchmark"]
    assert not benchmarks(tmp_path)


def benchmarks(folder: Path) -> list[int]:
    """The running processes of `python -m scripts.gpu_benchmark` with a file in `folder`."""
    found = []
    for process in Path("/proc").glob("[0-9]*"):
        try:
            command = (process / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "scripts.gpu_benchmark" in command and str(folder) in command and alive(int(process.name)):
            found.append(int(process.name))
    return found


def test_the_summary_of_a_gpu_run_names_the_machine_the_failures_and_the_targets():
    """The parts of the summary that only a GPU run fills (the dry run checks the others)."""
    results = {
        "mode": "GPU",
        "started": "2026-11-24 10:00:00 UTC",
        "time_limit_s": 560,
        "seconds": 401.0,
        "parts": [{"name": "tests", "status": "ok", "seconds": 61.0, "budget_s": 120}],
        "environment": {
            "gpus": [{"name": "NVIDIA H200", "memory_gib": 139.8, "capability": "9.0", "multiprocessors": 132}],
            "nvidia_smi": {"gpus": [{"name": "NVIDIA H200", "driver_version": "580.159.04"}]},
            "torch_cuda": "13.0",
            "packages": {"torch": "2.11.0+cu130"},
            "commit": "0123abc (written beside the wheels)",
        },
        "tests": {
            "test_training::test_step[bf16]": {"outcome": "passed", "seconds": 1.0},
            "test_training::test_syncs[labels-only]": {"outcome": "failed", "message": "AssertionError: 3 == 2"},
        },
        "benchmark": {
            "settings": {
                "device": "cuda", "size": "base", "device_name": "NVIDIA H200", "card": "H200",
                "filled_workload": {"pairs_per_batch": 1024, "target_tokens_per_batch": 25600.0},
            },
            "peaks": {"card_dense_bf16": 989e12, "matmul_8192": 780e12},
            "rows": [
                {"size": "base", "system": "ours-sdpa", "label": "ours (sdpa)", "train_filled_tokens_per_s": 400000.0,
                 "train_filled_utilisation": 0.35, "vs_marian": {"train_filled_tokens_per_s": 1.4},
                 "profile": {"wall_ms": 80.0, "kernel_ms": 60.0, "busy_ms": 60.0, "idle_fraction": 0.25,
                             "kernels": 900, "kinds": {"matmul": {"ms": 30.0, "kernels": 200, "share": 0.5}},
                             "top": [["sm90_xmma_gemm", 3.0]]}},
                {"size": "base", "system": "ours-static-compiled",
                 "label": "ours, compiled static cache (bf16 weights)", "greedy_tokens_per_s": 9000.0,
                 "uncompiled_greedy_tokens_per_s": 3000.0, "compile_seconds": 41.0, "identical_rows": "64/64",
                 "compiled_speedup": 3.0, "compiled_batch": 64, "vs_marian": {}},
            ],
            "targets": [
                {"target": "training >= 1.3x MarianMTModel (sdpa) tokens/s", "value": 1.4, "passed": True},
                {"target": "training >= 40% of the dense bf16 peak", "value": 0.35, "passed": False},
            ],
            "errors": {"ct2-bfloat16": "RuntimeError: benchmark_ctranslate2.py failed:\nlibcublas.so.12: not found"},
            "skipped": {},
            "shapes": {"same_rows_seconds": 40e-6, "new_rows_seconds": 220e-6, "rows": 1000, "d_model": 256,
                       "ffn_dim": 1024, "calls": 200},
        },
        "recipe": {"status": "ok", "wall_seconds": 150.0, "first_step": 0, "last_step": 120, "warmup_steps": 20,
                   "timed_steps": 100, "steps_per_second": 12.0, "target_tokens_per_second": 360000.0,
                   "utilisation": 0.31, "max_tokens": 32768, "gradient_accumulation_steps": 1,
                   "peak_memory_allocated_mb": 30720.0, "compiled_graphs": 1, "graph_breaks": 0},
        "training": [
            {"size": "demo", "config": "ddp", "runs": {"train": {
                "status": "ok", "wall_seconds": 30.0, "first_step": 0, "last_step": 100, "steps_per_second": 31.0,
                "target_tokens_per_second": 20000.0, "peak_memory_allocated_mb": 512.0, "world_size": 1,
                "distributed_type": "MULTI_GPU", "wrapped_model": "VanillaTransformerForConditionalGeneration",
                "profile": {"step": 10, "wall_ms": 33.0, "kernel_ms": 6.0, "busy_ms": 6.0, "idle_fraction": 0.82,
                            "kernels": 700, "kinds": {"matmul": {"ms": 2.0, "kernels": 90, "share": 0.33}},
                            "top": [["sm90_xmma_gemm", 0.2]], "host_top": [["cudaStreamSynchronize", 9.5]]}}}},
            {"size": "base", "config": "fsdp", "runs": {"train": {
                "status": "ok", "wall_seconds": 30.0, "first_step": 0, "last_step": 150, "steps_per_second": 12.5,
                "target_tokens_per_second": 110000.0, "peak_memory_allocated_mb": 6144.0, "world_size": 1,
                "distributed_type": "FSDP", "wrapped_model": "FSDPVanillaTransformerForConditionalGeneration"}},
             "report": {"parameters": 44000000, "validation": {"bleu": 1.2}, "hardware": "1 x NVIDIA H200"}},
        ],
    }  # fmt: skip
    text = gpu_acceptance.summary(results)
    assert "- GPU: NVIDIA H200 (139.8 GiB, sm 9.0); driver 580.159.04; CUDA (torch) 13.0" in text
    assert "commit: 0123abc (written beside the wheels)" in text
    assert (
        "1 failed, 1 passed" in text and "- failed: `test_training::test_syncs[labels-only]`: AssertionError" in text
    )
    assert "dense bf16 peak 989 TFLOP/s (H200); measured matmul 8192^2 780 TFLOP/s" in text
    assert "| base ours (sdpa) | 400,000 (x1.40) | 35.0% |" in text
    assert "| base ours (sdpa) | 80 | 60 | 25% | 900 | 30.0 (50%) |" in text  # the profile of one step
    assert "12 steps/s, 360,000 target tok/s, 31.0% of the card's dense bf16 peak; --max_tokens 32768 x 1" in text
    assert "- PASS: the recipe >= 85% of the benchmark's filled batch (ours (sdpa)): 0.90" in text
    assert "- PASS: the demo >= 30 steps/s: 31.0" in text
    assert "| demo ddp train, step 10 | 33 | 6 | 82% | 700 | 2.0 (33%) |" in text  # the probe's profiled step
    assert "- demo ddp train, step 10, the host's longest operators: cudaStreamSynchronize 9.50 ms" in text
    assert "9,000 greedy tok/s against 3,000 uncompiled" in text
    assert "(256 -> 1024), forward and backward on about 1000 rows: 40 us per call at one row count, 220 us" in text
    assert "- PASS: training >= 1.3x" in text and "- FAIL: training >= 40% of the dense bf16 peak: 0.35" in text
    assert "- error: ct2-bfloat16: libcublas.so.12: not found" in text
    assert (
        "| base fsdp train | ok | FSDP / FSDPVanillaTransformerForConditionalGeneration x1 | 0->150 | 12.5 |" in text
    )
    assert "| 110,000 | 6 | 30 |" in text  # target tok/s, peak GiB, wall seconds


def test_the_training_targets_take_the_fastest_of_ours_eager_compiled_and_compiled_with_cuda_graphs():
    def row(system, label, tokens_per_s, utilisation=None):
        return {"size": "base", "system": system, "label": label, "train_filled_tokens_per_s": tokens_per_s} | (
            {"train_filled_utilisation": utilisation} if utilisation else {}
        )

    rows = [
        row("ours-sdpa", "ours (sdpa)", 270_000, 0.10),
        row("ours-compiled", "ours, torch.compile", 420_000, 0.16),
        row("ours-cudagraphs", "ours, torch.compile with CUDA graphs", 500_000, 0.19),
        row("marian-sdpa", "MarianMTModel (sdpa)", 200_000),
    ]
    assert check_targets(rows) == [
        {
            "target": "base: training (ours, torch.compile with CUDA graphs) >= 2.0x MarianMTModel (sdpa) tokens/s",
            "value": 2.5,
            "passed": True,
        },
        {
            "target": "base: training (ours, torch.compile with CUDA graphs) >= 30% of the dense bf16 peak",
            "value": 0.19,
            "passed": False,
        },
    ]


def test_a_benchmark_call_keeps_the_rows_of_an_earlier_call_from_its_start(tmp_path):
    """The acceptance run's second benchmark part adds to the first's file, and may be stopped before its first
    measurement ends: the file it rewrites at its start must still hold the first part's rows and targets."""
    from scripts.gpu_benchmark import run

    path = tmp_path / "benchmark.json"
    first = run(str(path), dry_run=True, measure=["base-ours", "base-marian"])
    assert {row["system"] for row in first["rows"]} >= {"ours-sdpa", "marian-sdpa"}
    second = run(str(path), dry_run=True, measure=[])  # started, then stopped before a measurement
    saved = json.loads(path.read_text())
    assert saved["rows"] == second["rows"] == first["rows"]
    assert saved["targets"] == first["targets"]
