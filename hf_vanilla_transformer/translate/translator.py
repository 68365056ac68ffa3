"""Translate big files with any `AutoModelForSeq2SeqLM`: lines split into sentences, streamed, length-sorted
token-budget batches, results in input order, n-best lists with scores, resumable, sharded across processes.

    hf-vanilla-transformer translate --model outputs/demo-de-en input.de --output output.en
    accelerate launch -m hf_vanilla_transformer translate --model ... input.de --output output.en

As a library: `load_translator(...)`, then `translate_lines(lines, translator)` (a generator of `LineTranslation`) or
`translate_file(inputs, output, translator)`.
"""

import itertools
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers.utils import logging

from ..errors import InputError
from ..model.configuration_vanilla_transformer import max_new_tokens_for
from .backends import Hypothesis, load_ctranslate2_backend, load_torch_backend, sequence_score
from .io import (
    FORMATS,
    LineTranslation,
    TextHypothesis,
    check_inputs,
    count_lines,
    format_translation,
    make_batches,
    read_lines,
    resume_point,
    save_state,
    windows,
)
from .sentences import join, segments, split_sentences


logger = logging.get_logger(__name__)

DEFAULT_MAX_TOKENS = 3000
DEFAULT_BUFFER_SIZE = 10_000


class Translator:
    """A backend with its tokenizer, the n-best size, the length limit per sentence, and how lines become sentences.

    Each line is split into sentences (`split_sentences=False`: a line is one sentence) by the rules of `source_lang`
    (default: the language the model was trained on, as its folder records; see `sentences`), and a sentence longer
    than `max_source_tokens` into pieces that fit: the length the model was trained on where its folder records it
    (`data.trained_on`), else the longest the model and tokenizer accept.

    The limit follows fairseq's `--max-len-a/--max-len-b`: at most int(a * source tokens + b) new tokens (EOS included
    if the model ends the translation there), where the source tokens include EOS. fairseq applies it per batch with
    the longest source; here every sentence has its own, so results do not depend on what shares the batch. With
    neither set, the model's own limit (its generation config) or else the paper's source length + 50, as generate()
    and the pipeline; b alone means a = 0; a alone keeps the default b. The limit never exceeds what the model can
    generate.
    """

    def __init__(
        self,
        backend,
        max_len_a: float | None = None,
        max_len_b: int | None = None,
        settings: dict | None = None,
        split_sentences: bool = True,
        source_lang: str | None = None,
    ):
        if (max_len_a is not None and max_len_a < 0) or (max_len_b is not None and max_len_b < 0):
            raise InputError(f"--max_len_a and --max_len_b must be >= 0, got {max_len_a} and {max_len_b}.")
        self.backend, self.tokenizer, self.nbest = backend, backend.tokenizer, backend.nbest
        default_a, default_b = backend.default_length_rule
        self.max_len_a = (default_a if max_len_b is None else 0.0) if max_len_a is None else max_len_a
        self.max_len_b = default_b if max_len_b is None else max_len_b
        self.settings = settings or {}
        self.split_sentences = split_sentences
        self.source_lang = source_lang or backend.trained_on.source_lang
        self.trained_length = backend.trained_on.max_source_length
        self.max_source_tokens = backend.trained_on.source_limit(backend.input_limit)

    def limit(self, source_length: int) -> int:
        limit = max_new_tokens_for(source_length, self.backend.max_position_embeddings, self.max_len_a, self.max_len_b)
        if limit < 1:
            raise InputError(
                f"--max_len_a {self.max_len_a} --max_len_b {self.max_len_b} allow no token for a source of "
                f"{source_length} tokens: the limit must be at least 1."
            )
        return limit

    def encode(self, lines: list[str]) -> list["LinePieces"]:
        """Each line's pieces to translate (none for a blank line; see `sentences.segments`)."""
        limit, known = self.max_source_tokens, {}
        sentences = {
            s
            for line in lines
            for s in (split_sentences(line, self.source_lang) if self.split_sentences else [line.strip()])
        }
        sentences = sorted(s for s in sentences if s)
        known.update(zip(sentences, self.tokenizer(sentences)["input_ids"] if sentences else []))

        def ids(piece: str) -> list[int]:
            if piece not in known:
                known[piece] = self.tokenizer(piece)["input_ids"]
            return known[piece]

        def fits(piece: str) -> bool:
            return limit is None or len(ids(piece)) <= limit

        encoded = []
        for line in lines:
            pieces, too_long = segments(line, fits, self.source_lang, self.split_sentences)
            texts = [piece for _, piece in pieces]
            encoded.append(LinePieces([separator for separator, _ in pieces], texts, list(map(ids, texts)), too_long))
        return encoded

    def decode(
        self, lines: list[str], encoded: list["LinePieces"], parts: list[list[list[Hypothesis]]]
    ) -> list[LineTranslation]:
        """Each line with the texts of its n best; the k-th hypothesis of a line of several pieces joins its pieces'
        k-th hypotheses with the whitespace between the pieces (`sentences.join`)."""
        flat = [h for line_parts in parts for hypotheses in line_parts for h in hypotheses]
        texts = iter(
            self.tokenizer.batch_decode(
                [h.token_ids for h in flat], skip_special_tokens=True, clean_up_tokenization_spaces=False
            )
        )  # the pipeline's decoding, for the same text
        translations = []
        for line, pieces, line_parts in zip(lines, encoded, parts):
            decoded = [[next(texts) for _ in hypotheses] for hypotheses in line_parts]
            results = []
            for k, joined in enumerate(zip(*line_parts)):
                ids = [i for h in joined for i in h.token_ids]
                token_scores = [s for h in joined for s in h.token_scores]
                results.append(
                    TextHypothesis(
                        join(pieces.separators, [part[k] for part in decoded]),
                        self.tokenizer.convert_ids_to_tokens(ids),
                        token_scores,
                        sequence_score(token_scores, self.backend.length_penalty) if token_scores else None,
                        any(h.reached_limit for h in joined),
                    )
                )
            translations.append(LineTranslation(line, results, len(line_parts)))
        return translations


