"""Optional cleaning of a training corpus in the spirit of Moses' `clean-corpus-n.perl`: pairs with an empty side, with
a side of more than N words, or whose sides' word counts differ by more than a ratio, and exact duplicate pairs are
dropped, each rule counted. Words are runs of non-space characters, as Moses counts them."""

from dataclasses import asdict, dataclass

import numpy as np
import pyarrow.compute as pc
from datasets import Dataset
from transformers.utils import logging

from .corpus import blank_texts


logger = logging.get_logger(__name__)


@dataclass(frozen=True)
class CleaningRules:
    """Which pairs [`clean_pairs`] drops. Each rule counts only the pairs that the rules before it kept."""

    empty: bool = False  # a side is empty or only white space
    max_words: int = 0  # a side has more words (0: no limit); Moses' clean-corpus-n takes this limit, often 80
    length_ratio: float = 0.0  # one side has more than this many times the other's words (0: off); Moses uses 9
    duplicates: bool = False  # the same source and target as an earlier pair

    def any(self) -> bool:
        return any(asdict(self).values())


def clean_pairs(
    dataset: Dataset, source_lang: str, target_lang: str, rules: CleaningRules
) -> tuple[Dataset, dict[str, int]]:
    """`dataset` without the pairs `rules` drop, and how many each rule dropped."""
    keep = np.ones(len(dataset), dtype=bool)
    counts = {}

    def drop(rule: str, dropped: np.ndarray):
        counts[rule] = int((keep & dropped).sum())
        keep[dropped] = False

    if rules.empty:
        drop("empty", blank_texts(dataset, source_lang) | blank_texts(dataset, target_lang))
    if rules.max_words or rules.length_ratio:
        words = [_word_counts(dataset, lang) for lang in (source_lang, target_lang)]
        if rules.max_words:
            drop("max_words", (words[0] > rules.max_words) | (words[1] > rules.max_words))
        if rules.length_ratio:
            longer, shorter = np.maximum(*words), np.minimum(*words)
            drop("length_ratio", longer > rules.length_ratio * np.maximum(shorter, 1))
    if rules.duplicates:
        hashes = _pair_hashes(dataset, source_lang, target_lang)
        first = np.zeros(len(dataset), dtype=bool)
        first[np.unique(hashes, return_index=True)[1]] = True
        drop("duplicates", ~first)
    if counts:
        logger.warning(
            f"Cleaning dropped {len(dataset) - int(keep.sum()):,} of {len(dataset):,} training pairs: "
            + ", ".join(f"{count:,} by {rule}" for rule, count in counts.items())
            + "."
        )
    if keep.all():
        return dataset, counts
    return dataset.select(np.flatnonzero(keep)), counts


def _word_counts(dataset: Dataset, lang: str) -> np.ndarray:
    found = []
    for batch in dataset.with_format("arrow").iter(batch_size=1_000_000):
        texts = pc.struct_field(batch.column("translation"), lang)
        found.append(pc.fill_null(pc.count_substring_regex(texts, r"[^\s\p{Z}]+"), 0).to_numpy())
    return np.concatenate(found)


def _pair_hashes(dataset: Dataset, source_lang: str, target_lang: str) -> np.ndarray:
    """A 64-bit hash of each pair (pandas' fixed-key SipHash, the same in every run): equal pairs, equal hashes."""
    from pandas.util import hash_array

    found = []
    for batch in dataset.with_format("arrow").iter(batch_size=200_000):
        pairs = batch.column("translation")
        source, target = (
            hash_array(np.asarray(pc.struct_field(pairs, lang).to_pylist(), dtype=object))
            for lang in (source_lang, target_lang)
        )
        found.append(source ^ (target * np.uint64(0x9E3779B97F4A7C15)))  # wraps around: a hash of the pair
    return np.concatenate(found)


__all__ = ["CleaningRules", "clean_pairs"]
