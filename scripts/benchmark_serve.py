#!/usr/bin/env python
"""Load on `hf-vanilla-transformer serve` over loopback: sentences/s and latency at several numbers of concurrent
clients, against the naive server people write, and the server's memory across a soak.

    python -m scripts.benchmark_serve --model outputs/demo-de-en --output_json serve.json
    python -m scripts.benchmark_serve --model DIR --clients 1 8 --seconds 10 --soak_minutes 1 --systems serve naive

Each system is a server process on 127.0.0.1 with the model's own decoding settings (beam 4, length penalty 0.6 for
this package's trained models), started in turn:
- serve: this package's server, PyTorch float32, its defaults (sentences of concurrent requests share batches; torch on
  the cores less one);
- serve-2threads: the same with torch on two threads that sleep when idle (`OMP_WAIT_POLICY=PASSIVE`);
- serve-ct2: the same with `--backend ctranslate2`;
- naive: a FastAPI route (a plain `def`, run in FastAPI's thread pool) calling `pipeline("translation")` per request,
  torch's default threads;
- naive-1thread: the same with torch on one thread (as this server takes one core of two by default), which
  separates what batching gains from what the thread setting gains.
Clients are asyncio tasks in this process (httpx), each sending one German sentence of the bundled test split per
request (`POST /translate`, JSON, LibreTranslate's fields) and the next as soon as the answer comes. Every level is
bounded in time (`--seconds`) and requests (`--max_requests`), after an untimed warm-up; a request that fails or
takes longer than `--timeout` counts as failed. Reported per level: sentences/s (answered sentences over the level's
wall time), latency p50/p95/p99, failures, and answered sentences per CPU-second of the server process (which other
users of a shared machine stretch far less than the wall clock; spinning threads count). The soak drives `serve` at
`--soak_clients` clients for `--soak_minutes` and samples the server's resident memory (RSS) every few seconds: its
growth from the first sample to the last.
Clients and servers share the machine's cores, as they would on one host.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from hf_vanilla_transformer.data.corpus import BUNDLED_CORPUS
from hf_vanilla_transformer.training.report import cpu_model
from scripts.ports import free_port


SYSTEMS = {
    "serve": "hf-vanilla-transformer serve (PyTorch float32)",
    "serve-2threads": "serve --threads 2, OMP_WAIT_POLICY=PASSIVE",
    "serve-ct2": "hf-vanilla-transformer serve --backend ctranslate2",
    "naive": "naive: FastAPI route calling pipeline() per request",
    "naive-1thread": "naive, torch on 1 thread",
}
ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------- the naive server


def naive_server(model: str, port: int, threads: int | None) -> None:
    """What a tutorial writes: one pipeline, one route, a request translated by a pipeline call of its own."""
    import torch
    import uvicorn
    from fastapi import FastAPI
    from pydantic import BaseModel
    from transformers import pipeline

    import hf_vanilla_transformer  # noqa: F401  (registers the translation pipeline)

    if threads:
        torch.set_num_threads(threads)
    translate = pipeline("translation", model=model, device="cpu")
    app = FastAPI()

    class Request(BaseModel):
        q: str
        source: str = "de"
        target: str = "en"

    @app.post("/translate")
    def route(request: Request):
        return {"translatedText": translate(request.q)[0]["translation_text"]}

    @app.get("/health")
    def health():
        return {"status": "ok"}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


# ------------------------------------------------------------------------------------------------------ servers


def start(system: str, model: str, port: int, log: Path) -> subprocess.Popen:
    if system.startswith("naive"):
        command = [sys.executable, "-m", "scripts.benchmark_serve", "--naive_server", "--model", model]
        command += ["--threads", "1"] if system == "naive-1thread" else []
    else:
        command = [sys.executable, "-m", "hf_vanilla_transformer", "serve", "--model", model]
        command += ["--backend", "ctranslate2"] if system == "serve-ct2" else []
    command += ["--port", str(port)]
    with open(log, "wb") as output:
        process = subprocess.Popen(
            command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 600
    import httpx

    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{system} exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{system} did not start within 10 minutes: {log.read_text()[-2000:]}")


# ------------------------------------------------------------------------------------------------------ clients


async def drive(
    url: str, sentences: list[str], clients: int, seconds: float, max_requests: int, timeout: float, failures=None
):
    """`clients` concurrent clients for `seconds` (or `max_requests` requests): [(latency, ok)], wall seconds; why
    requests failed is counted into `failures`."""
    import httpx

    results, start = [], time.perf_counter()
    failures = {} if failures is None else failures
    deadline = start + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:

        async def client_loop(k: int):
            i = k
            while time.perf_counter() < deadline and len(results) < max_requests:
                body = {"q": sentences[i % len(sentences)], "source": "de", "target": "en"}
                sent = time.perf_counter()
                try:
                    response = await client.post(f"{url}/translate", json=body)
                    ok = response.status_code == 200 and "translatedText" in response.json()
                    why = None if ok else f"HTTP {response.status_code}: {response.text[:200]}"
                except httpx.HTTPError as error:
                    ok, why = False, f"{type(error).__name__}: {error}"
                results.append((time.perf_counter() - sent, ok))
                if why:
                    failures[why] = failures.get(why, 0) + 1
                i += clients

        await asyncio.gather(*(client_loop(k) for k in range(clients)))
    return results, time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def summary(results, wall: float) -> dict:
    latencies = sorted(latency for latency, ok in results if ok)
    failed = sum(not ok for _, ok in results)
    row = dict(requests=len(results), failed=failed, seconds=round(wall, 2))
    row["sentences_per_s"] = round(len(latencies) / wall, 2)
    if latencies:
        row.update({f"p{q}_s": round(percentile(latencies, q), 3) for q in (50, 95, 99)})
    return row


def batch_counts(url: str) -> tuple[float, float] | None:
    """(model batches, their sentences) so far, from this package's server's /metrics; None from another server."""
    import httpx

    metrics = httpx.get(f"{url}/metrics", timeout=60)
    if metrics.status_code != 200:
        return None
    values = dict(
        line.split() for line in metrics.text.splitlines() if line.startswith("translation_batch_sentences_")
    )
    return float(values["translation_batch_sentences_count"]), float(values["translation_batch_sentences_sum"])


def cpu_seconds(pid: int) -> float:
    """CPU time of the server process, all its threads: what other users of a shared machine cannot stretch."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def rss(pid: int) -> int:
    import psutil

    return psutil.Process(pid).memory_info().rss


