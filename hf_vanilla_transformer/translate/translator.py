"""Translate big files with any `AutoModelForSeq2SeqLM`: lines split into sentences, streamed, length-sorted
token-budget batches, results in input order, n-best lists with scores, resumable, sharded across processes.

    hf-vanilla-transformer translate --model outputs/demo-de-en input.de --output output.en
    accelerate launch -m hf_vanilla_transformer translate --model ... input.de --output output.en

As a library, load once and decode with any options per call (as CTranslate2's `translate_batch`):
`translator = load_translator(model, EngineOptions(...))`, then `translator.translate(lines, DecodeOptions(...))` (a
list of `LineTranslation`), `translate_lines(lines, translator, options)` (a generator, one window in memory) or
`translate_file(inputs, output, translator, options)`.
"""

import dataclasses
import functools
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import GenerationConfig
from transformers.utils import logging

from ..data.glossary import Glossary
from ..errors import InputError
from ..model.configuration_vanilla_transformer import max_new_tokens_for
from .backends import Hypothesis, kept, load_ctranslate2_backend, load_torch_backend, sequence_score
from .io import (
    FORMATS,
    LineTranslation,
    TextHypothesis,
    check_inputs,
    count_lines,
    format_translation,
    read_lines,
    resume_point,
    save_state,
    windows,
)
from .options import DecodeOptions, EngineOptions, cores
from .sentences import join, segments, split_sentences


logger = logging.get_logger(__name__)

DEFAULT_BUFFER_SIZE = 10_000


