"""The GPU acceptance run: what the package says about GPUs, checked and measured by one command of under 10
minutes on an H100/H200-class GPU, from a bare machine given the repository and a folder of wheels. docs/gpu.md says
how to run it.

    python -m scripts.gpu_acceptance --output_dir DIR [--wheels .whl] [--translation_model MODEL] [--parts ...]
        [--time_limit 540] [--dry_run]

The parts (`--parts`: all by default), each in processes of its own with a time budget (stopped there, and recorded
so), in this order (what the targets need first; the big size's compilations last):
1. environment: GPU, driver, CUDA, torch and the packages' versions, the commit (`scripts.gpu_environment`);
2. benchmark: ours against MarianMTModel at the paper's base size in bf16 with a batch that fills the GPU, and the
   compiled static-cache decoding (`scripts.gpu_benchmark`);
3. recipe: `train translation --paper_preset base` with its defaults (`--max_tokens auto`) on a synthetic corpus of
   WMT-like lengths written by this run: steps/s, target tokens/s, model FLOP utilisation, memory;
4. training: the demo through `accelerate launch` with the DDP configuration, started, trained, evaluated and saved,
   then resumed from its checkpoint: steps/s, target tokens/s and peak memory (`scripts.gpu_training`); then the
   demo with `--torch_compile`;
5. decoding: `translate` with the demo just trained (or `--translation_model`), end to end on 10,000 lines in bf16,
   through the dynamic cache and through the compiled static cache (`--compile always`): sentences/s, compilation,
   lines identical (`scripts.benchmark_translate`);
6. tests: the suite's CUDA tests (`pytest -m cuda tests/gpu`);
7. benchmark_big: the benchmark's compiled training rows at the paper's base size (torch.compile, by layer, then with
   CUDA graphs), then its rows at the big size (eager, compiled, by layer), then the loss's variants.
DIR gets gpu_acceptance.md (the summary), gpu_acceptance.json (every figure) and gpu_acceptance.log (every part's
output), rewritten after each part: a part that fails, or the end of the time limit, loses no other part's results.
Models, checkpoints and installed wheels go to a temporary folder. `--wheels FOLDER` first installs FOLDER's wheels
(`python -m scripts.gpu_environment --download_wheels FOLDER` makes them) for every part's processes.

`--dry_run` runs the same parts on the CPU at tiny sizes (the CUDA tests skip), so that CI checks this command.

Only the standard library is imported here: the wheels are installed before anything imports the packages they hold,
and a broken package fails a part, not the run.
"""

import argparse
import itertools
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from scripts.ports import free_port


