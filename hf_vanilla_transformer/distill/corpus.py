"""The corpus steps of `hf-vanilla-transformer distill`: the corpus written out for the teacher and the trainer, and
the teacher's translations turned into the student's training pairs.

Selection: for a line of the parallel corpus, the teacher's hypothesis (of its n best) with the best chrF (or
sentence BLEU) against the line's reference (what Mozilla's pipeline keeps, `extract_best.py`); for a line of
monolingual text, its best one.
Filtering, each rule counting what the rules before it kept: pairs with an empty side, pairs whose word counts differ
by more than a ratio, exact duplicates (`data.cleaning`), then the worst share by the teacher's log-probability per
token of the kept translation.
"""

import dataclasses
import json
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from datasets import Dataset, concatenate_datasets
from sacrebleu.metrics import BLEU, CHRF

from ..data.cleaning import CleaningRules, clean_pairs
from ..data.corpus import BUNDLED_CORPUS, SPLITS, default_num_proc
from ..data.folders import writes_folder
from ..data.formats import resolve_files
from ..data.training_corpus import read_training_corpus
from ..errors import InputError
from ..translate.corpus import translate_corpus
from ..translate.ray_session import RaySession


SOURCES = "sources.jsonl"  # the teacher's input: {"row", "text" (the source), "reference"}
BATCH = 10_000


# ------------------------------------------------------------------------------------------------------ the corpus


def file_stamps(paths) -> dict[str, str]:
    """Each file's size and modification time: a changed input is a different input."""
    stamps = {}
    for path in map(Path, paths):
        if not path.is_file():
            raise InputError(f"{path}: no such file.")
        stat = path.stat()
        modified = datetime.fromtimestamp(stat.st_mtime_ns / 1e9, timezone.utc).isoformat(timespec="microseconds")
        stamps[str(path.resolve())] = f"{stat.st_size} bytes, modified {modified}"
    return stamps


def corpus_inputs(data_args) -> dict:
    """What the corpus step reads: a Hub dataset by name, or the local files with their stamps."""
    if data_args.dataset_name:
        return {"--dataset_name": data_args.dataset_name, "--dataset_config_name": data_args.dataset_config_name}
    languages = (data_args.source_lang, data_args.target_lang)
    files = {split: getattr(data_args, f"{split}_file") for split in SPLITS}
    if not any(files.values()):
        files = {split: str(BUNDLED_CORPUS / f"{split}.jsonl") for split in SPLITS}
    return {
        f"--{split}_file": file_stamps(resolve_files(spec, languages, f"--{split}_file")[1])
        for split, spec in files.items()
        if spec
    }


def write_corpus(data_args, folder: Path) -> dict:
    """Read and clean the corpus as the translation recipe does, and write into `folder` its splits as JSON Lines in
    the translation format (`train.jsonl`: the references) and the teacher's input, `sources.jsonl`. The counts."""
    source_lang, target_lang = data_args.source_lang, data_args.target_lang
    corpus, dropped = read_training_corpus(data_args)
    if "train" not in corpus or "test" not in corpus:
        raise InputError(
            f"The corpus has the splits {sorted(corpus)}: distillation needs a training split and a test split "
            "(--train_file and --test_file), the test split for the report."
        )
    counts = {"cleaning": dropped} if dropped else {}
    if data_args.max_train_samples is not None:
        corpus["train"] = corpus["train"].select(range(min(data_args.max_train_samples, len(corpus["train"]))))
    for split, dataset in corpus.items():
        counts[split] = write_pairs(dataset, folder / f"{split}.jsonl")
    with open(folder / SOURCES, "w", encoding="utf-8") as f:
        row = 0
        for pair in translations(corpus["train"]):
            record = {"row": row, "text": pair[source_lang], "reference": pair[target_lang]}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            row += 1
    return counts


def translations(dataset: Dataset):
    """The `translation` dicts of `dataset`, batch by batch from Arrow."""
    for batch in dataset.with_format("arrow").iter(batch_size=BATCH):
        yield from batch.column("translation").to_pylist()


def write_pairs(dataset: Dataset, path: Path) -> int:
    """`dataset`'s pairs as JSON Lines in the translation format; how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        for pair in translations(dataset):
            f.write(json.dumps({"translation": pair}, ensure_ascii=False) + "\n")
            count += 1
    return count


# ------------------------------------------------------------------------------------------ selection and filters


def sentence_scores(metric: str):
    """The sentence-level score of `metric` (`options.SELECTION_METRICS`) of a hypothesis against its reference."""
    scorer = CHRF() if metric == "chrf" else BLEU(effective_order=True)
    return lambda hypothesis, reference: scorer.sentence_score(hypothesis, [reference]).score


def select_best(batch: dict, source_lang: str, target_lang: str, length_penalty: float, metric: str) -> dict:
    """For each translated row: the pair (source, kept hypothesis), the teacher's log-probability per token of that
    hypothesis, and whether it was not the teacher's first. The engine's score is the summed log-probability over
    length ** length_penalty, its length the hypothesis' tokens with the end token, as the shards record it."""
    score_of = sentence_scores(metric)
    references = batch.get("reference") or [None] * len(batch["text"])
    nbests = batch.get("nbest") or [None] * len(batch["text"])
    rows = zip(batch["translation"], batch["score"], batch["translation_length"], references, nbests)
    kept, scores, not_first = [], [], []
    for translation, score, length, reference, nbest in rows:
        best = 0
        if nbest and reference is not None:
            # the first of equals: the teacher's higher-ranked
            best = int(np.argmax([score_of(hypothesis["text"], reference) for hypothesis in nbest]))
        if nbest:
            translation, score, length = (nbest[best][name] for name in ("text", "score", "length"))
        kept.append(translation or "")
        # None: no translation, dropped as empty
        scores.append(None if score is None else score * length ** (length_penalty - 1))
        not_first.append(best > 0)
    return {
        "translation": [{source_lang: source or "", target_lang: text} for source, text in zip(batch["text"], kept)],
        "score": scores,
        "not_first": not_first,
    }


