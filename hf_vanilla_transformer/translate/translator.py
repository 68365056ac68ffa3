"""Translate big files with any `AutoModelForSeq2SeqLM`: lines split into sentences, streamed, length-sorted
token-budget batches, results in input order, n-best lists with scores, resumable, sharded across processes.

    hf-vanilla-transformer translate --model outputs/demo-de-en input.de --output output.en
    accelerate launch -m hf_vanilla_transformer translate --model ... input.de --output output.en

As a library: `translator = load_translator(model, TranslateOptions(...))`, then `translator.translate(lines)` (a list
of `LineTranslation`), `translate_lines(lines, translator)` (a generator, one window in memory) or
`translate_file(inputs, output, translator)`.
"""

import dataclasses
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
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
from .options import TranslateOptions
from .sentences import join, segments, split_sentences


logger = logging.get_logger(__name__)

DEFAULT_BUFFER_SIZE = 10_000


class Translator:
    """The translation engine: a backend with its tokenizer and the `TranslateOptions` it runs with.

    `translate(lines)` is the one call of the file translator, the service and the corpus workers: each line is split
    into sentences (`split_sentences=False`: a line is one sentence) by the rules of `source_lang` (default: the
    language the model was trained on, as its folder records; see `sentences`), and a sentence longer than
    `max_source_tokens` into pieces that fit: the length the model was trained on where its folder records it
    (`data.trained_on`), else the longest the model and tokenizer accept. The pieces are sorted by length and cut into
    batches of at most `max_tokens` padded source tokens (and `batch_size` sentences). `variant(**changes)` is the
    same model with other options.

    The limit follows fairseq's `--max-len-a/--max-len-b`: at most int(a * source tokens + b) new tokens (EOS included
    if the model ends the translation there), where the source tokens include EOS. fairseq applies it per batch with
    the longest source; here every sentence has its own, so results do not depend on what shares the batch. With
    neither set, the model's own limit (its generation config) or else the paper's source length + 50, as generate()
    and the pipeline; b alone means a = 0; a alone keeps the default b. The limit never exceeds what the model can
    generate.
    """

    def __init__(self, backend, options: TranslateOptions | None = None, *, model=None, **changes):
        options = dataclasses.replace(options or TranslateOptions(), **changes).check()
        max_len_a, max_len_b = options.max_len_a, options.max_len_b
        if (max_len_a is not None and max_len_a < 0) or (max_len_b is not None and max_len_b < 0):
            raise InputError(f"--max_len_a and --max_len_b must be >= 0, got {max_len_a} and {max_len_b}.")
        self.backend, self.options, self.model = backend, options, model
        self.tokenizer, self.nbest = backend.tokenizer, backend.nbest
        default_a, default_b = backend.default_length_rule
        self.max_len_a = (default_a if max_len_b is None else 0.0) if max_len_a is None else max_len_a
        self.max_len_b = default_b if max_len_b is None else max_len_b
        self.split_sentences = options.split_sentences
        self.source_lang = options.source_lang or backend.trained_on.source_lang
        self.trained_length = backend.trained_on.max_source_length
        self.max_source_tokens = backend.trained_on.source_limit(backend.input_limit)

    @property
    def trained_on(self):
        """What the model's folder records from training: its languages and lengths (`data.trained_on`)."""
        return self.backend.trained_on

    @property
    def num_beams(self) -> int:
        """The beam size it decodes with: its options', else its model's generation config."""
        return self.backend.generation_config.num_beams or 1

    @property
    def settings(self) -> dict:
        """What decides the output, as the resume file records it (a resumed run must decode as the first did)."""
        name = self.model if isinstance(self.model, str) or self.model is None else self.model.name_or_path
        return output_settings(name, self.options)

    def variant(self, **changes) -> "Translator":
        """This translator with other options (`TranslateOptions`' names), on the same weights where it can: the
        PyTorch model (already on its device, in its dtype, quantized if asked) is shared; CTranslate2 fixes its
        decoding options when it loads, so a CTranslate2 variant with other decoding options loads the model again.
        Sentence, length and batching options alone share the engine."""
        options = dataclasses.replace(self.options, **changes).check()
        engine = ("backend", "device", "dtype", "int8", "compute_type", "trust_remote_code", "compile")
        if any(getattr(options, name) != getattr(self.options, name) for name in engine):
            raise InputError(f"A variant keeps its engine ({', '.join(engine)}); load the model again to change them.")
        if (options.generation, options.nbest) == (self.options.generation, self.options.nbest):
            return Translator(self.backend, options, model=self.model)
        if options.backend == "torch":
            backend = load_torch_backend(
                self.backend.model,
                options.generation,
                options.nbest,
                str(self.backend.device),
                options.dtype,
                tokenizer=self.tokenizer,
                compile="always" if self.backend.static_cache else "never",
            )
            return Translator(backend, options, model=self.model)
        return load_translator(self.model, options)

    def translate(
        self,
        lines: list[str],
        *,
        scores: bool = True,
        first_line: int = 0,
        group: tuple[int, int] = (0, 1),
        on_batch: Callable[["Batch"], None] | None = None,
    ) -> list[LineTranslation]:
        """The `LineTranslation` of each line, in order (none for a blank line): its n best with their scores.

        `scores=False` skips the token scores. Sampling seeds each batch from the `seed` option, `first_line` (where
        `lines` start in the input) and the batch's number. `group=(rank, size)`: under several processes that all
        call it with the same lines, process r translates batches r, r + size, ... and the first process gathers and
        returns the translations (the others return an empty list). `on_batch` is called after each batch.
        """
        rank, world = group
        encoded = self.encode(lines)
        pieces = [(i, ids) for i, line in enumerate(encoded) for ids in line.ids]
        static = getattr(self.backend, "static_cache", False)
        lengths = [self.static_length(len(ids)) if static else len(ids) for _, ids in pieces]
        batches = make_batches(lengths, self.options.max_tokens, self.options.batch_size)
        results = {}
        for number, batch in enumerate(batches):
            if number % world != rank:
                continue
            sources = [pieces[j][1] for j in batch]
            start = time.perf_counter()
            hypotheses = self.backend.generate(
                sources,
                [self.limit(len(s)) for s in sources],
                scores=scores,
                seed=self.options.seed + 1_000_003 * first_line + number,
                **({"shape": self.static_shape(sources)} if static else {}),
            )
            results.update(zip(batch, hypotheses))
            if on_batch is not None:
                on_batch(
                    Batch(
                        lines=sum(1 / len(encoded[pieces[j][0]].ids) for j in batch),
                        sentences=len(batch),
                        tokens=len(batch) * max(map(len, sources)),
                        generated=sum(len(hs[0].token_ids) for hs in hypotheses if hs),
                        seconds=time.perf_counter() - start,
                    )
                )
        if world > 1:
            gathered = [None] * world if rank == 0 else None
            torch.distributed.gather_object(results, gathered, dst=0)
            if rank != 0:
                return []
            results = {k: v for part in gathered for k, v in part.items()}
        by_line = [[] for _ in lines]
        for j, (i, _) in enumerate(pieces):
            by_line[i].append(results[j])
        return self.decode(lines, encoded, by_line)

    def static_length(self, source_length: int) -> int:
        """The source length a static cache pads a sentence to: the next power of two from 16, within the longest
        sentence this translator passes on."""
        length = max(16, 1 << (source_length - 1).bit_length())
        return min(length, self.max_source_tokens or length)

    def static_shape(self, sources: list[list[int]]) -> tuple[int, int, int]:
        """The (rows, source length, target positions) a static cache decodes a batch in: its longest sentence's
        `static_length`, as many rows as `max_tokens` and `batch_size` allow at that length (batches are cut at it),
        and that length's limit, which bounds every sentence's (the limit grows with the length). One shape per
        source length, a handful per process, so that the step is compiled that many times."""
        length = self.static_length(max(map(len, sources)))
        rows = max(1, self.options.max_tokens // length, len(sources))
        rows = min(rows, self.options.batch_size or rows)
        return rows, length, self.limit(length)

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
            translations.append(LineTranslation(line, results, len(line_parts), pieces.split_sentences))
        return translations


def output_settings(model: str | None, options: TranslateOptions) -> dict:
    """The model and the options that decide a translation (not where or how fast it runs), as resume records keep
    them."""
    o = options
    settings = dict(
        model=model, backend=o.backend, generation=o.generation, nbest=o.nbest, max_len_a=o.max_len_a,
        max_len_b=o.max_len_b,
    )  # fmt: skip
    settings.update(dtype=o.dtype, int8=o.int8) if o.backend == "torch" else settings.update(
        compute_type=o.compute_type
    )
    settings.update(split_sentences=o.split_sentences, source_lang=o.source_lang)
    return settings


@dataclass
class LinePieces:
    """What of a line goes to the model: its pieces (sentences, or parts of a sentence too long for the model)."""

    separators: list[str]  # the whitespace before each piece in the line ("" for the first)
    texts: list[str]
    ids: list[list[int]]
    split_sentences: int  # sentences longer than the translator's max_source_tokens, cut into several pieces


@dataclass
class Batch:
    """What `Translator.translate` reports after each batch."""

    lines: float  # the lines it completes, a line of several pieces counting one part per piece
    sentences: int
    tokens: int  # padded source tokens
    generated: int  # tokens of the best hypotheses
    seconds: float


def load_translator(
    model, options: TranslateOptions | None = None, *, tokenizer=None, lines: int | None = None, **changes
) -> Translator:
    """Load `model` for translation: a folder or a Hub id, or (PyTorch) a model object with its `tokenizer`.

    `options` (`TranslateOptions`; `changes` replace some of them by name) are the commands' options of the same
    names: the decoding ones go on top of the model's generation config (None keeps it). `threads`, when given, sets
    torch's threads (CTranslate2 takes as many). `lines`: how many lines the translator is loaded for, where known
    (None: unknown, as for a service), for `--compile auto` (`backends.uses_static_cache`).
    """
    options = dataclasses.replace(options or TranslateOptions(), **changes).check()
    if options.threads:
        torch.set_num_threads(options.threads)
    device = options.device
    if device is None and process_group()[1] > 1:
        device = str(_accelerate_state().device)  # this process's GPU under accelerate/torchrun, or the CPU
    generation, nbest = options.generation, options.nbest
    if options.backend == "torch":
        backend = load_torch_backend(
            model,
            generation,
            nbest,
            device,
            options.dtype,
            options.int8,
            options.trust_remote_code,
            tokenizer,
            options.compile,
            lines,
        )
    else:
        if options.int8 or options.dtype != "float32" or options.compile == "always":
            raise InputError(
                "--int8, --dtype and --compile are PyTorch options; CTranslate2 takes --compute_type (e.g. int8)."
            )
        backend = load_ctranslate2_backend(
            model, generation, nbest, device, options.compute_type, options.trust_remote_code
        )
    return Translator(backend, options, model=model)


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
    first_line: int = 0,
    progress: Progress | None = None,
) -> Iterator[list[LineTranslation]]:
    """The translations (`Translator.translate`) of each window of `buffer_size` lines, in input order; memory holds
    one window. `max_tokens` and `batch_size` replace the translator's; `first_line` is where `lines` start.
    Under several processes (`accelerate launch`, `torchrun`) every process reads all lines and cuts the same batches,
    translates its share, and the first process yields each window (the others yield empty lists).
    """
    batching = {k: v for k, v in dict(max_tokens=max_tokens, batch_size=batch_size).items() if v is not None}
    translator = translator.variant(**batching) if batching else translator
    group = process_group()
    progress = progress or Progress()
    for index, window in enumerate(windows(lines, buffer_size)):
        window_start, generated = progress.stats.lines, progress.stats.generated_tokens
        translations = translator.translate(
            window,
            scores=scores,
            first_line=first_line + index * buffer_size,
            group=group,
            on_batch=lambda batch: progress.advance(batch.lines, batch.generated),
        )
        if group[0] != 0:
            yield []
            continue
        progress.stats.generated_tokens = generated + sum(
            len(t.hypotheses[0].tokens) for t in translations if t.hypotheses
        )
        progress.stats.lines = window_start + len(window)
        progress.advance(progress.stats.lines - progress.lines, 0)  # blank lines, other processes' batches
        progress.stats.split_sentences += sum(t.split_sentences for t in translations)
        progress.stats.reached_length_limit += sum(h.reached_length_limit for t in translations for h in t.hypotheses)
        yield translations


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