ROOT = Path(__file__).resolve().parents[1]
ACCELERATE_CONFIGS = ROOT / "hf_vanilla_transformer" / "recipes" / "accelerate"
NAME = "gpu_acceptance"
TIME_LIMIT = 540  # seconds, --time_limit's default: within nine minutes
# Budgets in seconds on an H100-class GPU and in the dry run (a loaded 2-core CI machine). Their sum is over the time
# limit: the parts run in order, and the last ones give way if the first take their whole budgets.
BUDGETS = {
    "wheels": (60, 120),
    "environment": (40, 120),
    "benchmark": (200, 600),
    "recipe": (120, 300),
    "train": (80, 300),
    "resume": (50, 300),
    "compiled": (150, 300),
    "decoding": (150, 300),
    "tests": (90, 300),
    "benchmark_big": (300, 300),
}
# The benchmark's measurements (scripts.gpu_benchmark.MEASUREMENTS) of the two benchmark parts. The compilations of the
# training step (about a minute each on an H100 host) and the loss's variants (1.5-2.5 minutes) come last, the rows the
# targets read first. The dry run leaves them out (minutes on a CPU), and the big size (the tiny size again).
BENCHMARK = {
    "gpu": (
        ["base-ours", "base-marian", "attention", "shapes", "decoding"],
        ["base-compiled", "base-regional", "base-cudagraphs", "big-ours", "big-compiled", "big-regional", "loss"],
    ),
    "dry_run": (["base-ours", "base-marian", "attention", "shapes", "decoding", "standard"], []),
}
# The training runs: the recipe's options for each model, and the steps of its first and resumed run. Every run also
# gets RECIPE_OPTIONS: bf16, no evaluation during training (one at the end, on EVALUATION pairs), no progress bars in
# the log, the checkpoint of its last step.
EVALUATION = ["--max_eval_samples", "64", "--max_test_samples", "64", "--translate", "Wo ist der Bahnhof?"]
TRAINING = {
    "demo": dict(options=EVALUATION, steps=(100, 130)),
    # Eager, the demo's steps leave the GPU idle for the host's work per operator; compiled, the same recipe, not
    # resumed. It compiles in its warm-up steps (dynamic shapes from the first batch).
    "demo-compiled": dict(options=[*EVALUATION, "--torch_compile", "True"], steps=(100,), kinds=("compiled",)),
}
TINY_MODEL = ["--d_model", "32", "--ffn_dim", "64", "--attention_heads", "2", "--encoder_layers", "1"]
TINY_MODEL += ["--decoder_layers", "1", "--use_cpu", "True"]
DRY_RUN_TRAINING = {
    "tiny": dict(
        options=["--max_eval_samples", "8", "--max_test_samples", "8", "--translate", "Wo ist der Bahnhof?"]
        + [*TINY_MODEL, "--vocab_size", "120", "--max_train_samples", "256"],
        steps=(6, 9),
    )
}
DRY_RUN_TRAINING["tiny-compiled"] = dict(
    options=[*DRY_RUN_TRAINING["tiny"]["options"], "--torch_compile", "True"], steps=(6,), kinds=("compiled",)
)
# The recipe's own throughput: the paper's base model with the recipe's defaults (on a GPU: --max_tokens auto,
# --tokens_per_update 25000, eager), on SYNTHETIC pairs of WMT-like lengths, timed from step RECIPE["gpu"]["steps"][0]
# to [1]. Compiled with the recipe's varying batch shapes, the base model took over three minutes to compile on an H100
# host: the compiled step is measured by the benchmark, on its fixed batch. The dry run trains the tiny model.
RECIPE = {
    "gpu": dict(options=["--paper_preset", "base", "--vocab_size", "37000", "--logging_steps", "20"], steps=(20, 120)),
    "dry_run": dict(
        options=[*TINY_MODEL, "--vocab_size", "300", "--max_tokens", "auto", "--tokens_per_update", "2000"]
        + ["--logging_steps", "2"],
        steps=(2, 6),
    ),
}
SYNTHETIC = {"gpu": dict(pairs=64_000, words=20_000), "dry_run": dict(pairs=2_000, words=200)}
RECIPE_OPTIONS = ["--bf16", "True", "--eval_strategy", "no", "--disable_tqdm", "True"]
RECIPE_TARGET = 0.85  # of the benchmark's filled-batch throughput for the same model
DEMO_TARGET = 30  # steps/s of the demo on one GPU
WARMUP_STEPS = {"gpu": 10, "dry_run": 2}  # steps of each run left out of the probe's timing
# The recipe's compilations and graph breaks go into the log (and are counted by the probe).
COMPILE_LOGS = {"TORCH_LOGS": "recompiles,graph_breaks"}


class Run:
    """One acceptance run: its parts' records, the results files, the log, the time left."""

    def __init__(
        self,
        output_dir: Path,
        work_dir: Path,
        dry_run: bool,
        time_limit: float,
        wheels: Path | None,
        translation_model: Path | None = None,
    ):
        self.output_dir, self.work_dir, self.dry_run, self.wheels = output_dir, work_dir, dry_run, wheels
        self.translation_model = translation_model
        self.deadline = time.monotonic() + time_limit
        self.started = time.monotonic()
        self.log = output_dir / f"{NAME}.log"
        self.log.write_text("")
        self.process = None  # the part running now
        self.results = {
            "mode": "dry run (CPU, tiny sizes)" if dry_run else "GPU",
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "time_limit_s": time_limit,
            "parts": [],
            "environment": {},
            "tests": {},
            "benchmark": {},
            "recipe": {},
            "training": [],
        }
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(work_dir / "site")] * (wheels is not None) + [str(ROOT)] + [os.environ.get("PYTHONPATH", "")]
            ).rstrip(os.pathsep),
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HOME": str(work_dir / "hf_home"),
            "TOKENIZERS_PARALLELISM": "false",
            "MPLBACKEND": "Agg",
        }
        if dry_run:  # the CPU, even on a machine with a GPU; one thread (see gpu_benchmark.RUNS)
            self.env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")

    def budget(self, kind: str) -> float:
        return BUDGETS[kind][self.dry_run]

    def command(self, name: str, kind: str, argv: list[str], env: dict | None = None) -> dict:
        """Run `argv` from the repository's root with the log as its output, stopped at the part's budget or the
        run's time limit; its record (status ok, failed, stopped or not run) is added to the results."""
        left = self.deadline - time.monotonic()
        budget = min(self.budget(kind), left)
        shown = shlex.join(argv).replace(f"{ROOT}/", "")  # run from the repository's root: its paths as from there
        part = {"name": name, "status": "running", "command": shown, "budget_s": round(budget)}
        self.results["parts"].append(part)
        if left < 5:
            part.update(status="not run", note="the run's time limit was reached")
            self.save()
            return part
        self.save()
        with self.log.open("a") as log:
            log.write(f"\n===== {name} (budget {budget:.0f} s): {part['command']}\n")
            log.flush()
            start = time.monotonic()
            self.process = subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**self.env, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                returncode = self.process.wait(timeout=budget)
            except subprocess.TimeoutExpired:
                stop(self.process)
                returncode = None
            self.process = None
            part["seconds"] = round(time.monotonic() - start, 1)
            if returncode is None:
                part.update(status="stopped", note=f"stopped at its budget of {budget:.0f} s")
            else:
                part.update(status="ok" if returncode == 0 else "failed", returncode=returncode)
            log.write(f"===== {name}: {part['status']} after {part['seconds']} s\n")
        print(f"{name}: {part['status']} ({part['seconds']} s)", flush=True)
        self.save()
        return part

    def interrupted(self, signum, frame) -> None:
        """Stopped from outside (a job scheduler's time limit, Ctrl-C): end the running part, keep the results."""
        if self.process is not None:
            stop(self.process)
        self.results["interrupted"] = signal.Signals(signum).name
        self.save()
        raise SystemExit(128 + signum)

    def save(self) -> None:
        self.results["seconds"] = round(time.monotonic() - self.started, 1)
        write(self.output_dir / f"{NAME}.json", json.dumps(self.results, indent=2) + "\n")
        try:
            text = summary(self.results)
        except Exception:  # a bug of the summary must not lose the figures: they are in the JSON
            text = (
                f"# GPU acceptance run\n\nThe summary failed; the figures are in {NAME}.json.\n\n"
                f"```\n{traceback.format_exc()}```\n"
            )
        write(self.output_dir / f"{NAME}.md", text)


