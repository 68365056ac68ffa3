"""Data preparation at the paper's scale: time and peak memory of reading a corpus, training the BPE, tokenizing and
reaching the first optimizer step, from 30,000 to 4.5 million sentence pairs.

    python -m scripts.data_scaling --sizes 30000 300000 1000000 4500000 --workdir /tmp/data-scaling

For each size, a corpus is generated (deterministically: each pair joins 1 to 3 pairs of the bundled Tatoeba corpus,
drawn with a fixed seed) as the aligned plain-text files `train.de` / `train.en` that MT corpora come as. Then the
training command's own steps run twice, each time in a fresh process with the same, at first empty, `datasets` cache:
reading the files, training the shared BPE (vocabulary 8,000), tokenizing (one process per CPU from 100,000 pairs on),
and the first optimizer step of the demo model with token batches (`--max_tokens 4096`). The first run does the
work; the second should find the Arrow files, the tokenizer and the token ids in the cache. Times are wall-clock from
the process start. Peak memory is sampled every 0.1 s: the proportional set size (PSS: pages shared between processes
split between them, so that forked workers are not counted twice) summed over the process and its workers, which
counts the pages of memory-mapped Arrow files read so far; the anonymous part of that PSS (their heaps: Python
objects, numpy and Arrow buffers, tensors; not the mapped files, which the kernel can drop); and the main process's
resident set (RSS).

With `--baseline SIZE ...`, the same steps also run at those sizes as the package did before (datasets' TSV reader and
a per-row map to the translation format, the BPE trained on a list of every sentence, the tokenizer called per batch
through transformers, every column kept), on the same pairs written as one TSV: the ratios in the same run are the
comparable figures.
"""

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from hf_vanilla_transformer.data.corpus import BUNDLED_CORPUS
from hf_vanilla_transformer.training.report import cpu_model


SEED = 0
MAX_TOKENS = 4096
STAGES = ("imports", "read", "bpe", "tokenize", "first_step")


@functools.cache
def bundled_pairs() -> dict[str, np.ndarray]:
    """The bundled training pairs, one array of texts per language."""
    rows = [json.loads(line)["translation"] for line in (BUNDLED_CORPUS / "train.jsonl").open(encoding="utf-8")]
    return {lang: np.array([row[lang] for row in rows], dtype=object) for lang in ("de", "en")}


def generate_corpus(pairs: int, prefix: Path, seed: int = SEED, tsv: bool = False) -> list[Path]:
    """`pairs` pairs, each 1 to 3 bundled training pairs joined by a space on both sides, written to
    `PREFIX.de` and `PREFIX.en` (or, with `tsv`, to `PREFIX.tsv` with a header line). The same for a given seed."""
    sides = bundled_pairs()
    rng = np.random.default_rng(seed)
    paths = [Path(f"{prefix}.tsv")] if tsv else [Path(f"{prefix}.de"), Path(f"{prefix}.en")]
    files = [path.open("w", encoding="utf-8") for path in paths]
    try:
        if tsv:
            files[0].write("de\ten\n")
        for start in range(0, pairs, 100_000):
            count = min(100_000, pairs - start)
            joined = rng.integers(1, 4, count)
            picks = rng.integers(0, len(sides["de"]), (count, 3))
            texts = {lang: [" ".join(side[row[:n]]) for row, n in zip(picks, joined)] for lang, side in sides.items()}
            if tsv:
                files[0].write("".join(f"{de}\t{en}\n" for de, en in zip(texts["de"], texts["en"])))
            else:
                for file, lang in zip(files, ("de", "en")):
                    file.write("\n".join(texts[lang]) + "\n")
    finally:
        for file in files:
            file.close()
    return paths


def _mark(stage: str):
    print(f"STAGE {json.dumps({'stage': stage, 'time': time.time()})}", flush=True)


