"""Token-budget batches against sentence batches: padding, real target tokens per second and peak memory.

    python -m scripts.batching_benchmark [--corpora bundled generated] [--steps 60] [--repeats 2]

On each corpus (the bundled Tatoeba training split, and the 30,000 generated pairs of `scripts.data_scaling`, whose
pairs join 1 to 3 Tatoeba pairs), three ways to batch the same tokenized pairs:
- `tokens`: `--max_tokens` batches ([`TokenBatchSampler`]), the budget chosen so that a batch holds on average as many
  real target tokens as 64 sentences do;
- `grouped`: 64 sentences grouped by length, the package's previous default (`--train_sampling_strategy
  group_by_length`, [`SeededLengthGroupedSampler`]);
- `random`: 64 sentences in random order (transformers' default).
Padding is counted over a whole epoch. Speed and memory come from training the demo model (7.6M parameters,
vocabulary 8,000) on the first `--steps` batches of an epoch, after 3 untimed ones, each strategy in a fresh process,
the strategies alternating within each repeat (medians reported): real (non-padding) target tokens per second of
forward, backward and Adam step, and the process's peak resident memory (VmHWM).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from hf_vanilla_transformer.data.corpus import load_parallel_corpus, pair_lengths, tokenize_corpus
from hf_vanilla_transformer.data.tokenizer import corpus_tokenizer
from hf_vanilla_transformer.training.batching import SeededLengthGroupedSampler, TokenBatchSampler
from hf_vanilla_transformer.training.report import cpu_model

from .data_scaling import generate_corpus


SENTENCES = 64
SEED = 42
STRATEGIES = ("tokens", "grouped", "random")


def tokenized(corpus: str, workdir: Path):
    """The tokenized training pairs of `corpus` ("bundled" or "generated") and their tokenizer."""
    if corpus == "bundled":
        train_file = None
    else:
        prefix = workdir / "generated-30000" / "train"
        prefix.parent.mkdir(parents=True, exist_ok=True)
        if not Path(f"{prefix}.en").is_file():
            generate_corpus(30_000, prefix)
        train_file = str(prefix)
    data = load_parallel_corpus("de", "en", train_file=train_file)
    train = data["train"]
    tokenizer = corpus_tokenizer(train, ("de", "en"), 8000, 256)
    return tokenize_corpus({"train": train}, tokenizer, "de", "en")["train"], tokenizer


def budget_for(source: np.ndarray, target: np.ndarray) -> int:
    """The --max_tokens whose batches hold, on average, the real target tokens of 64 sentences."""
    wanted = target.mean() * SENTENCES
    low, high = int(max(source.max(), target.max())), int(wanted * 4)
    while high - low > 4:
        middle = (low + high) // 2
        if TokenBatchSampler(source, target, middle, seed=SEED).shapes()["target"].mean() < wanted:
            low = middle
        else:
            high = middle
    return high


def batches(strategy: str, source: np.ndarray, target: np.ndarray, max_tokens: int) -> list[list[int]]:
    """The batches of the first epoch (epoch 0) as `strategy` draws them."""
    if strategy == "tokens":
        return list(TokenBatchSampler(source, target, max_tokens, seed=SEED))
    if strategy == "grouped":
        order = list(SeededLengthGroupedSampler(SENTENCES, source, seed=SEED))  # by source length, as the trainer
    else:
        order = torch.randperm(len(source), generator=torch.Generator().manual_seed(SEED)).tolist()
    return [order[i : i + SENTENCES] for i in range(0, len(order), SENTENCES)]


def padding(chosen: list[list[int]], source: np.ndarray, target: np.ndarray) -> dict:
    real = sum(int(source[b].sum() + target[b].sum()) for b in chosen)
    padded = sum(len(b) * int(source[b].max() + target[b].max()) for b in chosen)
    real_target = sum(int(target[b].sum()) for b in chosen)
    return {
        "batches": len(chosen),
        "padding": round(1 - real / padded, 4),
        "target_tokens_per_batch": round(real_target / len(chosen), 1),
        "largest_padded_batch": max(len(b) * int(max(source[b].max(), target[b].max())) for b in chosen),
    }


def train_steps(corpus: str, strategy: str, steps: int, threads: int, workdir: Path) -> dict:
    """Real target tokens per second and peak memory of training the demo model on the first `steps` batches."""
    from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
    from hf_vanilla_transformer.recipes.common import DEMO_SIZES, expand_sizes, model_config_for, tokenizer_fields
    from hf_vanilla_transformer.training.trainer import TranslationDataCollator

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    train, tokenizer = tokenized(corpus, workdir)
    source, target = pair_lengths(train)
    chosen = batches(strategy, source, target, budget_for(source, target))[: steps + 3]
    config = model_config_for(**expand_sizes(**DEMO_SIZES), **tokenizer_fields(tokenizer), label_smoothing=0.1)
    model = VanillaTransformerForConditionalGeneration(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)
    collator = TranslationDataCollator(tokenizer, model=model, label_pad_token_id=-100)
    train = train.select_columns(["input_ids", "labels"])
    tokens, start = 0, None
    for step, batch in enumerate(chosen):
        if step == 3:
            start = time.perf_counter()
        inputs = collator([train[i] for i in batch])
        model(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step >= 3:
            tokens += int((inputs["labels"] != -100).sum())
    seconds = time.perf_counter() - start
    return {
        "target_tokens_per_second": tokens / seconds,
        "peak_memory_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", nargs="+", choices=["bundled", "generated"], default=["bundled", "generated"])
    parser.add_argument("--steps", type=int, default=60, help="timed training steps per strategy and repeat")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--workdir", type=Path, default=Path("data-scaling"))
    parser.add_argument("--json", default="batching_benchmark.json")
    parser.add_argument("--measure", nargs=2, metavar=("CORPUS", "STRATEGY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print("RESULT " + json.dumps(train_steps(*args.measure, args.steps, args.threads, args.workdir)), flush=True)
        return {}
    results = {}
    for corpus in args.corpora:
        train, _ = tokenized(corpus, args.workdir)
        source, target = pair_lengths(train)
        max_tokens = budget_for(source, target)
        rows = {s: padding(batches(s, source, target, max_tokens), source, target) for s in STRATEGIES}
        runs = {s: [] for s in STRATEGIES}
        for repeat in range(args.repeats):
            for strategy in STRATEGIES[repeat % 3 :] + STRATEGIES[: repeat % 3]:  # the order rotates
                command = [sys.executable, "-m", "scripts.batching_benchmark", "--measure", corpus, strategy]
                command += ["--steps", str(args.steps), "--threads", str(args.threads), "--workdir", str(args.workdir)]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
                runs[strategy].append(json.loads(line.split(" ", 1)[1]))
        for strategy in STRATEGIES:
            for key in ("target_tokens_per_second", "peak_memory_gb"):
                rows[strategy][key] = round(statistics.median(run[key] for run in runs[strategy]), 3)
        results[corpus] = {"pairs": len(source), "max_tokens": max_tokens, "strategies": rows}
    summary = {
        "cpu": cpu_model(),
        "threads": args.threads,
        "steps": args.steps,
        "repeats": args.repeats,
        "corpora": results,
    }
    print(format_table(summary))
    Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def format_table(summary: dict) -> str:
    lines = [
        f"{summary['cpu']}, {summary['threads']} threads, {summary['steps']} steps x {summary['repeats']} repeats",
        "",
    ]
    lines += [
        "| corpus | batches | padding | target tokens per batch | target tokens/s | peak memory |",
        "|---|---|---|---|---|---|",
    ]
    for corpus, result in summary["corpora"].items():
        grouped = result["strategies"]["grouped"]["target_tokens_per_second"]
        for strategy, row in result["strategies"].items():
            name = f"--max_tokens {result['max_tokens']}" if strategy == "tokens" else f"64 sentences, {strategy}"
            lines.append(
                f"| {corpus} ({result['pairs']:,} pairs) | {name} | {row['padding']:.1%} | "
                f"{row['target_tokens_per_batch']:.0f} | "
                f"{row['target_tokens_per_second']:,.0f} ({row['target_tokens_per_second'] / grouped:.2f}x) | "
                f"{row['peak_memory_gb']:.2f} GB |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