def soak(url: str, pid: int, sentences, clients: int, minutes: float, timeout: float) -> dict:
    """Drive the server for `minutes`, sampling its RSS every `interval` seconds."""
    samples, failed, requests, failures = [], 0, 0, {}
    interval = max(1.0, minutes * 60 / 60)
    end = time.monotonic() + minutes * 60
    while (left := end - time.monotonic()) > 0:
        results, _ = asyncio.run(drive(url, sentences, clients, min(interval, left), 10**9, timeout, failures))
        requests += len(results)
        failed += sum(not ok for _, ok in results)
        samples.append(rss(pid))
    first, last = samples[0], samples[-1]
    return dict(
        minutes=minutes,
        clients=clients,
        requests=requests,
        failed=failed,
        rss_first_mb=round(first / 2**20, 1),
        rss_last_mb=round(last / 2**20, 1),
        rss_max_mb=round(max(samples) / 2**20, 1),
        rss_growth_percent=round(100 * (last - first) / first, 2),
        samples=len(samples),
        **({"failures": failures} if failures else {}),
    )


# ---------------------------------------------------------------------------------------------------------- run


def git_commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return result.stdout.strip() or "unknown"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a trained model folder (with its tokenizer)")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    parser.add_argument("--clients", nargs="+", type=int, default=[1, 8, 32, 128])
    parser.add_argument("--seconds", type=float, default=30, help="time per level")
    parser.add_argument("--max_requests", type=int, default=5000, help="requests per level")
    parser.add_argument("--timeout", type=float, default=60, help="seconds after which a request counts as failed")
    parser.add_argument("--soak_minutes", type=float, default=5, help="0: no soak")
    parser.add_argument("--soak_clients", type=int, default=32)
    parser.add_argument("--output_json", help="also write the results here")
    parser.add_argument("--naive_server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.naive_server:
        return naive_server(args.model, args.port, args.threads)

    pairs = [json.loads(line)["translation"] for line in (BUNDLED_CORPUS / "test.jsonl").open(encoding="utf-8")]
    sentences = [pair["de"] for pair in pairs]
    results = dict(
        cpu=cpu_model(),
        cpu_count=os.cpu_count(),
        commit=git_commit(),
        model=args.model,
        command=" ".join(["python -m scripts.benchmark_serve", *(argv if argv is not None else sys.argv[1:])]),
        date=time.strftime("%Y-%m-%d %H:%M"),
        load_average_before=os.getloadavg(),
        systems={},
    )
    log_dir = Path(os.environ.get("TMPDIR", "/tmp"))
    for system in args.systems:
        port = free_port()
        process = start(system, args.model, port, log_dir / f"benchmark_serve-{system}-{os.getpid()}.log")
        url = f"http://127.0.0.1:{port}"
        try:
            asyncio.run(drive(url, sentences, 8, 60, 32, args.timeout))  # warm-up, untimed
            levels = results["systems"][system] = {}
            for clients in args.clients:
                before, batches, failures = cpu_seconds(process.pid), batch_counts(url), {}
                outcome = drive(url, sentences, clients, args.seconds, args.max_requests, args.timeout, failures)
                level = levels[str(clients)] = summary(*asyncio.run(outcome))
                if batches:
                    (count, total), (count_before, total_before) = batch_counts(url), batches
                    level["mean_batch_sentences"] = round((total - total_before) / max(count - count_before, 1), 1)
                if failures:
                    level["failures"] = failures
                level["server_cpu_seconds"] = round(cpu_seconds(process.pid) - before, 2)
                level["load_average"] = round(os.getloadavg()[0], 1)  # of the last minute: other users' share
                level["sentences_per_cpu_s"] = round(
                    (level["requests"] - level["failed"]) / max(level["server_cpu_seconds"], 1e-9), 2
                )
                print(f"{system}, {clients} clients: {levels[str(clients)]}", file=sys.stderr)
            if system == "serve" and args.soak_minutes > 0:
                results["soak"] = soak(url, process.pid, sentences, args.soak_clients, args.soak_minutes, args.timeout)
                print(f"soak: {results['soak']}", file=sys.stderr)
        finally:
            process.terminate()
            process.wait(timeout=120)
    results["load_average_after"] = os.getloadavg()
    results["targets"] = targets(results)
    print(format_table(results))
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(results, indent=2) + "\n")
    return results