@dataclass
class LinePieces:
    """What of a line goes to the model: its pieces (sentences, or parts of a sentence too long for the model)."""

    separators: list[str]  # the whitespace before each piece in the line ("" for the first)
    texts: list[str]
    ids: list[list[int]]
    split_sentences: int  # sentences longer than the translator's max_source_tokens, cut into several pieces


def load_translator(
    model,
    *,
    tokenizer=None,
    backend: str = "torch",
    generation: dict | None = None,
    nbest: int = 1,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
    device: str | None = None,
    dtype: str = "float32",
    int8: bool = False,
    compute_type: str = "default",
    trust_remote_code: bool = False,
    split_sentences: bool = True,
    source_lang: str | None = None,
) -> Translator:
    """Load `model` for translation: a folder or a Hub id, or (PyTorch) a model object with its `tokenizer`.

    `generation` overrides its generation config (`num_beams`, `length_penalty`, `do_sample`, `temperature`, `top_k`,
    `top_p`, ...; None values are ignored). `split_sentences` and `source_lang` are `Translator`'s. The other
    arguments are the command's options of the same names.
    """
    if nbest < 1:
        raise InputError(f"--nbest must be at least 1, got {nbest}.")
    generation = {k: v for k, v in (generation or {}).items() if v is not None}
    if device is None and process_group()[1] > 1:
        device = str(_accelerate_state().device)  # this process's GPU under accelerate/torchrun, or the CPU
    if backend == "torch":
        engine = load_torch_backend(model, generation, nbest, device, dtype, int8, trust_remote_code, tokenizer)
    elif backend == "ctranslate2":
        if int8 or dtype != "float32":
            raise InputError("--int8 and --dtype are PyTorch options; CTranslate2 takes --compute_type (e.g. int8).")
        engine = load_ctranslate2_backend(model, generation, nbest, device, compute_type, trust_remote_code)
    else:
        raise InputError(f"--backend must be 'torch' or 'ctranslate2', got {backend!r}.")
    name = model if isinstance(model, str) else model.name_or_path
    settings = dict(
        model=name, backend=backend, generation=generation, nbest=nbest, max_len_a=max_len_a, max_len_b=max_len_b
    )
    settings.update(dtype=dtype, int8=int8) if backend == "torch" else settings.update(compute_type=compute_type)
    settings.update(split_sentences=split_sentences, source_lang=source_lang)
    return Translator(engine, max_len_a, max_len_b, settings, split_sentences, source_lang)