def write(path: Path, text: str) -> None:
    """Replace `path` by `text` at once: a run killed while writing leaves the previous version, never half a file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def stop(process: subprocess.Popen) -> None:
    """End `process` and every process it started (its own session): SIGTERM, then SIGKILL after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


# ---------------------------------------------------------------------------------------------------- the parts


def install_wheels(run: Run) -> None:
    wheels = sorted(run.wheels.glob("*.whl"))
    run.results["wheels"] = [wheel.name for wheel in wheels]
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir"]
    run.command("wheels", "wheels", [*pip, "--upgrade", "--target", str(run.work_dir / "site"), *map(str, wheels)])


def environment(run: Run) -> None:
    from .gpu_environment import commit

    path = run.work_dir / "environment.json"
    probe = (
        "import json, sys; from scripts.gpu_environment import describe; "
        f"json.dump(describe(), open({str(path)!r}, 'w'))"
    )
    run.command("environment", "environment", [sys.executable, "-c", probe])
    run.results["environment"] = {**read_json(path), "commit": commit(ROOT, run.wheels)}
    run.save()


def tests(run: Run) -> None:
    """The CUDA tests, with each test's outcome (and a skip's or a failure's message) from pytest's JUnit XML, or from
    its verbose output when it was stopped before writing that."""
    xml = run.work_dir / "tests.xml"
    # In this process, one test at a time on the one GPU: without the suite's worker processes (pytest-xdist, which
    # the machine need not have).
    argv = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "tests/gpu", "-m", "cuda"]
    argv += ["-v", "-rA", f"--junitxml={xml}"]
    part = run.command("tests", "tests", argv)
    try:
        run.results["tests"] = test_outcomes(xml)
    except (OSError, ElementTree.ParseError):  # not written: pytest was stopped
        run.results["tests"] = test_outcomes_from_log(run.log, part)
    run.save()


def test_outcomes(xml: Path) -> dict:
    outcomes = {}
    for case in ElementTree.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome = {"outcome": "passed", "seconds": float(case.get("time", 0))}
        for kind in ("skipped", "failure", "error"):
            element = case.find(kind)
            if element is not None:
                message = element.get("message") or ""
                details = (element.text or "").strip()
                outcome = {**outcome, "outcome": {"failure": "failed"}.get(kind, kind), "message": message}
                if kind != "skipped" and details:
                    outcome["details"] = details[-3000:]
        outcomes[name] = outcome
    return outcomes


def test_outcomes_from_log(log: Path, part: dict) -> dict:
    outcomes = {}
    for line in log.read_text(errors="replace").split(f"===== {part['name']} (")[-1].splitlines():
        for outcome in ("PASSED", "FAILED", "SKIPPED", "ERROR"):
            if f" {outcome}" in line and "::" in line and line.startswith("tests/"):
                name = line.split(" ")[0].split("/")[-1].removesuffix(".py")
                outcomes[name.replace(".py::", "::")] = {"outcome": outcome.lower()}
    return outcomes


def benchmark(run: Run, big: bool = False) -> None:
    """The benchmark's base-size measurements, or (`big`) the big size's, added to the same results file."""
    measurements = BENCHMARK["dry_run" if run.dry_run else "gpu"][big]
    if not measurements:
        return
    path = run.work_dir / "benchmark.json"
    argv = [sys.executable, "-m", "scripts.gpu_benchmark", "--json", str(path), "--measure", *measurements]
    kind = "benchmark_big" if big else "benchmark"
    run.command(kind.replace("_", " "), kind, argv + ["--dry_run"] * run.dry_run)
    run.results["benchmark"] = read_json(path)
    run.save()


