"""How training pairs are batched: by a token budget, as the paper ("batched together by approximate sequence length",
about 25,000 source and 25,000 target tokens per update) and every MT toolkit (fairseq `--max-tokens`, OpenNMT
`-batch_type tokens`, Marian `--mini-batch-fit`) do, or by sentence count grouped by length. Both orders depend only on
(seed, epoch), so a resumed run sees the batches of the uninterrupted one; lengths are numpy arrays, never lists.
"""

import math

import numpy as np
import torch
from torch.utils.data import Sampler

from ..errors import InputError


def _rng(*entropy: int) -> np.random.Generator:
    return np.random.default_rng([value % 2**32 for value in entropy])


class TokenBatchSampler(Sampler[list[int]]):
    """Batches of pairs of similar length whose padded source tokens and padded target tokens each stay within
    `max_tokens`.

    As fairseq's `--max-tokens`: pairs are sorted by length (the longer side, then the source, then the target; ties
    in an order drawn from `seed`) and cut greedily into batches once, so every epoch has the same batches, each pair
    in exactly one (sorting by the target first, as fairseq, leaves twice the source padding); an epoch visits
    them in an order drawn from (seed, epoch) alone. Their number is made a multiple of `batches_multiple` (processes x
    accumulation steps) by halving the batches with the most pairs, so that all processes take the same number of
    optimizer steps and an update holds the same pairs however it is split into processes and accumulation steps. Under
    accelerate, process `i` of `n` takes batches `i, i + n, ...` of each epoch (accelerate's `BatchSamplerShard`).
    """

    batch_size = None  # batches of varying size (read by accelerate)
    drop_last = False

    def __init__(
        self,
        source_lengths,
        target_lengths,
        max_tokens: int,
        seed: int = 0,
        batches_multiple: int = 1,
        pad_to_multiple_of: int = 1,
    ):
        # Lengths as the collator pads them (`pad_to_multiple_of`), so that a batch's padded tokens stay in budget.
        self.source = np.asarray(source_lengths, dtype=np.int32)
        self.target = np.asarray(target_lengths, dtype=np.int32)
        self.padded = (_round_up(self.source, pad_to_multiple_of), _round_up(self.target, pad_to_multiple_of))
        self.max_tokens, self.seed, self.epoch = int(max_tokens), seed, 0
        too_long = (self.padded[0] > max_tokens) | (self.padded[1] > max_tokens)
        if too_long.any():
            row = int(too_long.argmax())
            raise InputError(
                f"--max_tokens {max_tokens}: pair {row + 1:,} alone has {self.source[row]} source and "
                f"{self.target[row]} target tokens ({int(too_long.sum()):,} pairs are that long). Raise --max_tokens "
                "to at least --max_source_length and --max_target_length, which leave such pairs out."
            )
        if len(self.source) < batches_multiple:
            raise InputError(
                f"{len(self.source):,} training pairs cannot fill the {batches_multiple} batches of one update "
                "(processes x gradient accumulation steps)."
            )
        order = _rng(seed, 0).permutation(len(self.source))
        source, target = self.source[order], self.target[order]
        self.order = order[np.lexsort((target, source, np.maximum(source, target)))]
        self.bounds = _split_to_multiple(self._cut(), batches_multiple)

    def _cut(self) -> np.ndarray:
        """Greedy batches over the sorted pairs: the bounds `[0, ..., len]` of each batch in `self.order`."""
        source, target = self.padded[0][self.order], self.padded[1][self.order]
        bounds, start = [0], 0
        while start < len(source):
            window = min(len(source) - start, self.max_tokens // max(int(source[start]), int(target[start]), 1))
            size = np.arange(1, window + 1)
            padded = np.maximum(
                size * np.maximum.accumulate(source[start : start + window]),
                size * np.maximum.accumulate(target[start : start + window]),
            )
            fits = padded <= self.max_tokens  # True, then False: a longer batch only pads more
            start += window if fits.all() else int(fits.argmin())
            bounds.append(start)
        return np.asarray(bounds, dtype=np.int64)

    def set_epoch(self, epoch: int):
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __iter__(self):
        for batch in _rng(self.seed, 1, self.epoch).permutation(len(self)):
            yield self.order[self.bounds[batch] : self.bounds[batch + 1]].tolist()

    def shapes(self) -> dict[str, np.ndarray]:
        """Per batch: its number of pairs, its padded and its real source and target tokens."""
        starts = self.bounds[:-1]
        pairs = np.diff(self.bounds)
        source, target = self.source[self.order].astype(np.int64), self.target[self.order].astype(np.int64)
        padded_source, padded_target = (lengths[self.order].astype(np.int64) for lengths in self.padded)
        return {
            "pairs": pairs,
            "padded_source": pairs * np.maximum.reduceat(padded_source, starts),
            "padded_target": pairs * np.maximum.reduceat(padded_target, starts),
            "source": np.add.reduceat(source, starts),
            "target": np.add.reduceat(target, starts),
        }


def _round_up(lengths: np.ndarray, multiple: int) -> np.ndarray:
    return lengths if multiple <= 1 else -(-lengths // multiple) * multiple


def _split_to_multiple(bounds: np.ndarray, multiple: int) -> np.ndarray:
    """`bounds` with the largest batches halved until the number of batches is a multiple of `multiple`."""
    bounds = list(bounds)
    while (len(bounds) - 1) % multiple:
        sizes = np.diff(bounds)
        largest = int(sizes.argmax())  # the first of the largest: deterministic
        bounds.insert(largest + 1, bounds[largest] + sizes[largest] // 2)
    return np.asarray(bounds, dtype=np.int64)


def accumulation_steps_for(tokens_per_update: int, target_tokens: int, batches: int, world_size: int) -> int:
    """Gradient accumulation steps so that one update holds about `tokens_per_update` target tokens over `world_size`
    processes, for an epoch of `target_tokens` in `batches` token batches (made a multiple of the batches of an
    update, as [`TokenBatchSampler`] does)."""

    def per_update(steps: int) -> float:
        return target_tokens / math.ceil(batches / (world_size * steps))

    guess = max(1, round(tokens_per_update * batches / (target_tokens * world_size)))
    return min(range(max(1, guess - 1), guess + 2), key=lambda steps: abs(per_update(steps) - tokens_per_update))


# Bytes per padded token (one source and one target token) that a training step keeps for its backward pass, in
# bf16 autocast: per layer, per model dimension and per feed-forward unit, and per vocabulary entry for the loss (the
# half-precision logits it keeps, and in the backward pass their gradient; its float32 work is one chunk of rows at a
# time). Measured on the CPU from the tensors autograd saves (tests/training/test_batching.py checks them against a
# model). An H100 trained the base model at 25,400 target tokens in 21.4 GB when the loss still kept a float32 copy
# of the logits (12 more bytes per vocabulary entry than now).
SAVED_BYTES = {"embedding_per_dim": 10, "encoder_per_dim": 28, "decoder_per_dim": 48, "per_ffn_unit": 2}
LOSS_BYTES_PER_VOCABULARY_ENTRY = 4
# Per parameter: float32 weights, gradients and AdamW's two moments, and autocast's half-precision copy.
BYTES_PER_PARAMETER = 18
# The share of free memory the batch may take: the rest absorbs the allocator's fragmentation, the compiled kernels'
# workspaces and the variation of real batches around their padded size.
MEMORY_SHARE = 0.8


def training_bytes_per_token(config, half_precision: bool = True) -> int:
    """Peak bytes per padded token (one source and one target token) of a training step of an encoder-decoder
    `config` (d_model, ffn dims, layer counts, vocabulary as transformers names them); float32 doubles them."""
    d = config.d_model
    encoder = config.encoder_layers * (
        SAVED_BYTES["encoder_per_dim"] * d + SAVED_BYTES["per_ffn_unit"] * config.encoder_ffn_dim
    )
    decoder = config.decoder_layers * (
        SAVED_BYTES["decoder_per_dim"] * d + SAVED_BYTES["per_ffn_unit"] * config.decoder_ffn_dim
    )
    loss = LOSS_BYTES_PER_VOCABULARY_ENTRY * config.vocab_size
    return (SAVED_BYTES["embedding_per_dim"] * d + encoder + decoder + loss) * (1 if half_precision else 2)


def auto_max_tokens(
    free_bytes: int,
    config,
    parameters: int,
    half_precision: bool = True,
    tokens_per_update: int | None = None,
    multiple: int = 64,
) -> int:
    """`--max_tokens auto`: the padded tokens per batch that a device with `free_bytes` free holds for a model of
    `config` with `parameters` parameters, a multiple of `multiple`. With `tokens_per_update` (a process's share of
    an update), no more than it needs (a quarter above it, for padding, rounded up to 4,096): on a large card, one
    batch per update."""
    room = MEMORY_SHARE * (free_bytes - BYTES_PER_PARAMETER * parameters)
    tokens = int(room // training_bytes_per_token(config, half_precision))
    if tokens_per_update:
        tokens = min(tokens, -(-int(1.25 * tokens_per_update) // 4096) * 4096)
    tokens = tokens // multiple * multiple
    if tokens < multiple:
        raise InputError(
            f"--max_tokens auto: {free_bytes / 2**30:.1f} GiB free on the device do not hold the model's "
            f"{parameters:,} parameters and a batch: set --max_tokens, or free the device's memory."
        )
    return tokens


class SeededLengthGroupedSampler(Sampler[int]):
    """transformers' length-grouped order (random mega-batches of 50 batches, sorted by length, the longest batch
    first) drawn from (seed, epoch) alone, on a numpy array of lengths.

    The stock sampler draws from the global RNG, so a run resumed after the first epoch sees other batches than the
    uninterrupted run; here resuming reproduces it exactly. It yields the same order as
    `transformers.trainer_pt_utils.get_length_grouped_indices` with a generator seeded `seed + epoch`.
    """

    def __init__(self, batch_size: int, lengths, seed: int):
        self.batch_size, self.lengths = batch_size, np.asarray(lengths)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int):
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        indices = torch.randperm(len(self.lengths), generator=generator).numpy()
        megabatch = max(1, min(len(self.lengths) // (self.batch_size * 4), 50)) * self.batch_size
        megabatches = [indices[i : i + megabatch] for i in range(0, len(indices), megabatch)]
        # each sorted by decreasing length, equal lengths in drawn order (as Python's stable sorted(reverse=True))
        megabatches = [m[np.argsort(-self.lengths[m], kind="stable")] for m in megabatches]
        longest = int(np.argmax([self.lengths[m[0]] for m in megabatches]))
        megabatches[0][0], megabatches[longest][0] = megabatches[longest][0], megabatches[0][0]
        for m in megabatches:
            yield from m.tolist()


class LengthSortedSampler(Sampler[int]):
    """The rows from the longest to the shortest: evaluation batches of similar lengths (less padding to generate)."""

    def __init__(self, lengths):
        self.lengths = np.asarray(lengths)

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        yield from np.argsort(-self.lengths, kind="stable").tolist()


__all__ = [
    "LengthSortedSampler",
    "SeededLengthGroupedSampler",
    "TokenBatchSampler",
    "accumulation_steps_for",
    "auto_max_tokens",
    "training_bytes_per_token",
]
