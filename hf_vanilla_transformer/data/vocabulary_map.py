"""Vocabulary maps (a lexical shortlist, as Marian and Firefox Translations decode with): for each source token, the
target tokens a translation of it is likely to use. With `--use_vmap` each batch chooses its next tokens among the
candidates its source tokens map to and the common tokens, so the output layer and the search read some thousand
rows of the vocabulary instead of all of them.

The file is CTranslate2's `vmap.txt` (its `use_vmap`): one line per source token or n-gram (tokens joined by
spaces), a tab, and its target tokens separated by spaces; the line whose source is empty lists the tokens that are
always candidates. The unknown, start and end tokens always are, as in CTranslate2, so both engines
choose among the same tokens (log-probabilities are normalised over the candidates, as both do).

`write_vocabulary_map` makes one from a parallel corpus: IBM Model 1's lexical probabilities p(target | source)
(Brown et al., 1993), the `BEST` most probable target tokens of each source token, and the `FREQUENT` most frequent
target tokens (Marian's `--shortlist lex.s2t 100 100` keeps 100 and 100 over words; these are subword tokens).
"""

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..errors import InputError


VMAP_NAME = "vmap.txt"  # the file's name in a model folder, as CTranslate2 reads it
BEST = 20
FREQUENT = 100
IBM1_ITERATIONS = 5


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
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
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
        always |= {i for i in specials if i is not None}
        return cls(rules, always)

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
    (source ids, target ids, p(target | source)) of every pair of tokens that occur in one sentence pair."""
    keys, positions, offset = [], [], 0
    for source, target in zip(sources, targets):
        source, target = np.array([*source, null]), np.array(target)
        keys.append((source[:, None] * vocab_size + target[None, :]).ravel())
        positions.append(np.tile(np.arange(offset, offset + len(target)), len(source)))
        offset += len(target)
    pairs, which = np.unique(np.concatenate(keys), return_inverse=True)
    positions = np.concatenate(positions)
    source_ids, target_ids = pairs // vocab_size, pairs % vocab_size
    probabilities = np.ones(len(pairs))
    for _ in range(IBM1_ITERATIONS):
        p = probabilities[which]
        # Each target token's alignment to the source tokens of its sentence, then the expected counts.
        counts = np.bincount(which, p / np.bincount(positions, p)[positions], minlength=len(pairs))
        probabilities = counts / np.bincount(source_ids, counts, minlength=vocab_size)[source_ids]
    return source_ids, target_ids, probabilities


def write_vocabulary_map(path: Path, pairs: list[tuple[str, str]], tokenizer, best=BEST, frequent=FREQUENT) -> dict:
    """The vocabulary map of the (source, target) text `pairs` as `tokenizer` cuts them, written to `path`; counts."""
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
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dict(source_tokens=len(lines) - 1, best=best, frequent=len(common))