class Translator:
    """The translation engine: a backend loaded once with its tokenizer, which decodes with any `DecodeOptions`.

    `translate(lines, options)` is the one call of the file translator, the service, the corpus workers and the demo:
    each line is split into sentences (`split_sentences=False`: a line is one sentence) by the rules of `source_lang`
    (default: the language the model was trained on, as its folder records; see `sentences`), and a sentence longer
    than `max_source_tokens` into pieces that fit: the length the model was trained on where its folder records it
    (`data.trained_on`), else the longest the model and tokenizer accept. The backend cuts the pieces into batches of
    at most `max_tokens` padded source tokens (and `batch_size` sentences) and decodes them with the options' search on
    top of the model's generation config. `prepare`, `run` and `finish` are its three parts, for a caller that shares
    the batches among processes (`translate_windows`).

    The limit follows fairseq's `--max-len-a/--max-len-b`: at most int(a * source tokens + b) new tokens (EOS included
    if the model ends the translation there), where the source tokens include EOS. fairseq applies it per batch with
    the longest source; here every sentence has its own, so results do not depend on what shares the batch. With
    neither set, the model's own limit (its generation config) or else the paper's source length + 50, as generate()
    and the pipeline; b alone means a = 0; a alone keeps the default b. The limit never exceeds what the model can
    generate.
    """

    def __init__(self, backend, engine: EngineOptions | None = None, *, model=None):
        self.backend, self.engine, self.model = backend, engine or EngineOptions(), model
        self.tokenizer, self.trained_on = backend.tokenizer, backend.trained_on
        self.trained_length = self.trained_on.max_source_length
        self.max_source_tokens = backend.max_source_tokens
        self._decodings = {}

    def decoding(self, options: DecodeOptions | Mapping | None = None) -> "Decoding":
        """`options` (a `DecodeOptions`, or a dict of its fields) resolved against the model: its generation config
        with theirs on top, the length rule, the source language; checked before any input is read."""
        if isinstance(options, Mapping):
            options = DecodeOptions(**options)
        elif not isinstance(options, DecodeOptions | None):
            raise TypeError(f"options: expected DecodeOptions or a dict of its fields, got {type(options).__name__}.")
        options = options or DecodeOptions()
        return kept(self._decodings, options, lambda: self._resolve(options))

    def _resolve(self, options: DecodeOptions) -> "Decoding":
        options.check()
        if options.use_vmap:
            self.backend.check_vmap()
        default_a, default_b = self.backend.default_length_rule
        a, b = options.max_len_a, options.max_len_b
        return Decoding(
            options,
            self.backend.generation_config(options.generation, options.nbest),
            (default_a if b is None else 0.0) if a is None else a,
            default_b if b is None else b,
            options.source_lang or self.trained_on.source_lang,
            self._terms(options.loaded_glossary()),
        )

    def _terms(self, glossary: Glossary | None) -> "Terms | None":
        """The glossary with each target term's token ids, checked against the model."""
        if glossary is None:
            return None
        self.backend.check_glossary()
        targets = list(dict.fromkeys(target for _, target in glossary.terms))  # (a glossary has at least one)
        encoded = self.tokenizer(text_target=targets, add_special_tokens=False, verbose=False)["input_ids"]
        longest = self.backend.max_position_embeddings
        for target, ids in zip(targets, encoded):
            if not ids or self.tokenizer.unk_token_id in ids:
                raise InputError(
                    f"{glossary.name}: the target term {shown(target)} has characters that the model's vocabulary "
                    "lacks (its tokenizer makes them unknown tokens): it cannot be written."
                )
            if longest and len(ids) >= longest:
                raise InputError(
                    f"{glossary.name}: the target term {shown(target)} is {len(ids)} tokens, as long as or longer "
                    f"than the model's {longest} target positions."
                )
        return Terms(glossary, dict(zip(targets, encoded)))

    def settings(self, options: DecodeOptions | None = None) -> dict:
        """What decides the output, as resume files record it (a resumed run must decode as the first did)."""
        name = self.model if isinstance(self.model, str) or self.model is None else self.model.name_or_path
        return output_settings(name, self.engine, options or DecodeOptions())

    def translate(
        self,
        lines: list[str],
        options: DecodeOptions | None = None,
        *,
        scores: bool = True,
        first_line: int = 0,
        on_batch: Callable[["Batch"], None] | None = None,
    ) -> list[LineTranslation]:
        """The `LineTranslation` of each line, in order (none for a blank line): its n best with their scores.

        `scores=False` skips the token scores. Sampling seeds each batch from the `seed` option, `first_line` (where
        `lines` start in the input) and the batch's number. `on_batch` is called after each batch.
        """
        if isinstance(lines, str):
            raise TypeError("lines: expected a list of lines, got one string; translate([text]) translates one text.")
        work = self.prepare(lines, options)
        return self.finish(work, self.run(work, scores=scores, first_line=first_line, on_batch=on_batch))

    def prepare(self, lines: list[str], options: DecodeOptions | None = None) -> "Work":
        """The lines' pieces and the backend's batches of them, for `options`."""
        decoding = self.decoding(options)
        encoded = self.encode(lines, decoding.options)
        pieces = [(i, ids) for i, line in enumerate(encoded) for ids in line.ids]
        batches = self.backend.batches(
            [len(ids) for _, ids in pieces], decoding.options.max_tokens, decoding.options.batch_size
        )
        terms = None
        if decoding.terms is not None:
            terms = [decoding.terms.glossary.targets(text) for line in encoded for text in line.texts]
        return Work(lines, decoding, encoded, pieces, batches, terms)

    def run(
        self,
        work: "Work",
        numbers: Iterable[int] | None = None,
        *,
        scores: bool = True,
        first_line: int = 0,
        on_batch: Callable[["Batch"], None] | None = None,
    ) -> dict[int, list[Hypothesis]]:
        """The hypotheses of the pieces of the batches numbered `numbers` (default: all), by piece."""
        decoding, results = work.decoding, {}
        for number in range(len(work.batches)) if numbers is None else numbers:
            batch = work.batches[number]
            sources = [work.pieces[j][1] for j in batch]
            start = time.perf_counter()
            hypotheses = self.backend.generate(
                sources,
                functools.partial(self.limit, decoding=decoding),
                decoding,
                scores=scores,
                seed=decoding.options.seed + 1_000_003 * first_line + number,
                # (only with a glossary: `Backend.check_glossary` says which engines take terms)
                **({} if work.terms is None else {"terms": [decoding.terms.ids(work.terms[j]) for j in batch]}),
            )
            results.update(zip(batch, hypotheses))
            if on_batch is not None:
                on_batch(
                    Batch(
                        lines=sum(1 / len(work.encoded[work.pieces[j][0]].ids) for j in batch),
                        sentences=len(batch),
                        tokens=len(batch) * max(map(len, sources)),
                        generated=sum(len(hs[0].token_ids) for hs in hypotheses if hs),
                        seconds=time.perf_counter() - start,
                    )
                )
        return results

    def finish(self, work: "Work", results: dict[int, list[Hypothesis]]) -> list[LineTranslation]:
        """Each line's translations from its pieces' hypotheses."""
        by_line = [[] for _ in work.lines]
        for j, (i, _) in enumerate(work.pieces):
            by_line[i].append(results[j])
        translations = self.decode(work.lines, work.encoded, by_line, work.decoding)
        if work.terms is not None:  # what each hypothesis lacks of its line's target terms, from its text
            wanted = [[] for _ in work.lines]
            for j, (i, _) in enumerate(work.pieces):
                wanted[i] += work.terms[j]
            for translation, targets in zip(translations, wanted):
                for hypothesis in translation.hypotheses:
                    hypothesis.missing_terms = [t for t in dict.fromkeys(targets) if t not in hypothesis.text]
        return translations

    def limit(self, source_length: int, decoding: "Decoding") -> int:
        """The new-token limit of a source of `source_length` tokens under `decoding`'s length rule."""
        limit = max_new_tokens_for(
            source_length, self.backend.max_position_embeddings, decoding.max_len_a, decoding.max_len_b
        )
        if limit < 1:
            raise InputError(
                f"--max_len_a {decoding.max_len_a} --max_len_b {decoding.max_len_b} allow no token for a source of "
                f"{source_length} tokens: the limit must be at least 1."
            )
        return limit

    def encode(self, lines: list[str], options: DecodeOptions | None = None) -> list["LinePieces"]:
        """Each line's pieces to translate (none for a blank line; see `sentences.segments`)."""
        decoding = self.decoding(options)
        limit, known, source_lang = self.max_source_tokens, {}, decoding.source_lang
        split = decoding.options.split_sentences
        sentences = {s for line in lines for s in (split_sentences(line, source_lang) if split else [line.strip()])}
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
            pieces, too_long = segments(line, fits, source_lang, split)
            texts = [piece for _, piece in pieces]
            encoded.append(LinePieces([separator for separator, _ in pieces], texts, list(map(ids, texts)), too_long))
        return encoded

    def decode(
        self,
        lines: list[str],
        encoded: list["LinePieces"],
        parts: list[list[list[Hypothesis]]],
        decoding: "Decoding",
    ) -> list[LineTranslation]:
        """Each line with the texts of its n best; the k-th hypothesis of a line of several pieces joins its pieces'
        k-th hypotheses with the whitespace between the pieces (`sentences.join`)."""
        flat = [h for line_parts in parts for hypotheses in line_parts for h in hypotheses]
        texts = iter(
            self.tokenizer.batch_decode(
                [h.token_ids for h in flat], skip_special_tokens=True, clean_up_tokenization_spaces=False
            )
        )  # the pipeline's decoding, for the same text
        length_penalty = decoding.length_penalty
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
                        sequence_score(token_scores, length_penalty) if token_scores else None,
                        any(h.reached_limit for h in joined),
                    )
                )
            translations.append(LineTranslation(line, results, len(line_parts), pieces.split_sentences))
        return translations