def benchmark_big(run: Run) -> None:
    benchmark(run, big=True)


def write_synthetic_corpus(prefix: Path, pairs: int, words: int, seed: int = 0) -> None:
    """`prefix`.de and `prefix`.en: `pairs` sentence pairs of WMT-like lengths (a log-normal word count with a median
    of about 22 words and a long tail, the target 0.8-1.25 times the source), words drawn by a Zipf law from `words`
    made-up words per language."""
    rng = random.Random(seed)
    vocabulary = {
        language: ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(words)]
        for language in ("de", "en")
    }
    cumulative = list(itertools.accumulate(1 / rank for rank in range(1, words + 1)))
    lines = {"de": [], "en": []}
    for _ in range(pairs):
        source = max(1, min(120, int(rng.lognormvariate(3.1, 0.55))))
        target = max(1, min(120, round(source * rng.uniform(0.8, 1.25))))
        for language, length in (("de", source), ("en", target)):
            lines[language].append(" ".join(rng.choices(vocabulary[language], cum_weights=cumulative, k=length)))
    for language, text in lines.items():
        prefix.with_suffix(f".{language}").write_text("\n".join(text) + "\n")


def recipe(run: Run) -> None:
    """`train translation --paper_preset base` with its defaults on a synthetic corpus, through the probe."""
    mode = "dry_run" if run.dry_run else "gpu"
    corpus = run.work_dir / "synthetic" / "train"
    corpus.parent.mkdir(exist_ok=True)
    write_synthetic_corpus(corpus, **SYNTHETIC[mode])
    probe = run.work_dir / "recipe.json"
    first, last = RECIPE[mode]["steps"]
    argv = [sys.executable, "-m", "scripts.gpu_training", "--probe", str(probe), "--warmup_steps", str(first), "--"]
    argv += [*RECIPE_OPTIONS, *RECIPE[mode]["options"], "--train_file", str(corpus), "--source_lang", "de"]
    argv += ["--target_lang", "en", "--max_source_length", "128", "--max_target_length", "128"]
    argv += ["--output_dir", str(run.work_dir / "recipe"), "--max_steps", str(last)]
    part = run.command("recipe base", "recipe", argv, env=COMPILE_LOGS)
    run.results["recipe"] = {"status": part["status"], "wall_seconds": part.get("seconds"), **read_json(probe)}
    run.save()


def training(run: Run) -> None:
    gpus = len(run.results["environment"].get("gpus") or []) if not run.dry_run else 0
    plan = DRY_RUN_TRAINING if run.dry_run else TRAINING
    for config in ("ddp",):  # FSDP's code path is checked by the CPU suite; its GPU run did not earn its time here
        for size, settings in plan.items():
            output_dir = run.work_dir / f"{size}-{config}"
            record = {"size": size, "config": config, "processes": max(gpus, 1), "runs": {}}
            run.results["training"].append(record)
            for kind, steps in zip(settings.get("kinds", ("train", "resume")), settings["steps"]):
                probe = run.work_dir / f"{size}-{config}-{kind}.json"
                launch = [sys.executable, "-m", "accelerate.commands.launch"]
                launch += ["--config_file", str(ACCELERATE_CONFIGS / f"{config}.yaml")]
                launch += ["--num_processes", str(max(gpus, 1)), "--main_process_port", str(free_port())]
                launch += ["-m", "scripts.gpu_training", "--probe", str(probe)]
                launch += ["--warmup_steps", str(WARMUP_STEPS["dry_run" if run.dry_run else "gpu"]), "--"]
                recipe = [*RECIPE_OPTIONS, *settings["options"], "--output_dir", str(output_dir)]
                recipe += ["--max_steps", str(steps), "--save_steps", str(steps)]
                recipe += ["--resume_from_checkpoint", "last"] if kind == "resume" else []
                part = run.command(f"{kind} {size} {config}", kind, launch + recipe)
                record["runs"][kind] = {
                    "status": part["status"],
                    "wall_seconds": part.get("seconds"),
                    "max_steps": steps,
                    **read_json(probe),
                }
                run.save()
                if part["status"] != "ok":
                    break  # nothing to resume from
            report = read_json(output_dir / "metrics.json")
            record["report"] = {
                "parameters": report.get("model", {}).get("parameters"),
                "validation": report.get("validation"),
                "test": report.get("test"),
                "hardware": report.get("training", {}).get("hardware"),
                "runtime_seconds": report.get("training", {}).get("runtime_seconds"),
            }
            run.save()


# `translate` end to end with the demo the training part trained: the dynamic cache against the compiled static cache.
DECODING = {"gpu": dict(lines=10_000, device="cuda", dtype="bfloat16"), "dry_run": dict(lines=40, device="cpu")}


