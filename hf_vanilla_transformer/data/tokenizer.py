"""A BPE vocabulary shared by source and target language (section 5.1), as a transformers fast tokenizer.

It is saved as a plain `tokenizer.json` of transformers' own class, so `PreTrainedTokenizerFast.from_pretrained` loads
it anywhere without remote code. `AutoTokenizer` reads the model's configuration first, which is remote code where the
package is not installed: there it needs trust_remote_code=True, or it asks.
Trained on a corpus, it is learnt from the corpus's Arrow data a batch at a time and kept in the `datasets` cache, so
that a second run with the same corpus and settings reuses it.
"""

import hashlib
import inspect
import os
import shutil
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow.compute as pc
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast
from transformers.utils import logging

from .formats import corpus_cache


logger = logging.get_logger(__name__)


PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"  # ids 0, 1, 2, 3, the config's defaults
MIN_VOCAB_SIZE = 100  # fewer pieces than a usable BPE vocabulary needs (the characters alone take dozens)


def train_shared_bpe_tokenizer(
    texts: Iterable[str], vocab_size: int = 8000, model_max_length: int = 256, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Learn byte-pair merges on `texts` (both languages mixed) and wrap the result for transformers.

    Every encoded sequence ends with `</s>`; decoding starts from `<s>` (the model's `decoder_start_token_id`).
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"`vocab_size` must be at least {MIN_VOCAB_SIZE} for a usable BPE vocabulary, got {vocab_size}."
        )
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.NFKC()
    # Punctuation gets its own pieces, so "gegeben?" does not spend merges on "ben?"; apostrophes and hyphens stay
    # inside words ("don't", "Tom's" are frequent whole pieces).
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
            pre_tokenizers.Split(Regex(r"[^\w\s'’▁-]"), behavior="isolated"),
        ]
    )
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[PAD, BOS, EOS, UNK], show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    eos_id = tokenizer.token_to_id(EOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}", special_tokens=[(EOS, eos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        model_max_length=model_max_length,
    )


_RECIPE = inspect.getsource(train_shared_bpe_tokenizer)  # in the cache key: a new recipe trains a new tokenizer


def corpus_texts(dataset: Dataset, languages: Iterable[str], batch_size: int = 10_000) -> Iterator[list[str]]:
    """The texts of both languages of a `translation` dataset, a batch of one language at a time."""
    for batch in dataset.with_format("arrow").iter(batch_size=batch_size):
        pairs = batch.column("translation")
        for lang in languages:
            yield pc.struct_field(pairs, lang).to_pylist()


def corpus_tokenizer(
    dataset: Dataset,
    languages: Iterable[str],
    vocab_size: int = 8000,
    model_max_length: int = 256,
    min_frequency: int = 2,
    max_pairs: int | None = None,
) -> PreTrainedTokenizerFast:
    """[`train_shared_bpe_tokenizer`] on the texts of `dataset` (a `translation` split), or the tokenizer trained
    before on the same data with the same settings, from the `datasets` cache. With `max_pairs`, a larger corpus is
    learnt from that many of its pairs, in blocks drawn at random (as SentencePiece samples 1M sentences): the merges
    come from word counts, which a million pairs estimate well. Data held in memory only (no cache file) is trained
    on every time."""
    languages = list(languages)
    if max_pairs and len(dataset) > max_pairs:
        dataset = _sample_blocks(dataset, max_pairs)
    settings = (languages, vocab_size, model_max_length, min_frequency, _RECIPE)
    files = [file["filename"] for file in dataset.cache_files]
    if not files:
        return train_shared_bpe_tokenizer(
            corpus_texts(dataset, languages), vocab_size, model_max_length, min_frequency
        )
    key = hashlib.sha256(repr((files, len(dataset), max_pairs, settings)).encode()).hexdigest()[:20]
    folder = corpus_cache("tokenizers") / key
    if (folder / "tokenizer.json").is_file():
        logger.info(f"Reusing the BPE tokenizer trained before on this corpus: {folder}")
        return PreTrainedTokenizerFast.from_pretrained(folder)
    tokenizer = train_shared_bpe_tokenizer(
        corpus_texts(dataset, languages), vocab_size, model_max_length, min_frequency
    )
    partial = folder.with_name(f"{key}.{os.getpid()}.partial")
    tokenizer.save_pretrained(partial)
    try:
        partial.rename(folder)  # whole or absent, also when several processes train at once
    except OSError:  # another process got there first: its tokenizer is the same
        shutil.rmtree(partial, ignore_errors=True)
    return tokenizer


def _sample_blocks(dataset: Dataset, pairs: int, block: int = 10_000, seed: int = 0) -> Dataset:
    """About `pairs` rows of `dataset` in blocks of `block` consecutive rows drawn at random (few pages read)."""
    blocks = np.sort(np.random.default_rng(seed).permutation(-(-len(dataset) // block))[: -(-pairs // block)])
    rows = np.concatenate([np.arange(start * block, min((start + 1) * block, len(dataset))) for start in blocks])
    return dataset.select(rows, keep_in_memory=True)


__all__ = ["corpus_texts", "corpus_tokenizer", "train_shared_bpe_tokenizer"]