def output_settings(model: str | None, engine: EngineOptions, decoding: DecodeOptions) -> dict:
    """The model and the options that decide a translation (not where or how fast it runs), as resume records keep
    them."""
    e, d = engine, decoding
    settings = dict(
        model=model, backend=e.backend, generation=d.generation, nbest=d.nbest, max_len_a=d.max_len_a,
        max_len_b=d.max_len_b,
    )  # fmt: skip
    settings.update(dtype=e.dtype, int8=e.int8) if e.backend == "torch" else settings.update(
        compute_type=e.compute_type
    )
    settings.update(split_sentences=d.split_sentences, source_lang=d.source_lang)
    if d.use_vmap:  # (absent otherwise, as from the records of earlier releases)
        settings.update(use_vmap=True, vmap=e.vmap)
    glossary = d.loaded_glossary()
    if glossary is not None:
        terms = f"{len(glossary)} term{'s' * (len(glossary) > 1)}"
        settings.update(glossary=f"{glossary.name} ({terms}, sha256 {glossary.digest})")
    return settings


@dataclass(frozen=True)
class Decoding:
    """`DecodeOptions` resolved against a translator's model (`Translator.decoding`)."""

    options: DecodeOptions
    generation_config: GenerationConfig  # the model's, with the options' search on top
    max_len_a: float
    max_len_b: int
    source_lang: str | None
    terms: "Terms | None" = None

    @property
    def nbest(self) -> int:
        return self.options.nbest

    @property
    def num_beams(self) -> int:
        return self.generation_config.num_beams or 1

    @property
    def length_penalty(self) -> float:
        return 1.0 if self.generation_config.length_penalty is None else self.generation_config.length_penalty