def run_stages(train_file: str, output_dir: str):
    """The training command's data steps and its first optimizer step, each stage's end printed as a JSON line."""
    from transformers import TrainerCallback

    from hf_vanilla_transformer.data.corpus import load_parallel_corpus
    from hf_vanilla_transformer.recipes import translation
    from hf_vanilla_transformer.training.metrics import build_compute_metrics
    from hf_vanilla_transformer.training.trainer import TranslationDataCollator, TranslationTrainer

    argv = ["--train_file", train_file, "--output_dir", output_dir, "--max_tokens", str(MAX_TOKENS)]
    argv += ["--max_steps", "1", "--eval_strategy", "no", "--save_strategy", "no", "--disable_tqdm", "true"]
    model_args, data_args, recipe_args, training_args = translation.parse_args(argv)
    _mark("imports")
    corpus = load_parallel_corpus(data_args.source_lang, data_args.target_lang, train_file=data_args.train_file)
    _mark("read")
    tokenizer = translation.build_tokenizer(model_args, data_args, corpus, None)
    _mark("bpe")
    model = translation.build_model(model_args, tokenizer)
    positions = model.config.max_position_embeddings
    datasets, _ = translation.tokenize_splits(corpus, tokenizer, data_args, training_args, positions)
    del corpus  # as the training command does
    _mark("tokenize")

    class FirstStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            _mark("first_step")

    TranslationTrainer(
        model=model,
        args=training_args,
        train_dataset=datasets["train"],
        processing_class=tokenizer,
        data_collator=TranslationDataCollator(tokenizer, model=model, label_pad_token_id=-100),
        compute_metrics=build_compute_metrics(tokenizer),
        max_tokens=recipe_args.max_tokens,
        callbacks=[FirstStep()],
    ).train()


def run_baseline_stages(train_file: str):
    """The same steps as the package ran them before (one TSV file): for the ratios."""
    from datasets import load_dataset

    from hf_vanilla_transformer.data.tokenizer import train_shared_bpe_tokenizer

    _mark("imports")
    data = load_dataset("csv", data_files=train_file, split="train", delimiter="\t", quoting=3)
    data = data.map(lambda row: {"translation": {"de": row["de"], "en": row["en"]}}, remove_columns=["de", "en"])
    _mark("read")
    pairs = data["translation"]
    tokenizer = train_shared_bpe_tokenizer((pair[lang] for pair in pairs for lang in ("de", "en")), 8000, 256)
    del pairs
    _mark("bpe")

    def tokenize(batch):
        encoded = tokenizer([pair["de"] for pair in batch["translation"]], truncation=True, max_length=64)
        targets = [pair["en"] for pair in batch["translation"]]
        encoded["labels"] = tokenizer(text_target=targets, truncation=True, max_length=64)["input_ids"]
        encoded["length"] = [len(s) + len(t) for s, t in zip(encoded["input_ids"], encoded["labels"])]
        return encoded

    data.map(
        tokenize, batched=True, remove_columns=["translation"], num_proc=os.cpu_count() if len(data) >= 1e5 else None
    )
    _mark("tokenize")


def measure(command: list[str], cache: Path) -> dict:
    """Run `command` in a fresh process with the `datasets` cache `cache`: each stage's end (seconds from the start)
    and the peak memory in GB of each stage (PSS summed over the process tree) and of the main process (RSS)."""
    env = {key: value for key, value in os.environ.items() if key != "TOKENIZERS_PARALLELISM"}  # as in a user's shell
    env.update(HF_DATASETS_CACHE=str(cache), HF_HUB_OFFLINE="1")
    start = time.time()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples, done = [], threading.Event()

    def sample():
        main = psutil.Process(process.pid)
        while not done.is_set():
            try:
                tree = [main, *main.children(recursive=True)]
                pss = sum(_memory(p, "pss") for p in tree)
                samples.append((time.time(), pss, _memory(main, "rss"), sum(map(_anonymous, tree))))
            except psutil.Error:
                pass
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = process.communicate()
    done.set()
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    lines = (line.split(" ", 1)[1] for line in stdout.splitlines() if line.startswith("STAGE "))
    marks = {mark["stage"]: mark["time"] for mark in map(json.loads, lines)}
    result, previous = {}, start
    for stage in (s for s in STAGES if s in marks):
        during = [s for s in samples if previous <= s[0] <= marks[stage]] or samples[-1:]
        result[stage] = {
            "seconds": round(marks[stage] - start, 2),
            "stage_seconds": round(marks[stage] - previous, 2),
            "peak_pss_gb": round(max(s[1] for s in during) / 1e9, 3),
            "peak_main_rss_gb": round(max(s[2] for s in during) / 1e9, 3),
            "peak_anonymous_gb": round(max(s[3] for s in during) / 1e9, 3),
        }
        previous = marks[stage]
    result["peak_pss_gb"] = round(max(s[1] for s in samples) / 1e9, 3)
    result["peak_main_rss_gb"] = round(max(s[2] for s in samples) / 1e9, 3)
    result["peak_anonymous_gb"] = round(max(s[3] for s in samples) / 1e9, 3)
    return result


def _anonymous(process: psutil.Process) -> int:
    """The process's share of anonymous memory (its heap: not the memory-mapped files the kernel can drop), split as
    PSS is: a forked worker's copy-on-write pages, still those of its parent, are not counted twice."""
    try:
        with open(f"/proc/{process.pid}/smaps_rollup") as rollup:
            return next(int(line.split()[1]) * 1024 for line in rollup if line.startswith("Pss_Anon:"))
    except (OSError, StopIteration):
        return 0