def selected_pairs(shards: list[Path], languages, length_penalty, metric: str, cache_dir: Path) -> Dataset:
    """The kept pair of every row of the teacher's output shards (Parquet), in the shards' order: the parallel
    corpus's and the monolingual files' (their columns differ) each read as one dataset, into `cache_dir`."""
    groups = {}
    for shard in shards:
        groups.setdefault(tuple(sorted(pq.read_schema(shard).names)), []).append(str(shard))
    parts = []
    for files in groups.values():
        dataset = Dataset.from_parquet(files, cache_dir=str(cache_dir))
        parts.append(
            dataset.map(
                select_best,
                batched=True,
                batch_size=1000,
                fn_kwargs=dict(
                    source_lang=languages[0], target_lang=languages[1], length_penalty=length_penalty, metric=metric
                ),
                remove_columns=dataset.column_names,
                num_proc=default_num_proc(len(dataset)),
                desc="choosing the teacher's translations",
            )
        )
    return concatenate_datasets(parts) if len(parts) > 1 else parts[0]


def filter_pairs(
    pairs: Dataset, source_lang: str, target_lang: str, length_ratio: float, drop_share: float
) -> tuple[Dataset, dict]:
    """`pairs` without empty sides, absurd length ratios and duplicates, then without the worst `drop_share` by the
    teacher's score; how many each rule dropped."""
    kept, counts = clean_pairs(
        pairs, source_lang, target_lang, CleaningRules(empty=True, length_ratio=length_ratio, duplicates=True)
    )
    counts = {"empty": 0, "length_ratio": 0, "duplicates": 0, **counts}
    scores = np.asarray(kept.with_format("arrow")["score"].to_numpy(zero_copy_only=False), dtype=np.float64)
    worst = int(drop_share * len(kept))
    counts["score"] = worst
    if worst:
        order = np.argsort(scores, kind="stable")
        kept = kept.select(np.sort(order[worst:]))
    return kept, counts


def distill_pairs(
    shards: list[Path], folder: Path, languages, length_penalty, metric, length_ratio, drop_share, references
) -> dict:
    """Write the student's training pairs (`train.jsonl`) into `folder` from the teacher's output shards, with the
    `references` file's pairs after them when given; the counts of each rule."""
    cache = folder / ".cache"  # the Arrow files of the steps below, removed with them
    pairs = selected_pairs(shards, languages, length_penalty, metric, cache)
    not_first = int(pc.sum(pairs.with_format("arrow")["not_first"]).as_py() or 0)
    kept, counts = filter_pairs(pairs, *languages, length_ratio, drop_share)
    written, translated = write_pairs(kept, folder / "train.jsonl"), len(pairs)
    del pairs, kept
    shutil.rmtree(cache)
    added = 0
    if references is not None:
        with open(references, "rb") as source, open(folder / "train.jsonl", "ab") as target:
            for line in source:
                target.write(line)
                added += 1
    return {
        "translated": translated,
        "chosen_not_teachers_first": not_first,
        "dropped": counts,
        "kept": written,
        "references_added": added,
        "training_pairs": written + added,
    }


# ------------------------------------------------------------------------------------------------------- the steps


def corpus_step(run) -> dict:
    with writes_folder(run.path("corpus")) as folder:
        return write_corpus(run.data_args, folder)


def teacher_translations_step(run) -> dict:
    """The teacher's n best of every source line, on Ray through translate-corpus's engine: resumable shards."""
    with RaySession(run.args.address, run.args.verbose) as session:
        summary = translate_corpus(
            [str(run.path("corpus", SOURCES)), *run.monolingual],
            str(run.path("teacher-translations")),
            str(run.teacher),
            run.engine,
            run.decoding,
            column="text",
            num_workers=run.args.num_workers,
            shard_rows=run.args.shard_rows,
            connect=session.connect,
        )
    print(f"{run.prog}: teacher-translations: {summary.line()}", file=sys.stderr)
    return dict(**dataclasses.asdict(summary), sentences_per_second=round(summary.rate, 2))


def translated(run) -> bool:
    """Whether an earlier run left complete shards of the teacher's translations."""
    return any(run.path("teacher-translations").glob("*.parquet"))


def distilled_step(run) -> dict:
    shards = sorted(run.path("teacher-translations").glob("*.parquet"))
    references = run.path("corpus", "train.jsonl") if run.args.mix_references else None
    with writes_folder(run.path("distilled")) as folder:
        return distill_pairs(
            shards,
            folder,
            run.languages,
            run.length_penalty,
            run.args.selection_metric,
            run.args.max_length_ratio,
            run.args.drop_worst,
            references,
        )


__all__ = [
    "SOURCES",
    "corpus_inputs",
    "corpus_step",
    "distilled_step",
    "file_stamps",
    "teacher_translations_step",
    "translated",
]