def shown(text: str, width: int = 60) -> str:
    """`text` quoted, cut to `width` characters for a message."""
    return repr(text if len(text) <= width else text[: width - 3] + "...")


@dataclass(frozen=True)
class Terms:
    """A glossary with the token ids of its target terms (`Translator.decoding`)."""

    glossary: Glossary
    target_ids: dict[str, list[int]]

    def ids(self, targets: list[str]) -> list[list[int]]:
        return [self.target_ids[target] for target in targets]


@dataclass
class LinePieces:
    """What of a line goes to the model: its pieces (sentences, or parts of a sentence too long for the model)."""

    separators: list[str]  # the whitespace before each piece in the line ("" for the first)
    texts: list[str]
    ids: list[list[int]]
    split_sentences: int  # sentences longer than the translator's max_source_tokens, cut into several pieces


@dataclass
class Work:
    """Lines ready to decode (`Translator.prepare`): their pieces and the batches of those, by piece number."""

    lines: list[str]
    decoding: Decoding
    encoded: list[LinePieces]
    pieces: list[tuple[int, list[int]]]  # (line, source ids)
    batches: list[list[int]]
    terms: list[list[str]] | None = None  # with a glossary: each piece's target terms


@dataclass
class Batch:
    """What `Translator.translate` reports after each batch."""

    lines: float  # the lines it completes, a line of several pieces counting one part per piece
    sentences: int
    tokens: int  # padded source tokens
    generated: int  # tokens of the best hypotheses
    seconds: float


def load_translator(
    model, engine: EngineOptions | None = None, *, tokenizer=None, lines: int | None = None, **changes
) -> Translator:
    """Load `model` for translation, once: a folder or a Hub id, or (PyTorch) a model object with its `tokenizer`.

    `engine` (`EngineOptions`; `changes` replace some of them by name) are the commands' engine options. `threads`,
    when given, sets torch's threads (CTranslate2 takes as many). `lines`: how many lines the translator is loaded for,
    where known (None: unknown, as for a service), for `--compile auto` (`backends.uses_static_cache`).
    """
    decoding = sorted(set(changes) & {f.name for f in dataclasses.fields(DecodeOptions)})
    if decoding:
        raise TypeError(
            f"load_translator takes the engine's options; {', '.join(decoding)} decode: pass them to each call, "
            f"translator.translate(lines, DecodeOptions({decoding[0]}=...))."
        )
    engine = dataclasses.replace(engine or EngineOptions(), **changes).check()
    if engine.threads and engine.threads > cores():
        # More threads than cores only wait for each other (OpenMP's threads spin at every barrier).
        logger.warning(f"--threads {engine.threads}: this machine has {cores()} cores; the engine runs {cores()}.")
        engine = dataclasses.replace(engine, threads=cores())
    if engine.threads:
        torch.set_num_threads(engine.threads)
    device = engine.device
    if device is None and process_group()[1] > 1:
        device = str(_accelerate_state().device)  # this process's GPU under accelerate/torchrun, or the CPU
    if engine.backend == "torch":
        backend = load_torch_backend(
            model, device, engine.dtype, engine.int8, engine.trust_remote_code, tokenizer, engine.compile, lines,
            engine.vmap,
        )  # fmt: skip
    else:
        if engine.int8 or engine.dtype != "float32" or engine.compile == "always":
            raise InputError(
                "--int8, --dtype and --compile are PyTorch options; CTranslate2 takes --compute_type (e.g. int8)."
            )
        backend = load_ctranslate2_backend(model, device, engine.compute_type, engine.trust_remote_code, engine.vmap)
    return Translator(backend, engine, model=model)


# ------------------------------------------------------------------------------------------------- translating