def targets(results: dict) -> dict:
    """The service's targets, where this run measured what they need (2 CPU cores, the demo model)."""
    systems, found = results["systems"], {}

    def rate(system, clients):
        return systems.get(system, {}).get(str(clients), {}).get("sentences_per_s")

    if rate("serve", 32) and rate("serve", 1):
        found["32 clients >= 4x one client"] = (round(rate("serve", 32) / rate("serve", 1), 2), 4.0)
    if rate("serve", 32) and rate("naive", 32):
        found["32 clients >= 3x the naive server"] = (round(rate("serve", 32) / rate("naive", 32), 2), 3.0)
    if rate("serve", 32) and rate("naive-1thread", 32):
        found["32 clients >= 3x the naive server on 1 thread"] = (
            round(rate("serve", 32) / rate("naive-1thread", 32), 2),
            3.0,
        )
    if rate("serve-ct2", 32) and rate("serve", 32):
        found["ctranslate2 >= 1.5x PyTorch at 32 clients"] = (round(rate("serve-ct2", 32) / rate("serve", 32), 2), 1.5)
    at_32 = systems.get("serve", {}).get("32", {})
    if "p99_s" in at_32:
        found["p99 at 32 clients < 1.5 s"] = (at_32["p99_s"], 1.5)
    if "soak" in results:
        found["RSS growth over the soak < 5%"] = (results["soak"]["rss_growth_percent"], 5.0)
    ours = [level for system in ("serve", "serve-ct2") for level in systems.get(system, {}).values()]
    found["failed requests of this server = 0"] = (
        sum(level["failed"] for level in ours) + results.get("soak", {}).get("failed", 0),
        0,
    )
    return {
        name: dict(
            measured=value, target=target, met=value <= target if "<" in name or "= 0" in name else value >= target
        )
        for name, (value, target) in found.items()
    }


def format_table(results: dict) -> str:
    out = [
        f"{results['cpu']}, {results['cpu_count']} CPUs; commit {results['commit']}; load average "
        f"{results['load_average_before'][0]:.1f} before, {results['load_average_after'][0]:.1f} after",
        "",
        "| system | clients | sentences/s | p50 (s) | p95 (s) | p99 (s) | requests | failed "
        "| sentences per server CPU s | sentences per batch | load average |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for system, levels in results["systems"].items():
        for clients, row in levels.items():
            cells = [SYSTEMS[system], clients, row["sentences_per_s"], *(row.get(f"p{q}_s", "") for q in (50, 95, 99))]
            cells += [row["requests"], row["failed"], row["sentences_per_cpu_s"], row.get("mean_batch_sentences", "")]
            cells.append(row["load_average"])
            out.append("| " + " | ".join(str(c) for c in cells) + " |")
    if "soak" in results:
        s = results["soak"]
        out += [
            "",
            f"Soak: {s['minutes']} min at {s['clients']} clients, {s['requests']} requests, {s['failed']} failed; RSS "
            f"{s['rss_first_mb']} MB -> {s['rss_last_mb']} MB (max {s['rss_max_mb']} MB), "
            f"{s['rss_growth_percent']:+.2f}%",
        ]
    out += ["", "| target | measured | met |", "|---|---|---|"]
    out += [f"| {name} | {t['measured']} | {'yes' if t['met'] else 'no'} |" for name, t in results["targets"].items()]
    return "\n".join(out)


if __name__ == "__main__":
    main()
