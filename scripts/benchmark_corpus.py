#!/usr/bin/env python
"""Speed of `hf-vanilla-transformer translate-corpus` (Ray Data) against `translate` at equal workers: Ray's overhead.

    python -m scripts.benchmark_corpus --model outputs/demo-de-en      # 5,000 lines; 1 and 2 workers each

The German side of the bundled test split, repeated to --lines lines, is translated in one run by four systems, each
in a fresh process, with the same options (the model's decoding settings, the default token budget):
- translate-1: `translate_file` (what `translate` runs) in one process;
- translate-2: the same in two processes (`accelerate launch`, gloo);
- corpus-1 / corpus-2: `translate_corpus` (what `translate-corpus` runs) on a local Ray with 1 / 2 workers,
  --shard_rows lines per shard;
every process or worker with --threads torch threads (default 1). Reported: sentences per second of the translation
(translate: after the model loaded, every process ready; corpus: once every worker runs, the shards started since
over the time to the end), Ray's overhead at equal workers (translate's rate over the corpus rate, less 1), the
start-up before the translation apart (`ray.init`, the actors' start and model loading), and whether the
translations are the same lines. Sentences are input lines here (the test split's lines are single sentences).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hf_vanilla_transformer.data.corpus import BUNDLED_CORPUS
from hf_vanilla_transformer.training.report import cpu_model


SYSTEMS = ("translate-1", "translate-2", "corpus-1", "corpus-2")


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_system(system: str, model: str, source: Path, output: Path, shard_rows: int, threads: int) -> dict:
    """Translate `source` with `system` in this process; the timed seconds (and the start-up before them)."""
    from hf_vanilla_transformer.translate.options import DecodeOptions, EngineOptions

    workers = int(system[-1])
    engine, decoding = EngineOptions(device="cpu", threads=threads), DecodeOptions()
    if system.startswith("translate"):
        import torch

        from hf_vanilla_transformer.translate.translator import load_translator, translate_file

        translator = load_translator(model, engine)
        if torch.distributed.is_initialized():
            torch.distributed.barrier()
        start = time.perf_counter()
        translate_file([str(source)], str(output), translator, quiet=True)
        seconds = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        if torch.distributed.is_initialized():  # until the last process is done
            torch.distributed.all_reduce(seconds, op=torch.distributed.ReduceOp.MAX)
        return {"seconds": seconds.item()}
    import pyarrow.parquet as pq
    import ray

    from hf_vanilla_transformer.translate.corpus import translate_corpus
    from hf_vanilla_transformer.translate.ray_session import init_arguments

    start = time.perf_counter()
    ray.init(**init_arguments(None), log_to_driver=False)
    startup = time.perf_counter() - start
    folder = output.with_suffix(".shards")
    summary = translate_corpus(
        [str(source)], str(folder), model, engine, decoding, num_workers=workers, shard_rows=shard_rows
    )
    ray.shutdown()
    rows = [row for path in sorted(folder.glob("*.parquet")) for row in pq.read_table(path).to_pylist()]
    output.write_text("".join(row["translation"] + "\n" for row in rows), encoding="utf-8")
    return {
        "seconds": summary.seconds,
        "sentences_per_s": round(summary.steady_rows / summary.steady_seconds, 1),
        "steady_seconds": summary.steady_seconds,
        "steady_rows": summary.steady_rows,
        "startup": startup + summary.startup_seconds,
    }


def measure(system: str, args, source: Path, output: Path) -> dict:
    command = [sys.executable, __file__, "--model", args.model, "--run", system, "--source", str(source)]
    command += ["--output", str(output), "--shard_rows", str(args.shard_rows), "--threads", str(args.threads)]
    env = dict(os.environ)
    if system == "translate-2":
        from scripts.ports import free_port  # only here: the child processes run this file as a plain script

        launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
        launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
        launch += ["--main_process_port", str(free_port()), __file__]
        command = launch + command[2:]
    run = subprocess.run(command, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise RuntimeError(f"{system} failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a trained model folder (with its tokenizer)")
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--shard_rows", type=int, default=500, help="translate-corpus's rows per shard")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker or process")
    parser.add_argument("--output_json", help="also write the results here")
    parser.add_argument("--run", choices=SYSTEMS, help=argparse.SUPPRESS)  # one system, in this process
    parser.add_argument("--source", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        result = run_system(args.run, args.model, args.source, args.output, args.shard_rows, args.threads)
        if int(os.environ.get("RANK", "0")) == 0:
            print(json.dumps(result))
        return None

    pairs = [json.loads(line)["translation"] for line in (BUNDLED_CORPUS / "test.jsonl").open(encoding="utf-8")]
    lines = [pairs[i % len(pairs)]["de"] for i in range(args.lines)]
    results = dict(cpu=cpu_model(), cores=cores(), lines=args.lines, shard_rows=args.shard_rows, model=args.model)
    results["threads"] = args.threads
    results["load_average_before"] = os.getloadavg()[0]
    results["rows"], outputs = {}, {}
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "source.de"
        source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        for system in SYSTEMS:
            output = Path(work) / f"{system}.en"
            row = results["rows"][system] = measure(system, args, source, output)
            row.setdefault("sentences_per_s", round(args.lines / row["seconds"], 1))
            outputs[system] = sorted(output.read_text(encoding="utf-8").splitlines())
            print(f"{system}: {row}", file=sys.stderr)
    for workers in (1, 2):
        corpus, plain = results["rows"][f"corpus-{workers}"], results["rows"][f"translate-{workers}"]
        corpus["overhead"] = round(plain["sentences_per_s"] / corpus["sentences_per_s"] - 1, 3)
        corpus["same_translations"] = outputs[f"corpus-{workers}"] == outputs[f"translate-{workers}"]
    print(format_table(results))
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(results, indent=2) + "\n")
    return results


def format_table(results: dict) -> str:
    out = [
        f"{results['lines']} lines; {results['cpu']}, {results['cores']} cores, {results['threads']} thread(s) per "
        f"worker or process; {results['shard_rows']} rows per shard; load average "
        f"{results['load_average_before']:.1f} before the run",
        "",
        "| system | workers | seconds (all) | sentences/s | Ray's overhead at equal workers | start-up (s) "
        "| same translations as translate |",
        "|---|---|---|---|---|---|---|",
    ]
    for system, row in results["rows"].items():
        overhead = f"{row['overhead']:+.1%}" if "overhead" in row else ""
        startup = f"{row['startup']:.1f}" if "startup" in row else ""
        same = {True: "yes", False: "no"}.get(row.get("same_translations"), "")
        out.append(
            f"| {system} | {system[-1]} | {row['seconds']:.1f} | {row['sentences_per_s']} | {overhead} | {startup} "
            f"| {same} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    main()