@dataclass
class TranslationStats:
    lines: int = 0
    generated_tokens: int = 0  # of the best hypotheses
    split_sentences: int = 0  # longer than the translator's max_source_tokens, translated in pieces
    reached_length_limit: int = 0  # hypotheses
    missing_terms: int = 0  # lines whose best translation lacks a glossary's term that did not fit
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
    options: DecodeOptions | None = None,
    *,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    scores: bool = True,
    first_line: int = 0,
    progress: Progress | None = None,
) -> Iterator[list[LineTranslation]]:
    """The translations (`Translator.translate` with `options`) of each window of `buffer_size` lines, in input
    order; memory holds one window. `first_line` is where `lines` start. Under several processes (`accelerate launch`,
    `torchrun`) every process reads all lines and cuts the same batches, process r translates batches r, r + size, ...,
    and the first process gathers them and yields each window (the others yield empty lists).
    """
    rank, world = process_group()
    progress = progress or Progress()
    for index, window in enumerate(windows(lines, buffer_size)):
        window_start, generated = progress.stats.lines, progress.stats.generated_tokens
        work = translator.prepare(window, options)
        results = translator.run(
            work,
            range(rank, len(work.batches), world),
            scores=scores,
            first_line=first_line + index * buffer_size,
            on_batch=lambda batch: progress.advance(batch.lines, batch.generated),
        )
        if world > 1:
            gathered = [None] * world if rank == 0 else None
            torch.distributed.gather_object(results, gathered, dst=0)
            if rank != 0:
                yield []
                continue
            results = {k: v for part in gathered for k, v in part.items()}
        translations = translator.finish(work, results)
        progress.stats.generated_tokens = generated + sum(
            len(t.hypotheses[0].tokens) for t in translations if t.hypotheses
        )
        progress.stats.lines = window_start + len(window)
        progress.advance(progress.stats.lines - progress.lines, 0)  # blank lines, other processes' batches
        progress.stats.split_sentences += sum(t.split_sentences for t in translations)
        progress.stats.reached_length_limit += sum(h.reached_length_limit for t in translations for h in t.hypotheses)
        progress.stats.missing_terms += sum(bool(t.hypotheses and t.hypotheses[0].missing_terms) for t in translations)
        yield translations


def translate_lines(
    lines: Iterable[str], translator: Translator, options: DecodeOptions | None = None, **kwargs
) -> Iterator[LineTranslation]:
    """One `LineTranslation` per input line, in order; keyword arguments as for `translate_windows`."""
    for window in translate_windows(lines, translator, options, **kwargs):
        yield from window


def translate_file(
    inputs: list[str],
    output: str | None,
    translator: Translator,
    options: DecodeOptions | None = None,
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
    options = translator.decoding(options).options  # checked before anything is read or written
    if output_format == "text" and options.nbest > 1:
        raise InputError(f"--nbest {options.nbest} needs --format jsonl or fairseq: text has one line per input.")
    to_file = output not in (None, "-")
    if resume and not to_file:
        raise InputError("--resume needs --output FILE: standard output cannot be continued.")
    check_inputs(inputs)
    if to_file and any(path != "-" and Path(path).resolve() == Path(output).resolve() for path in inputs):
        raise InputError(f"--output {output} is also an input: writing would destroy it.")
    state_path = Path(f"{output}.progress") if to_file else None
    done, size = resume_point(Path(output), state_path, translator.settings(options), resume) if to_file else (0, 0)
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
            save_state(state_path, done, size, translator.settings(options))
        else:
            writer = sys.stdout.buffer
    lines = itertools.islice(read_lines(inputs), done, None)
    try:
        for window in translate_windows(
            lines, translator, options, scores=output_format != "text", first_line=done, progress=progress, **kwargs
        ):
            if rank != 0:
                continue
            text = "".join(format_translation(done + i, t, output_format) for i, t in enumerate(window))
            writer.write(text.encode("utf-8"))
            writer.flush()
            done += len(window)
            if to_file:
                os.fsync(writer.fileno())
                save_state(state_path, done, writer.tell(), translator.settings(options))
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
    if stats.missing_terms:
        logger.warning(
            f"{stats.missing_terms} line(s) lack glossary terms that did not fit within the length limit (jsonl: "
            "missing_terms); raise --max_len_a/--max_len_b to make room for them."
        )
