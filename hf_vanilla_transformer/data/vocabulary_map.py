"""Vocabulary maps (a lexical shortlist, as Marian and Firefox Translations decode with): for each source token, the
target tokens a translation of it is likely to use. With `--use_vmap` each batch chooses its next tokens among the
candidates its source tokens map to and the common tokens, so the output layer and the search read some thousand
rows of the vocabulary instead of all of them.

The file is CTranslate2's `vmap.txt` (its `use_vmap`): one line per source token or n-gram (tokens joined by
spaces), a tab, and its target tokens separated by spaces; the line whose source is empty lists the tokens that are
always candidates. The unknown, start and end tokens always are, as in CTranslate2, so both engines
choose among the same tokens (log-probabilities are normalised over the candidates, as both do).

`write_vocabulary_map` makes one from a parallel corpus (`hf-vanilla-transformer vocabulary-map`; `distill` for its
student): IBM Model 1's lexical probabilities p(target | source) (Brown et al., 1993), the `BEST` most probable target
tokens of each source token, and the `FREQUENT` most frequent target tokens (Marian's `--shortlist lex.s2t 100 100`
keeps 100 and 100 over words; these are subword tokens), over at most `MAX_PAIRS` pairs evenly spread over the corpus.
"""

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..errors import CommandParser, InputError, check_minimums
from .folders import write_whole


VMAP_NAME = "vmap.txt"  # the file's name in a model folder, as CTranslate2 reads it
BEST = 20
FREQUENT = 100
IBM1_ITERATIONS = 5
CHUNK = 20_000  # sentence pairs whose alignments IBM Model 1 holds in memory at once
MAX_PAIRS = 500_000  # the lexical probabilities of the tokens a shortlist keeps are settled long before


class VocabularyMap:
    """A vocabulary map read from its file: rules by n-gram length, and the tokens that are always candidates."""

    def __init__(self, rules: list[dict[str, list[int]]], always: set[int]):
        self.rules, self.always = rules, always

    @classmethod
    def read(cls, path: str | Path, tokenizer, special_ids: Iterable[int] = ()) -> "VocabularyMap":
        """The map in `path`, its target tokens as `tokenizer`'s ids; `special_ids` (the model's start and end
        tokens) are candidates besides the tokenizer's special tokens."""
        path = Path(path)
        if not path.is_file():
            raise InputError(f"--vmap {path}: no such file.")
        vocabulary = tokenizer.get_vocab()
        rules: list[dict[str, list[int]]] = []
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise InputError(f"{path}: not UTF-8 text ({error}): a vocabulary map is a UTF-8 text file.") from None
        for number, line in enumerate(text.splitlines(), 1):
            if not line:
                continue
            source, tab, targets = line.partition("\t")
            if not tab or "\t" in targets:
                raise InputError(f"{path}, line {number}: expected a source n-gram, one tab and target tokens.")
            ids = []
            for token in targets.split(" "):
                if token not in vocabulary:
                    raise InputError(f"{path}, line {number}: the target token {token!r} is not in the vocabulary.")
                ids.append(vocabulary[token])
            n = source.count(" ") + 1
            rules += [{} for _ in range(n - len(rules))]
            rules[n - 1][source] = ids
        always = set(rules[0].pop("", [])) if rules else set()
        specials = (tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, *special_ids)
        specials = {i for i in specials if i is not None}
        sources = [source for n_grams in rules for source in n_grams]
        if sources and not any(source.split(" ")[0] in vocabulary for source in sources):
            raise InputError(f"{path}: no source token in it is in the model's vocabulary: a map of another model?")
        if not (always | {i for n_grams in rules for ids in n_grams.values() for i in ids}) - specials:
            raise InputError(f"{path}: no target token in it: a vocabulary map lists each source token's targets.")
        return cls(rules, always | specials)

    def candidates(self, sources: list[list[str]]) -> list[int]:
        """The sorted target ids a batch of source token sequences may translate into (CTranslate2's rule: every
        n-gram of every source, and the tokens that are always candidates)."""
        found = set(self.always)
        for tokens in sources:
            for i in range(len(tokens)):
                for n, rules in enumerate(self.rules[: len(tokens) - i]):
                    found.update(rules.get(" ".join(tokens[i : i + n + 1]), ()))
        return sorted(found)