def decoding(run: Run) -> None:
    model = run.translation_model or run.work_dir / f"{'tiny' if run.dry_run else 'demo'}-ddp"
    if not (model / "config.json").exists():
        which = "--translation_model" if run.translation_model else "the training part"
        run.results["decoding"] = {"status": f"not run: no model in {model} ({which})"}
        return
    settings = DECODING["dry_run" if run.dry_run else "gpu"]
    path = run.work_dir / "decoding.json"
    argv = [sys.executable, "-m", "scripts.benchmark_translate", "--model", str(model), "--output_json", str(path)]
    argv += ["--systems", "translate", "translate-static", "--lines", str(settings["lines"])]
    argv += ["--device", settings["device"], "--dtype", settings.get("dtype", "float32")]
    part = run.command("decoding", "decoding", argv)
    run.results["decoding"] = {"status": part["status"], **read_json(path)}
    run.save()


# ---------------------------------------------------------------------------------------------------- the summary


def figure(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:,.0f}"
    return str(value)


def table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(figure(cell) for cell in row) + " |" for row in rows]


def summary(results: dict) -> str:
    env = results.get("environment", {})
    gpus = env.get("gpus") or []
    smi = env.get("nvidia_smi") if isinstance(env.get("nvidia_smi"), dict) else {}
    driver = next((gpu.get("driver_version") for gpu in smi.get("gpus", [])), None)
    packages = env.get("packages", {})
    cards = ", ".join(f"{g['name']} ({g['memory_gib']} GiB, sm {g['capability']})" for g in gpus)
    lines = [
        f"# GPU acceptance run ({results['mode']})",
        "",
        f"- GPU: {cards or 'none'}; driver {driver or '-'}; CUDA (torch) {env.get('torch_cuda') or '-'}; "
        f"cuDNN {env.get('cudnn') or '-'}",
        f"- CPU: {env.get('cpu', '-')}; Python {env.get('python', '-')}",
        "- " + ", ".join(f"{name} {version}" for name, version in packages.items()),
        f"- commit: {env.get('commit', '-')}",
        f"- started {results['started']}; {results.get('seconds', 0):.0f} s of a "
        f"{results['time_limit_s']:.0f} s limit",
    ]
    if env.get("import_errors"):
        lines += [f"- does not import: {name}: {error}" for name, error in env["import_errors"].items()]
    lines += ["", "## Parts", ""]
    lines += table(
        ["part", "status", "seconds", "budget s", "note"],
        [[p["name"], p["status"], p.get("seconds"), p["budget_s"], p.get("note", "")] for p in results["parts"]],
    )
    lines += [
        f"- this command failed in its {name} part: {error.splitlines()[-1]}"
        for name, error in results.get("errors", {}).items()
    ]
    if results.get("interrupted"):
        lines.append(f"- stopped from outside ({results['interrupted']})")
    lines += tests_section(results.get("tests") or {})
    lines += benchmark_section(results.get("benchmark") or {})
    lines += recipe_section(results.get("recipe") or {}, results.get("benchmark") or {}, results["mode"])
    lines += training_section(results.get("training") or [])
    lines += decoding_section(results.get("decoding") or {})
    return "\n".join(lines) + "\n"


def decoding_section(record: dict) -> list[str]:
    lines = ["", "## Decoding: translate end to end, dynamic cache against the compiled static cache", ""]
    rows = record.get("rows") or {}
    if not rows:
        return lines + [record.get("status", "not run")]
    bleu = (rows.get("translate") or {}).get("bleu")
    lines.append(
        f"{record.get('lines')} lines on {record.get('device')}, {record.get('dtype')}, with the model in "
        f"{Path(record.get('model', '?')).name}" + (f" (BLEU {bleu} on those lines)" if bleu is not None else "") + ":"
    )
    lines += table(
        ["system", "sentences/s", "first pass sentences/s", "compile s", "vs translate", "identical lines"],
        [
            [
                system,
                row.get("sentences_per_wall_s"),
                row.get("sentences_per_first_pass_wall_s"),
                row.get("compile_seconds"),
                row.get("wall_speedup_over_translate"),
                row.get("identical_to_translate"),
            ]
            for system, row in rows.items()
        ],
    )
    return lines


def tests_section(outcomes: dict) -> list[str]:
    counts, skips = {}, {}
    for outcome in outcomes.values():
        counts[outcome["outcome"]] = counts.get(outcome["outcome"], 0) + 1
        if outcome["outcome"] == "skipped":
            skips[outcome.get("message", "")] = skips.get(outcome.get("message", ""), 0) + 1
    lines = ["", "## CUDA tests", "", ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "no results"]
    lines += [f"- {n} skipped: {message}" for message, n in skips.items()]
    for name, outcome in outcomes.items():
        if outcome["outcome"] not in ("passed", "skipped"):
            lines.append(f"- {outcome['outcome']}: `{name}`: {outcome.get('message', '')[:300]}")
    return lines