def _memory(process: psutil.Process, kind: str) -> int:
    try:
        return getattr(process.memory_full_info(), kind)
    except psutil.Error:
        return 0


def scale(sizes: list[int], workdir: Path, baseline: list[int]) -> list[dict]:
    rows = []
    for pairs in sizes:
        folder = workdir / str(pairs)
        folder.mkdir(parents=True, exist_ok=True)
        prefix = folder / "train"
        started = time.time()
        if not Path(f"{prefix}.en").is_file():
            generate_corpus(pairs, prefix)
        row = {"pairs": pairs, "generate_seconds": round(time.time() - started, 1)}
        shutil.rmtree(folder / "cache", ignore_errors=True)
        command = [sys.executable, "-m", "scripts.data_scaling", "--run", str(prefix), str(folder / "run")]
        for run in ("first", "second"):
            row[run] = measure(command, folder / "cache")
            print(f"{pairs:>9,} pairs, {run} run: {json.dumps(row[run])}", flush=True)
        if pairs in baseline:
            tsv = folder / "baseline"
            if not Path(f"{tsv}.tsv").is_file():
                generate_corpus(pairs, tsv, tsv=True)
            shutil.rmtree(folder / "baseline-cache", ignore_errors=True)
            command = [sys.executable, "-m", "scripts.data_scaling", "--run_baseline", f"{tsv}.tsv"]
            row["baseline"] = measure(command, folder / "baseline-cache")
            print(f"{pairs:>9,} pairs, baseline: {json.dumps(row['baseline'])}", flush=True)
        shutil.rmtree(folder / "run", ignore_errors=True)
        rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    lines = [
        "| pairs | read | BPE | tokenize | first step | peak PSS (anonymous): data / first step "
        "| second run: first step | second run: peak PSS (anonymous) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        first, second = row["first"], row["second"]
        stages = [f"{first[stage]['stage_seconds']:.1f} s" for stage in ("read", "bpe", "tokenize")]
        lines.append(
            f"| {row['pairs']:,} | {' | '.join(stages)} | {first['first_step']['seconds']:.1f} s | "
            f"{_peak(first, ('read', 'bpe', 'tokenize'))} / {_peak(first, ('first_step',))} | "
            f"{second['first_step']['seconds']:.1f} s | {_peak(second, STAGES)} |"
        )
    if any("baseline" in row for row in rows):
        lines += [
            "",
            "The package's previous data path (time, and its ratio to the time above) in the same run:",
            "",
            "| pairs | read | BPE | tokenize | peak PSS (anonymous) |",
            "|---|---|---|---|---|",
        ]
        for row in (r for r in rows if "baseline" in r):
            base, cells = row["baseline"], []
            for stage in ("read", "bpe", "tokenize"):
                ratio = base[stage]["stage_seconds"] / max(row["first"][stage]["stage_seconds"], 1e-3)
                cells.append(f"{base[stage]['stage_seconds']:.1f} s ({ratio:.1f}x)")
            lines.append(f"| {row['pairs']:,} | {' | '.join(cells)} | {_peak(base, STAGES)} |")
    return "\n".join(lines)


def _peak(run: dict, stages) -> str:
    pss = max(run[stage]["peak_pss_gb"] for stage in stages if stage in run)
    anonymous = max(run[stage]["peak_anonymous_gb"] for stage in stages if stage in run)
    return f"{pss:.2f} GB ({anonymous:.2f})"


def main(argv=None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[30_000, 300_000, 1_000_000, 4_500_000])
    parser.add_argument("--workdir", type=Path, default=Path("data-scaling"), help="generated corpora and caches")
    parser.add_argument(
        "--baseline",
        type=int,
        nargs="*",
        default=[],
        help="sizes at which the previous data path also runs, for ratios",
    )
    parser.add_argument("--json", default="data_scaling.json")
    parser.add_argument("--run", nargs=2, metavar=("TRAIN_PREFIX", "OUTPUT_DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--run_baseline", metavar="TSV", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        return run_stages(*args.run)
    if args.run_baseline:
        return run_baseline_stages(args.run_baseline)
    rows = scale(args.sizes, args.workdir, args.baseline)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    summary = {"cpu": cpu_model(), "cpus": os.cpu_count(), "commit": commit, "max_tokens": MAX_TOKENS, "rows": rows}
    print(f"\n{cpu_model()}, {os.cpu_count()} CPUs, commit {commit}\n\n{format_table(rows)}")
    Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