def lexical_probabilities(sources: list[list[int]], targets: list[list[int]], null: int, vocab_size: int):
    """IBM Model 1 by expectation-maximisation over the pairs of token ids (`null`: the empty source word's id):
    (source ids, target ids, p(target | source)) of every pair of tokens that occur in one sentence pair. The corpus
    is read `CHUNK` sentence pairs at a time, so memory holds the distinct token pairs and one chunk's alignments."""
    chunks = [range(start, min(start + CHUNK, len(sources))) for start in range(0, len(sources), CHUNK)]

    def alignments(chunk):  # the (source token, target token) key of each alignment link, and its target position
        keys, positions, offset = [], [], 0
        for i in chunk:
            source, target = np.array([*sources[i], null], dtype=np.int64), np.array(targets[i], dtype=np.int64)
            keys.append((source[:, None] * vocab_size + target[None, :]).ravel())
            positions.append(np.tile(np.arange(offset, offset + len(target)), len(source)))
            offset += len(target)
        return np.concatenate(keys), np.concatenate(positions)

    pairs = np.unique(np.concatenate([np.unique(alignments(chunk)[0]) for chunk in chunks]))
    probabilities = np.ones(len(pairs))
    for _ in range(IBM1_ITERATIONS):
        counts = np.zeros(len(pairs))
        for chunk in chunks:
            keys, positions = alignments(chunk)
            which = np.searchsorted(pairs, keys)
            p = probabilities[which]
            # Each target token's alignment to the source tokens of its sentence, then the expected counts.
            counts += np.bincount(which, p / np.bincount(positions, p)[positions], minlength=len(pairs))
        source_ids = pairs // vocab_size
        probabilities = counts / np.bincount(source_ids, counts, minlength=vocab_size)[source_ids]
    return pairs // vocab_size, pairs % vocab_size, probabilities