def benchmark_section(data: dict) -> list[str]:
    settings, peaks = data.get("settings", {}), data.get("peaks", {})
    lines = ["", "## Benchmark", ""]
    if not settings:
        return lines + ["no results"]
    card = peaks.get("card_dense_bf16")
    matmul = {k: v for k, v in peaks.items() if k.startswith("matmul") and v}
    lines.append(
        f"bf16 autocast on {settings['device_name']}: card's dense bf16 peak "
        f"{figure(card / 1e12) + ' TFLOP/s (' + settings['card'] + ')' if card else 'unknown (card not in the table)'}"
        + "".join(f"; measured {k.replace('_', ' ')}^2 {v / 1e12:.0f} TFLOP/s" for k, v in matmul.items())
        + f". Training batch: {settings['filled_workload']['pairs_per_batch']} pairs, about "
        f"{settings['filled_workload']['target_tokens_per_batch']:,.0f} target tokens, fused AdamW. Ratios to "
        "MarianMTModel (sdpa) of the same size."
    )
    lines.append("")
    columns = [
        ("train tok/s", "train_filled_tokens_per_s"),
        ("% of card peak", "train_filled_utilisation"),
        ("% of matmul", "train_filled_of_matmul"),
        ("train peak MB", "train_filled_peak_mb"),
        ("first pass s", "warmup_seconds"),
        ("train tok/s, batch 32", "train_tokens_per_s"),
        ("greedy tok/s", "greedy_tokens_per_s"),
        ("beam-4 tok/s", "beam4_tokens_per_s"),
    ]
    rows = []
    for row in data.get("rows", []):
        if "compiled_speedup" in row:
            continue
        cells = [f"{row.get('size', '')} {row['label']}"]
        for _, metric in columns:
            value = row.get(metric)
            if value is not None and ("utilisation" in metric or "of_matmul" in metric):
                cells.append(f"{100 * value:.1f}%")
            elif value is not None and metric in row.get("vs_marian", {}):
                cells.append(f"{value:,.0f} (x{row['vs_marian'][metric]:.2f})")
            else:
                cells.append(value)
        rows.append(cells)
    lines += table(["system", *(title for title, _ in columns)], rows)
    compiled = next((row for row in data.get("rows", []) if "compiled_speedup" in row), None)
    if compiled:
        lines += [
            "",
            f"Compiled static cache, batch {compiled.get('compiled_batch', '-')}: "
            f"{compiled['greedy_tokens_per_s']:,.0f} greedy tok/s against "
            f"{compiled['uncompiled_greedy_tokens_per_s']:,.0f} uncompiled (same bf16 weights); compilation "
            f"{compiled['compile_seconds']:.0f} s; identical rows {compiled['identical_rows']}.",
        ]
    kernels = [
        f"{backend} {1e3 * a['seconds']:.2f} ms per call at length {a['length']}, the first call at a new length "
        f"{1e3 * a['first_call_seconds']:.1f} ms (at most {1e3 * a['first_call_most']:.1f})"
        for backend, a in data.get("attention", {}).items()
    ]
    if kernels:
        lines += [
            "",
            f"Self-attention with a padding mask, forward and backward, by SDPA kernel: {'; '.join(kernels)}.",
        ]
    shapes = data.get("shapes")
    if shapes:
        lines += [
            "",
            f"A bf16 linear layer ({shapes['d_model']} -> {shapes['ffn_dim']}), forward and backward on about "
            f"{shapes['rows']} rows: {1e6 * shapes['same_rows_seconds']:.0f} us per call at one row count, "
            f"{1e6 * shapes['new_rows_seconds']:.0f} us at a new row count every call.",
        ]
    lines += [""] + [
        f"- {'PASS' if t['passed'] else 'FAIL'}: {t['target']}: {t['value']:.2f}" for t in data.get("targets", [])
    ]
    if settings["device"] == "cpu":
        lines.append("- (a dry run: its CPU figures check the steps, and say nothing of the targets)")
    lines += [f"- skipped: {name}: {why}" for name, why in data.get("skipped", {}).items()]
    lines += [
        f"- error: {name}: {error.splitlines()[-1] if error else ''}" for name, error in data.get("errors", {}).items()
    ]
    profiles = [(f"{row.get('size', '')} {row['label']}", row) for row in data.get("rows", []) if row.get("profile")]
    profiles += [
        (f"{row.get('size', '')} ours, eager generate() at batch {row.get('compiled_batch')}", {"profile": p})
        for row in data.get("rows", [])
        if (p := row.get("eager_profile"))
    ]
    if profiles:
        lines += ["", "### One step under torch.profiler", ""]
        lines += profile_lines([(name, row) for name, row in profiles if "error" not in row["profile"]])
        lines += [
            f"- {name}: not profiled: {row['profile']['error']}" for name, row in profiles if "error" in row["profile"]
        ]
    return lines