# ------------------------------------------------------------------------------------------------- translating


@dataclass
class TranslationStats:
    lines: int = 0
    generated_tokens: int = 0  # of the best hypotheses
    split_sentences: int = 0  # longer than the translator's max_source_tokens, translated in pieces
    reached_length_limit: int = 0  # hypotheses
    seconds: float = 0.0


@dataclass
class Progress:
    """The counts of a run, shown (sentences/s, tokens/s) on a tqdm bar when there is one."""

    bar: object = None
    stats: TranslationStats = field(default_factory=TranslationStats)
    start: float = field(default_factory=time.perf_counter)
    lines: float = 0.0  # a split line counts in fractions, one per part

    def advance(self, lines: float, generated_tokens: int):
        self.lines += lines
        self.stats.generated_tokens += generated_tokens
        if self.bar is not None:
            self.bar.update(int(self.lines) - self.bar.n)
            self.bar.set_postfix_str(f"{self.stats.generated_tokens / (time.perf_counter() - self.start):.0f} tok/s")


def process_group() -> tuple[int, int]:
    """(rank, world size): several processes under `accelerate launch` or `torchrun`, which set WORLD_SIZE."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return 0, 1
    state = _accelerate_state()
    return state.process_index, state.num_processes


def _accelerate_state():
    """accelerate's state, joining the process group: NCCL on GPUs, gloo on CPUs (without `cpu=True`, accelerate
    takes CPU-only processes for a single one)."""
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def translate_windows(
    lines: Iterable[str],
    translator: Translator,
    *,
    max_tokens: int | None = None,
    batch_size: int | None = None,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    scores: bool = True,
    seed: int = 0,
    first_line: int = 0,
    progress: Progress | None = None,
) -> Iterator[list[LineTranslation]]:
    """The translations of each window of `buffer_size` lines, in input order; memory holds one window.

    A window is sorted by length and cut into batches of at most `max_tokens` padded source tokens (3000 when neither
    limit is given) and `batch_size` sentences. `scores=False` skips the token scores. Sampling seeds each batch from
    `seed` and the batch's place in the input (`first_line`: where `lines` starts), the same in any process count.
    Under several processes every process reads all lines and cuts the same batches; process r translates batches
    r, r + world, ... and the first process gathers each window and yields it (the others yield empty lists).
    """
    if max_tokens is None and batch_size is None:
        max_tokens = DEFAULT_MAX_TOKENS
    rank, world = process_group()
    progress = progress or Progress()
    for index, window in enumerate(windows(lines, buffer_size)):
        encoded = translator.encode(window)
        pieces = [(i, ids) for i, line in enumerate(encoded) for ids in line.ids]
        batches = make_batches([len(ids) for _, ids in pieces], max_tokens, batch_size)
        results, window_start = {}, progress.stats.lines
        for number, batch in enumerate(batches):
            if number % world != rank:
                continue
            sources = [pieces[j][1] for j in batch]
            hypotheses = translator.backend.generate(
                sources,
                [translator.limit(len(s)) for s in sources],
                scores=scores,
                seed=seed + 1_000_003 * (first_line + index * buffer_size) + number,
            )
            results.update(zip(batch, hypotheses))
            progress.advance(sum(1 / len(encoded[pieces[j][0]].ids) for j in batch), _generated(hypotheses))
        if world > 1:
            gathered = [None] * world if rank == 0 else None
            torch.distributed.gather_object(results, gathered, dst=0)
            if rank != 0:
                yield []
                continue
            own = _generated(results.values())
            results = {k: v for part in gathered for k, v in part.items()}
            progress.advance(0, _generated(results.values()) - own)
        by_line = [[] for _ in window]
        for j, (i, _) in enumerate(pieces):
            by_line[i].append(results[j])
        translations = translator.decode(window, encoded, by_line)
        progress.stats.lines = window_start + len(window)
        progress.advance(progress.stats.lines - progress.lines, 0)  # blank lines, other processes' batches
        progress.stats.split_sentences += sum(line.split_sentences for line in encoded)
        progress.stats.reached_length_limit += sum(h.reached_length_limit for t in translations for h in t.hypotheses)
        yield translations


def _generated(hypotheses) -> int:
    return sum(len(hs[0].token_ids) for hs in hypotheses if hs)


def translate_lines(lines: Iterable[str], translator: Translator, **kwargs) -> Iterator[LineTranslation]:
    """One `LineTranslation` per input line, in order; keyword arguments as for `translate_windows`."""
    for window in translate_windows(lines, translator, **kwargs):
        yield from window


def translate_file(
    inputs: list[str],
    output: str | None,
    translator: Translator,
    *,
    output_format: str = "text",
    resume: bool = False,
    quiet: bool = False,
    **kwargs,
) -> TranslationStats:
    """Translate the lines of `inputs` ("-" or none: standard input) into `output` (None or "-": standard output).

    The output is written and flushed window by window. With a file output, `<output>.progress` records after each
    window how many input lines and output bytes are complete; `resume=True` cuts the output back to that size and
    continues after those lines, so an interrupted run loses and repeats nothing. The progress file is removed when
    the run completes. `quiet` hides the progress bar. Other keyword arguments are `translate_windows`'s.
    """
    inputs = list(inputs or ["-"])
    if output_format not in FORMATS:
        raise InputError(f"--format must be one of {FORMATS}, got {output_format!r}.")
    if output_format == "text" and translator.nbest > 1:
        raise InputError(f"--nbest {translator.nbest} needs --format jsonl or fairseq: text has one line per input.")
    to_file = output not in (None, "-")
    if resume and not to_file:
        raise InputError("--resume needs --output FILE: standard output cannot be continued.")
    check_inputs(inputs)
    if to_file and any(path != "-" and Path(path).resolve() == Path(output).resolve() for path in inputs):
        raise InputError(f"--output {output} is also an input: writing would destroy it.")
    state_path = Path(f"{output}.progress") if to_file else None
    done, size = resume_point(Path(output), state_path, translator.settings, resume) if to_file else (0, 0)
    rank, world = process_group()
    if world > 1:
        torch.distributed.barrier()  # every process has checked before the first one writes
    progress = Progress(lines=done)
    progress.stats.lines = done
    writer = None
    if rank == 0:
        progress.bar = None if quiet else _progress_bar(count_lines(inputs), done)
        if to_file:
            writer = open(output, "r+b" if done or size else "wb")
            writer.truncate(size)
            writer.seek(size)
            save_state(state_path, done, size, translator.settings)
        else:
            writer = sys.stdout.buffer
    lines = itertools.islice(read_lines(inputs), done, None)
    try:
        for window in translate_windows(
            lines, translator, scores=output_format != "text", first_line=done, progress=progress, **kwargs
        ):
            if rank != 0:
                continue
            text = "".join(format_translation(done + i, t, output_format) for i, t in enumerate(window))
            writer.write(text.encode("utf-8"))
            writer.flush()
            done += len(window)
            if to_file:
                os.fsync(writer.fileno())
                save_state(state_path, done, writer.tell(), translator.settings)
    except InputError as error:
        if to_file and rank == 0:
            message = f"{error} The {done} lines before it are in {output}; fix the input and add --resume."
            raise InputError(message) from None
        raise
    finally:
        if progress.bar is not None:
            progress.bar.close()
        if to_file and writer is not None:
            writer.close()
    if to_file and rank == 0:
        state_path.unlink()
    stats = progress.stats
    stats.seconds = time.perf_counter() - progress.start
    if rank == 0:
        _warn(stats, translator)
    return stats


def _progress_bar(total: int | None, done: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, unit="sent", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)


def _warn(stats: TranslationStats, translator: Translator) -> None:
    if stats.split_sentences:
        learned = "was trained on" if translator.trained_length == translator.max_source_tokens else "accepts"
        logger.warning(
            f"{stats.split_sentences} sentence(s) were longer than the {translator.max_source_tokens} tokens the "
            f"model {learned}: each was split at clause punctuation (or between words), translated in parts and "
            "joined."
        )
    if stats.reached_length_limit:
        logger.warning(
            f"{stats.reached_length_limit} hypothesis(es) stopped at the length limit before the model ended them "
            "(jsonl: reached_length_limit); raise --max_len_a/--max_len_b to allow longer translations."
        )