def write_vocabulary_map(path: Path, pairs: list[tuple[str, str]], tokenizer, best=BEST, frequent=FREQUENT) -> dict:
    """The vocabulary map of the (source, target) text `pairs` as `tokenizer` cuts them, written to `path` whole (a
    kill leaves what was there before); counts."""
    if not pairs:
        raise InputError("A vocabulary map needs sentence pairs: the corpus has none.")
    pairs = pairs[:: -(-len(pairs) // MAX_PAIRS)]
    sources = tokenizer([s for s, _ in pairs], add_special_tokens=False)["input_ids"]
    targets = tokenizer(text_target=[t for _, t in pairs], add_special_tokens=False)["input_ids"]
    vocab_size = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
    usable = np.array([bool(t) and " " not in t and "\t" not in t and "\n" not in t for t in tokens])
    null = vocab_size  # an id of no token: the empty source word
    source_ids, target_ids, probabilities = lexical_probabilities(sources, targets, null, vocab_size + 1)
    keep = (source_ids != null) & usable[np.minimum(source_ids, vocab_size - 1)] & usable[target_ids]
    source_ids, target_ids, probabilities = source_ids[keep], target_ids[keep], probabilities[keep]
    order = np.lexsort((-probabilities, source_ids))
    counts = np.bincount(np.concatenate([np.array(t, dtype=np.int64) for t in targets]), minlength=vocab_size)
    common = [i for i in np.argsort(-counts, kind="stable")[:frequent] if counts[i] and usable[i]]
    lines = ["\t" + " ".join(tokens[i] for i in common)]
    starts = np.searchsorted(source_ids[order], np.arange(vocab_size + 1))
    for source in np.unique(source_ids):
        best_ids = target_ids[order[starts[source] : starts[source + 1]]][:best]
        lines.append(f"{tokens[source]}\t{' '.join(tokens[i] for i in best_ids)}")
    write_whole(path, "\n".join(lines) + "\n")
    return dict(source_tokens=len(lines) - 1, best=best, frequent=len(common), pairs=len(pairs))


def main(argv: list[str], prog: str) -> int:
    """`hf-vanilla-transformer vocabulary-map`: a model folder's vmap.txt from a parallel corpus."""
    from transformers import GenerationConfig

    from .folders import check_translation_folder, load_tokenizer, resolve_model
    from .trained_on import trained_on
    from .training_corpus import CorpusArguments, read_training_corpus

    parser = CommandParser(
        prog=prog,
        description="Write a model's vocabulary map (vmap.txt), which --use_vmap decodes with, from a parallel "
        "corpus: IBM Model 1's most probable target tokens of each source token, and the most frequent target tokens.",
    )
    parser.add_argument("--model", required=True, help=f"the model folder; the map is written into it as {VMAP_NAME}")
    parser.add_argument("--train_file", nargs="+", help="the corpus, as train translation reads it (default: the "
                        "bundled corpus): JSON Lines, TSV/CSV with a header, or two aligned text files")  # fmt: skip
    parser.add_argument("--dataset_name", help="a Hub dataset instead (e.g. wmt14), its train split")
    parser.add_argument("--dataset_config_name", help="its configuration (e.g. de-en)")
    parser.add_argument("--source_lang", help="(default: the language the model was trained from, as its folder says)")
    parser.add_argument("--target_lang", help="(default: the language the model was trained into)")
    parser.add_argument("--best", type=int, default=BEST, help=f"target tokens per source token (default {BEST})")
    parser.add_argument("--frequent", type=int, default=FREQUENT, help=f"most frequent target tokens, always "
                        f"candidates (default {FREQUENT})")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help=f"replace the folder's {VMAP_NAME}")
    args = parser.parse_args(argv)
    check_minimums(dict(best=1, frequent=0), args)
    folder = Path(resolve_model(args.model))
    check_translation_folder(str(folder))
    if not (folder / "config.json").is_file():
        raise InputError(f"--model {args.model}: expected a local model folder (with config.json).")
    path = folder / VMAP_NAME
    if path.exists() and not args.overwrite:
        raise InputError(f"{path} exists: pass --overwrite to replace it.")
    recorded = (
        trained_on(GenerationConfig.from_pretrained(folder)) if (folder / "generation_config.json").is_file() else None
    )
    languages = [
        args.source_lang or getattr(recorded, "source_lang", None),
        args.target_lang or getattr(recorded, "target_lang", None),
    ]
    if None in languages:
        raise InputError(
            f"--model {args.model} does not say which languages it translates: give --source_lang and --target_lang."
        )
    for option, given, own in zip(
        ("--source_lang", "--target_lang"),
        (args.source_lang, args.target_lang),
        (getattr(recorded, "source_lang", None), getattr(recorded, "target_lang", None)),
    ):  # a map the wrong way round would choose among the source language's tokens
        if given and own and given != own:
            raise InputError(
                f"{option} {given}: --model {args.model} translates {recorded.source_lang} into "
                f"{recorded.target_lang} (its folder records it); its map maps {recorded.source_lang} tokens."
            )
    corpus, _ = read_training_corpus(
        CorpusArguments(*languages, args.dataset_name, args.dataset_config_name, args.train_file)
    )
    if "train" not in corpus:
        raise InputError(f"The corpus has the splits {sorted(corpus)}: a vocabulary map is made from its train split.")
    pairs = [(pair[languages[0]], pair[languages[1]]) for pair in corpus["train"]["translation"]]
    counts = write_vocabulary_map(path, pairs, load_tokenizer(str(folder)), args.best, args.frequent)
    print(
        f"{path}: the {counts['best']} most probable target tokens of each of {counts['source_tokens']:,} source "
        f"tokens and the {counts['frequent']} most frequent, from {counts['pairs']:,} pairs."
    )
    return 0