def profile_lines(profiles: list[tuple[str, dict]]) -> list[str]:
    """Per profiled step: wall time, kernel time, idle share, kernel time by kind, the longest kernels and the host's
    longest operators."""
    if not profiles:
        return []
    kinds = list(dict.fromkeys(kind for _, row in profiles for kind in row["profile"]["kinds"]))
    rows = []
    for name, row in profiles:
        p = row["profile"]
        idle = p.get("idle_fraction")
        cells = [name, p["wall_ms"], p["kernel_ms"], f"{100 * idle:.0f}%" if idle is not None else "-", p["kernels"]]
        for kind in kinds:
            k = p["kinds"].get(kind)
            cells.append(f"{k['ms']:.1f} ({100 * k['share']:.0f}%)" if k and k.get("share") is not None else "-")
        rows.append(cells)
    lines = table(["step", "wall ms", "kernel ms", "GPU idle", "kernels", *(f"{k} ms" for k in kinds)], rows) + [""]
    for name, row in profiles:
        top = "; ".join(f"{kernel} {ms:.2f} ms" for kernel, ms in row["profile"]["top"][:4])
        lines.append(f"- {name}, longest kernels: {top}")
        if host := row["profile"].get("host_top"):
            lines.append(
                f"- {name}, the host's longest operators: {'; '.join(f'{op} {ms:.2f} ms' for op, ms in host[:4])}"
            )
    return lines


def run_profile_lines(runs: list[tuple[str, dict]]) -> list[str]:
    """The profiled step of training runs (the probe's last warm-up step), or why it was not profiled."""
    profiled = [(f"{name}, step {r['profile']['step']}", r) for name, r in runs if "step" in (r.get("profile") or {})]
    failed = [
        f"- {name}: not profiled: {r['profile']['error']}" for name, r in runs if "error" in (r.get("profile") or {})
    ]
    if not profiled and not failed:
        return []
    heading = ["", "One step of each run under torch.profiler (its batch, forward, backward and update):", ""]
    return heading + profile_lines(profiled) + failed


def spans_text(record: dict) -> str:
    """The probe's steps/s over each span of logging steps, or nothing."""
    spans = [
        f"{a}-{b} {figure(span['steps_per_second'])}" for span in record.get("spans") or [] for a, b in [span["steps"]]
    ]
    return f" Steps/s by span of logging steps: {', '.join(spans)}." if spans else ""


def recipe_section(record: dict, benchmark: dict, mode: str) -> list[str]:
    lines = ["", "## The recipe: train translation --paper_preset base, its defaults, synthetic WMT-like corpus", ""]
    if not record:
        return lines + ["not run"]
    mb, reserved = record.get("peak_memory_allocated_mb"), record.get("peak_memory_reserved_mb")
    utilisation = record.get("utilisation")
    lines.append(
        f"{record['status']}: steps {record.get('first_step', '-')}->{record.get('last_step', '-')}, timed "
        f"{record.get('timed_steps', '-')} steps after {record.get('warmup_steps', '-')}: "
        f"{figure(record.get('steps_per_second'))} steps/s, {figure(record.get('target_tokens_per_second'))} target "
        f"tok/s, {f'{100 * utilisation:.1f}%' if utilisation else '-'} of the card's dense bf16 peak; --max_tokens "
        f"{record.get('max_tokens', '-')} x {record.get('gradient_accumulation_steps', '-')} accumulation step(s); "
        f"peak {figure(mb / 1024 if mb else None)} GiB (reserved {figure(reserved / 1024 if reserved else None)} GiB; "
        f"allocator {record.get('allocator_settings') or 'default'}: {record.get('device_allocations', '-')} device "
        f"allocations, {record.get('allocation_retries', '-')} retries); "
        f"{record.get('compiled_graphs', '-')} compiled graph(s), {record.get('graph_breaks', '-')} graph break(s); "
        f"TORCH_CUDNN_SDPA_DEPRIORITIZED {record.get('cudnn_attention_deprioritized') or 'unset'}; "
        f"{figure(record.get('wall_seconds'))} s in all.{spans_text(record)}"
    )
    best = next(  # the same model the same way: ours, eager, as the recipe's defaults train it
        (row for row in benchmark.get("rows", []) if row.get("size") == "base" and row.get("train_filled_tokens_per_s")
         and row["system"] == "ours-sdpa"),
        None,
    )  # fmt: skip
    if best and record.get("target_tokens_per_second"):
        ratio = record["target_tokens_per_second"] / best["train_filled_tokens_per_s"]
        verdict = "PASS" if ratio >= RECIPE_TARGET else "FAIL"
        lines.append(
            f"- {verdict}: the recipe >= {RECIPE_TARGET:.0%} of the benchmark's filled batch ({best['label']}): "
            f"{ratio:.2f}" + (" (a dry run: other sizes)" if mode != "GPU" else "")
        )
    return lines + run_profile_lines([("recipe base", record)])


