#!/usr/bin/env python
"""What a client can make `hf-vanilla-transformer serve` hold: its resident memory (RSS) across requests that each
ask for decoding options no request asked for before.

    python -m scripts.serve_memory --model outputs/demo-de-en --output_json serve-memory.json

Each request is `POST /v1/translate` with one German sentence of the bundled test split and a `length_penalty` of
its own (0.5 + i / 100,000), the field that makes every request a distinct decoding: without a bound, the server would
keep one resolved decoding per request. The server's RSS is sampled every `--every` requests; reported: its size
after the first `--baseline` requests (the server warm) and after the last, and the difference. Target
(docs/serving.md: everything a client can make the server hold is bounded): within a few MB.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from hf_vanilla_transformer.data.corpus import BUNDLED_CORPUS
from hf_vanilla_transformer.training.report import cpu_model
from scripts.benchmark_serve import git_commit, rss, start
from scripts.ports import free_port


TARGET_MB = 5.0


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a trained model folder (with its tokenizer)")
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--baseline", type=int, default=500, help="requests after which the server counts as warm")
    parser.add_argument("--every", type=int, default=500, help="requests between RSS samples")
    parser.add_argument("--output_json", help="also write the results here")
    parser.add_argument("--log", default="serve-memory.log", help="the server's output")
    args = parser.parse_args(argv)

    import httpx

    lines = (BUNDLED_CORPUS / "test.jsonl").read_text(encoding="utf-8").splitlines()
    sentences = [json.loads(line)["translation"]["de"] for line in lines[:200]]
    port = free_port()
    server = start("serve", args.model, port, Path(args.log))
    url = f"http://127.0.0.1:{port}"
    samples, failed, began = {}, 0, time.perf_counter()
    try:
        with httpx.Client(timeout=60) as client:
            for i in range(1, args.requests + 1):
                body = {"texts": [sentences[i % len(sentences)]], "length_penalty": 0.5 + i / 100_000}
                failed += client.post(f"{url}/v1/translate", json=body).status_code != 200
                if i % args.every == 0 or i == args.baseline:
                    samples[i] = round(rss(server.pid) / 2**20, 1)
                    print(f"{i:,} requests: RSS {samples[i]} MB", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(timeout=120)
    growth = round(samples[args.requests] - samples[args.baseline], 1)
    results = dict(
        cpu=cpu_model(),
        commit=git_commit(),
        model=str(Path(args.model)),
        requests=args.requests,
        failed=failed,
        seconds=round(time.perf_counter() - began, 1),
        rss_mb=samples,
        growth_mb=growth,
        target=f"RSS after {args.requests:,} requests within {TARGET_MB} MB of its size after {args.baseline}",
        met=growth <= TARGET_MB and failed == 0,
    )
    print(
        f"{results['cpu']}: RSS {samples[args.baseline]} MB after {args.baseline:,} requests, "
        f"{samples[args.requests]} MB after {args.requests:,} ({growth:+} MB), each with a length_penalty of its own; "
        f"{failed} failed; target met: {results['met']}"
    )
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