def training_section(records: list[dict]) -> list[str]:
    lines = ["", "## Training (train translation through accelerate launch, bf16)", ""]
    rows = []
    for record in records:
        for kind, r in record["runs"].items():
            mb = r.get("peak_memory_allocated_mb")
            rows.append(
                [
                    f"{record['size']} {record['config']} {kind}",
                    r["status"],
                    f"{r.get('distributed_type', '-')} / {r.get('wrapped_model', '-')} x{r.get('world_size', '-')}",
                    f"{r.get('first_step', '-')}->{r.get('last_step', '-')}",
                    r.get("steps_per_second"),
                    r.get("target_tokens_per_second"),
                    mb / 1024 if mb else None,
                    r.get("wall_seconds"),
                ]
            )
    lines += table(
        ["run", "status", "distributed / model x processes", "steps", "steps/s", "target tok/s", "peak GiB", "wall s"],
        rows,
    )
    for record in records:
        for kind, r in record["runs"].items():
            if spans_text(r):
                lines.append(f"- {record['size']} {record['config']} {kind}:{spans_text(r)}")
    for record in records:
        report = record.get("report") or {}
        if report.get("validation") is not None:
            lines.append(
                f"- {record['size']} {record['config']}: {figure(report.get('parameters'))} parameters; validation "
                f"BLEU {figure(report['validation'].get('bleu'))} (an undertrained model); {report.get('hardware')}"
            )
    demo = next(
        (r for record in records if record["size"] == "demo" for r in [record["runs"].get("train")] if r), None
    )
    if demo and demo.get("steps_per_second"):
        verdict = "PASS" if demo["steps_per_second"] >= DEMO_TARGET else "FAIL"
        lines.append(f"- {verdict}: the demo >= {DEMO_TARGET} steps/s: {demo['steps_per_second']:.1f}")
    compiled = next((r for record in records for r in [record["runs"].get("compiled")] if r), None)
    if compiled and compiled.get("steps_per_second"):
        lines.append(
            f"- the demo with --torch_compile: {compiled['steps_per_second']:.1f} steps/s after its first "
            f"{compiled.get('warmup_steps')} steps ({compiled.get('compiled_graphs')} compiled graph(s), "
            f"{compiled.get('graph_breaks')} graph break(s))"
        )
    runs = [
        (f"{record['size']} {record['config']} {kind}", r) for record in records for kind, r in record["runs"].items()
    ]
    return lines + run_profile_lines(runs)


# In this order, after the environment: (the --parts name, the function).
PARTS = [
    ("benchmark", benchmark),
    ("recipe", recipe),
    ("training", training),
    ("decoding", decoding),
    ("tests", tests),
    ("benchmark_big", benchmark_big),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", type=Path, required=True, help="where the summary, figures and log go")
    parser.add_argument("--wheels", type=Path, help="a folder of wheels to install first, for every part's processes")
    names = list(dict.fromkeys(name for name, _ in PARTS))
    parser.add_argument("--parts", nargs="+", choices=names, default=names, help="(default: all)")
    parser.add_argument(
        "--time_limit", type=float, help=f"seconds for the whole run (default {TIME_LIMIT}; dry run 1800)"
    )
    parser.add_argument("--dry_run", action="store_true", help="the same parts on the CPU at tiny sizes, for CI")
    parser.add_argument(
        "--translation_model",
        type=Path,
        help="a model folder that `train translation` saved, for the decoding part (default: the demo that the "
        "training part trains, whose 100 steps leave its translations a few tokens long)",
    )
    args = parser.parse_args(argv)
    if args.wheels is not None:
        args.wheels = args.wheels.resolve()  # the parts run from the repository's root
        if not sorted(args.wheels.glob("*.whl")):
            parser.error(f"--wheels {args.wheels}: no .whl files there")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    time_limit = args.time_limit or (1800 if args.dry_run else TIME_LIMIT)
    with tempfile.TemporaryDirectory(prefix="gpu-acceptance-") as work_dir:
        model = args.translation_model and args.translation_model.resolve()  # the parts run from the repository's root
        run = Run(args.output_dir, Path(work_dir), args.dry_run, time_limit, args.wheels, model)
        arguments = sys.argv[1:] if argv is None else argv
        run.results["command"] = "python -m scripts.gpu_acceptance " + shlex.join(arguments)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, run.interrupted)
        if args.wheels is not None:
            install_wheels(run)
        environment(run)
        for name, part in PARTS:
            if name in args.parts:
                try:
                    part(run)
                except Exception:  # a bug here must not cost the other parts' results
                    run.results.setdefault("errors", {})[part.__name__] = traceback.format_exc()
                    run.save()
        run.save()
    print(summary(run.results))
    passed = all(part["status"] == "ok" for part in run.results["parts"]) and not run.results.get("errors")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
