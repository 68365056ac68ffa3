"""Translate big files with any `AutoModelForSeq2SeqLM`: streamed, length-sorted token-budget batches, results in
input order, n-best lists with scores, resumable, sharded across processes.

    hf-vanilla-transformer translate --model outputs/demo-de-en input.de --output output.en
    python -m hf_vanilla_transformer.translate --model outputs/demo-de-en < input.de > output.en
    accelerate launch -m hf_vanilla_transformer.translate --model ... input.de --output output.en

As a library: `load_translator(...)`, then `translate_lines(lines, translator)` (a generator of `LineTranslation`) or
`translate_file(inputs, output, translator)`.
"""

import argparse
import itertools
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers.utils import logging

from .translation_backends import Hypothesis, load_ctranslate2_backend, load_torch_backend, sequence_score


logger = logging.get_logger(__name__)

FORMATS = ("text", "jsonl", "fairseq")
DEFAULT_MAX_TOKENS = 3000
DEFAULT_BUFFER_SIZE = 10_000
# A sentence ends at . ! ? or an ellipsis and any closing quotes or brackets, followed by a space (CJK stops: or not).
CLOSING = "\"'”’»)\\]」』）"
SENTENCE_END = re.compile(rf"[.!?…][{CLOSING}]*\s+|[。！？][{CLOSING}]*\s*")


class InputError(ValueError):
    """A problem with an input file, naming the file and, where there is one, the line."""


@dataclass
class TextHypothesis:
    text: str
    tokens: list[str]  # subword tokens, EOS included when the model ended the translation
    token_scores: list[float]  # natural-log probability of each token
    score: float  # sum(token_scores) / len(tokens) ** length_penalty, beam search's ranking score
    reached_length_limit: bool


@dataclass
class LineTranslation:
    source: str
    hypotheses: list[TextHypothesis]  # nbest of them; none for an empty line
    parts: int  # translated pieces: 0 for an empty line, more than 1 for a line split to fit the model


@dataclass
class TranslationStats:
    lines: int = 0
    generated_tokens: int = 0
    split_lines: int = 0
    reached_length_limit: int = 0
    seconds: float = 0.0


class Translator:
    """A backend with its tokenizer, the n-best size and the length limit per sentence.

    The limit follows fairseq's `--max-len-a/--max-len-b`: at most int(a * source tokens + b) new tokens (EOS included
    if the model ends the translation there), where the source tokens include EOS. fairseq applies it per batch with
    the longest source; here every sentence has its own, so results do not depend on what shares the batch. a
    defaults to 0 and b to the model's own limit (its generation config), and the limit never exceeds what the model
    can generate.
    """

    def __init__(self, backend, max_len_a: float = 0.0, max_len_b: int | None = None, settings: dict | None = None):
        if max_len_a < 0 or (max_len_b is not None and max_len_b < 0):
            raise ValueError(f"--max_len_a and --max_len_b must be >= 0, got {max_len_a} and {max_len_b}.")
        self.backend, self.tokenizer, self.nbest = backend, backend.tokenizer, backend.nbest
        self.max_len_a = max_len_a
        self.max_len_b = backend.default_new_tokens if max_len_b is None else max_len_b
        self.settings = settings or {}

    def limit(self, source_length: int) -> int:
        limit = int(self.max_len_a * source_length + self.max_len_b)
        if limit < 1:
            raise ValueError(
                f"--max_len_a {self.max_len_a} --max_len_b {self.max_len_b} allow no token for a source of "
                f"{source_length} tokens: the limit must be at least 1."
            )
        cap = self.backend.max_new_tokens
        return limit if cap is None else min(limit, cap)

    def encode(self, lines: list[str]) -> list[list[list[int]]]:
        """Per line, its token ids in pieces that fit the model: one piece, none for a blank line, more for a line
        longer than the model accepts (see `split_to_fit`)."""
        limit = self.backend.input_limit
        pieces = []
        for line, ids in zip(lines, self.tokenizer(lines)["input_ids"]):
            if not line.strip():
                pieces.append([])
            elif limit is None or len(ids) <= limit:
                pieces.append([ids])
            else:
                parts = split_to_fit(line, lambda piece: len(self.tokenizer(piece)["input_ids"]) <= limit)
                pieces.append(self.tokenizer(parts)["input_ids"])
        return pieces

    def hypotheses(self, parts: list[list[Hypothesis]]) -> list[TextHypothesis]:
        """Texts of the n best; a split line's k-th hypothesis joins the k-th hypotheses of its parts."""
        results = []
        for joined in zip(*parts):
            ids = [i for h in joined for i in h.token_ids]
            token_scores = [s for h in joined for s in h.token_scores]
            texts = self.tokenizer.batch_decode(
                [h.token_ids for h in joined], skip_special_tokens=True, clean_up_tokenization_spaces=False
            )
            score = sequence_score(token_scores, self.backend.length_penalty) if token_scores else None
            results.append(
                TextHypothesis(
                    " ".join(texts),
                    self.tokenizer.convert_ids_to_tokens(ids),
                    token_scores,
                    score,
                    any(h.reached_limit for h in joined),
                )
            )
        return results


def load_translator(
    model,
    *,
    tokenizer=None,
    backend: str = "torch",
    generation: dict | None = None,
    nbest: int = 1,
    max_len_a: float = 0.0,
    max_len_b: int | None = None,
    device: str | None = None,
    dtype: str = "float32",
    int8: bool = False,
    compute_type: str = "default",
    trust_remote_code: bool = False,
) -> Translator:
    """Load `model` for translation: a folder or a Hub id, or (PyTorch) a model object with its `tokenizer`.

    `generation` overrides its generation config (`num_beams`, `length_penalty`, `do_sample`, `temperature`, `top_k`,
    `top_p`, ...; None values are ignored). The other arguments are the command's options of the same names.
    """
    if nbest < 1:
        raise ValueError(f"--nbest must be at least 1, got {nbest}.")
    generation = {k: v for k, v in (generation or {}).items() if v is not None}
    if device is None and _process_group()[1] > 1:
        device = str(_accelerate_state().device)  # this process's GPU under accelerate/torchrun, or the CPU
    if backend == "torch":
        engine = load_torch_backend(model, generation, nbest, device, dtype, int8, trust_remote_code, tokenizer)
    elif backend == "ctranslate2":
        if int8 or dtype != "float32":
            raise ValueError("--int8 and --dtype are PyTorch options; CTranslate2 takes --compute_type (e.g. int8).")
        engine = load_ctranslate2_backend(model, generation, nbest, device, compute_type, trust_remote_code)
    else:
        raise ValueError(f"--backend must be 'torch' or 'ctranslate2', got {backend!r}.")
    name = model if isinstance(model, str) else model.name_or_path
    settings = dict(
        model=name, backend=backend, generation=generation, nbest=nbest, max_len_a=max_len_a, max_len_b=max_len_b
    )
    settings.update(dtype=dtype, int8=int8) if backend == "torch" else settings.update(compute_type=compute_type)
    return Translator(engine, max_len_a, max_len_b, settings)


# ------------------------------------------------------------------------------------------ input and splitting


def check_inputs(paths: list[str]) -> None:
    """Fail before loading a model when an input file cannot be read."""
    for path in paths:
        if path == "-":
            continue
        if not os.path.exists(path):
            raise InputError(f"{path}: no such input file.")
        if not os.path.isfile(path):
            raise InputError(f"{path}: not a file.")
        try:
            open(path, "rb").close()
        except OSError as error:
            raise InputError(f"{path}: cannot be read ({error.strerror}).") from None


def read_lines(paths: list[str]) -> Iterator[str]:
    """The lines of `paths` in order ("-" is standard input), decoded as UTF-8, without their line endings.

    Bytes are split at "\\n" only, so a line is what `wc -l` counts; a byte-order mark at the start is dropped.
    """
    for path in paths:
        name = "<stdin>" if path == "-" else path
        handle = sys.stdin.buffer if path == "-" else open(path, "rb")
        number = 0
        try:
            for number, raw in enumerate(handle, 1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise InputError(
                        f"{name}:{number}: invalid UTF-8 (byte 0x{raw[error.start]:02x} at byte {error.start + 1} "
                        "of the line); the input must be UTF-8 text."
                    ) from None
                yield (text[1:] if number == 1 and text.startswith("\ufeff") else text).rstrip("\r\n")
        except OSError as error:
            raise InputError(f"{name}:{number + 1}: read error ({error}).") from None
        finally:
            if handle is not sys.stdin.buffer:
                handle.close()


def split_to_fit(text: str, fits) -> list[str]:
    """Pieces of `text` that each `fits`: as many whole sentences as fit, then whole words, then characters for a
    word too long by itself. Each piece is the longest that fits, found by bisection (a few tokenizer calls per
    piece); pieces are slices of `text`, so their spacing is the original's."""
    return [piece for piece in _split(text, fits, 0) if piece]


UNITS = (  # sentences, words, characters: each a list of slices that concatenate to the text
    lambda text: [text[i:j] for i, j in _bounds(text) if i < j],
    lambda text: re.findall(r"\s*\S+\s*", text),
    list,
)


def _bounds(text: str):
    ends = [m.end() for m in SENTENCE_END.finditer(text)]
    return zip([0, *ends], [*ends, len(text)])


def _split(text: str, fits, level: int) -> list[str]:
    if fits(text.strip()):
        return [text.strip()]
    if level == len(UNITS):
        raise ValueError(f"Cannot split {text!r} into pieces that the model accepts.")
    units = UNITS[level](text)
    if len(units) <= 1:
        return _split(text, fits, level + 1)
    pieces, start = [], 0
    while start < len(units):
        low, high = start + 1, len(units)  # the largest end with fits(units[start:end]); at least one unit
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if fits("".join(units[start:middle]).strip()) else (low, middle - 1)
        pieces += _split("".join(units[start:low]), fits, level + 1)
        start = low
    return pieces


def make_batches(lengths: list[int], max_tokens: int | None, batch_size: int | None) -> list[list[int]]:
    """Indices sorted by length, longest first (a batch too big for memory fails at once, not hours in), cut so that
    a batch's padded size (sentences x longest) stays within `max_tokens` and its size within `batch_size`."""
    batches, batch = [], []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if batch and (
            (max_tokens and (len(batch) + 1) * lengths[batch[0]] > max_tokens)
            or (batch_size and len(batch) >= batch_size)
        ):
            batches.append(batch)
            batch = []
        batch.append(i)
    return batches + [batch] if batch else batches


# ------------------------------------------------------------------------------------------------- translating


@dataclass
class _Progress:
    bar: object = None
    stats: TranslationStats = field(default_factory=TranslationStats)
    start: float = field(default_factory=time.perf_counter)
    lines: float = 0.0

    def advance(self, lines: float, generated_tokens: int):
        self.lines += lines
        self.stats.generated_tokens += generated_tokens
        if self.bar is not None:
            self.bar.update(int(self.lines) - self.bar.n)
            self.bar.set_postfix_str(f"{self.stats.generated_tokens / (time.perf_counter() - self.start):.0f} tok/s")


def _process_group() -> tuple[int, int]:
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


def _windows(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    """Lists of `size` lines; on an input error, the lines read before it come first, then the error."""
    window, error = [], None
    try:
        for line in lines:
            window.append(line)
            if len(window) == size:
                yield window
                window = []
    except InputError as caught:
        error = caught
    if window:
        yield window
    if error is not None:
        raise error


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
    progress: _Progress | None = None,
) -> Iterator[list[LineTranslation]]:
    """The translations of each window of `buffer_size` lines, in input order (memory holds one window).

    Under several processes every process reads all lines and cuts the same batches; process r translates batches
    r, r + world, ... and the first process gathers the window and yields it (the others yield empty lists).
    """
    if max_tokens is None and batch_size is None:
        max_tokens = DEFAULT_MAX_TOKENS
    rank, world = _process_group()
    progress = progress or _Progress()
    for index, window in enumerate(_windows(lines, buffer_size)):
        pieces = translator.encode(window)
        segments = [(i, ids) for i, line_pieces in enumerate(pieces) for ids in line_pieces]
        batches = make_batches([len(ids) for _, ids in segments], max_tokens, batch_size)
        results, window_start = {}, progress.stats.lines
        for number, batch in enumerate(batches):
            if number % world != rank:
                continue
            sources = [segments[j][1] for j in batch]
            hypotheses = translator.backend.generate(
                sources,
                [translator.limit(len(s)) for s in sources],
                scores=scores,
                seed=seed + 1_000_003 * (first_line + index * buffer_size) + number,  # the same for any process count
            )
            results.update(zip(batch, hypotheses))
            # A split line counts as done in fractions, one per part.
            progress.advance(sum(1 / len(pieces[segments[j][0]]) for j in batch), _generated(hypotheses))
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
        for j, (i, _) in enumerate(segments):
            by_line[i].append(results[j])
        translations = [
            LineTranslation(line, translator.hypotheses(parts) if parts else [], len(parts))
            for line, parts in zip(window, by_line)
        ]
        progress.stats.lines = window_start + len(window)
        progress.advance(progress.stats.lines - progress.lines, 0)  # empty lines and other processes' batches
        progress.stats.split_lines += sum(t.parts > 1 for t in translations)
        progress.stats.reached_length_limit += sum(h.reached_length_limit for t in translations for h in t.hypotheses)
        yield translations


def _generated(hypotheses) -> int:
    """New tokens of the best hypotheses, for the progress bar's tokens/s."""
    return sum(len(hs[0].token_ids) for hs in hypotheses if hs)


def translate_lines(lines: Iterable[str], translator: Translator, **kwargs) -> Iterator[LineTranslation]:
    """One `LineTranslation` per input line, in order; keyword arguments as for `translate_windows`."""
    for window in translate_windows(lines, translator, **kwargs):
        yield from window


# ---------------------------------------------------------------------------------------------------- output


def format_translation(line_id: int, translation: LineTranslation, output_format: str) -> str:
    """`text`: the best translation on one line. `jsonl`: one JSON object per input line. `fairseq`: fairseq-generate's
    S-/H-/D-/P- lines (H: subword tokens, D: text, both after the score; scores in base 2 as fairseq prints them)."""
    if output_format == "text":
        return (translation.hypotheses[0].text if translation.hypotheses else "").replace("\n", " ") + "\n"
    if output_format == "jsonl":
        record = {
            "id": line_id,
            "source": translation.source,
            "hypotheses": [_as_json(h) for h in translation.hypotheses],
        }
        if translation.parts > 1:
            record["parts"] = translation.parts
        return json.dumps(record, ensure_ascii=False) + "\n"
    out = [f"S-{line_id}\t{translation.source}\n"]
    for h in translation.hypotheses:
        score = _base2(h.score)
        out.append(f"H-{line_id}\t{score}\t{' '.join(h.tokens)}\n".replace("\n", " ").rstrip() + "\n")
        out.append(f"D-{line_id}\t{score}\t{h.text}".replace("\n", " ") + "\n")
        out.append(f"P-{line_id}\t{' '.join(f'{_base2(s):.4f}' for s in h.token_scores)}\n")
    return "".join(out)


def _base2(score: float | None) -> float | None:
    return None if score is None or math.isnan(score) else score / math.log(2)


def _as_json(h: TextHypothesis) -> dict:
    def rounded(x):
        return None if x is None or math.isnan(x) else round(x, 4)

    return {
        "text": h.text,
        "score": rounded(h.score),
        "tokens": h.tokens,
        "token_scores": [rounded(s) for s in h.token_scores],
        "reached_length_limit": h.reached_length_limit,
    }


def _count_lines(paths: list[str]) -> int | None:
    """Lines in the input files (a last line without a newline counts), for the progress bar; None for stdin."""
    if "-" in paths:
        return None
    total = 0
    for path in paths:
        last = b"\n"
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                total, last = total + block.count(b"\n"), block[-1:]
        total += last != b"\n"
    return total


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
    continues after those lines, so an interrupted run loses and repeats nothing. The progress file is removed when the
    run completes. Keyword arguments are `translate_windows`'s.
    """
    inputs = list(inputs or ["-"])
    if output_format not in FORMATS:
        raise ValueError(f"--format must be one of {FORMATS}, got {output_format!r}.")
    if output_format == "text" and translator.nbest > 1:
        raise ValueError(
            f"--nbest {translator.nbest} needs --format jsonl or fairseq: text has one line per input line."
        )
    to_file = output not in (None, "-")
    if resume and not to_file:
        raise ValueError("--resume needs --output FILE: standard output cannot be continued.")
    check_inputs(inputs)
    state_path = Path(f"{output}.progress") if to_file else None
    done, size = (_resume_point(Path(output), state_path, translator.settings, resume)) if to_file else (0, 0)
    rank, world = _process_group()
    if world > 1:
        torch.distributed.barrier()  # every process has checked before the first one writes
    progress = _Progress(lines=done)
    progress.stats.lines = done
    writer = None
    if rank == 0:
        progress.bar = None if quiet else _progress_bar(_count_lines(inputs), done)
        if to_file:
            writer = open(output, "r+b" if done or size else "wb")
            writer.truncate(size)
            writer.seek(size)
            _save_state(state_path, done, size, translator.settings)
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
                _save_state(state_path, done, writer.tell(), translator.settings)
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
        _warn(stats)
    return stats


def _resume_point(output: Path, state_path: Path, settings: dict, resume: bool) -> tuple[int, int]:
    """(input lines done, output bytes to keep) for this run, after checking that resuming is what is asked."""
    if not resume:
        if state_path.exists():
            raise ValueError(
                f"{state_path} shows that an earlier run into {output} was interrupted: add --resume to continue it, "
                "or delete that file to start over."
            )
        return 0, 0
    if not state_path.exists():
        if output.exists() and output.stat().st_size:
            raise ValueError(f"Nothing to resume: {output} exists but has no {state_path.name} (the run finished?).")
        return 0, 0
    state = json.loads(state_path.read_text())
    changed = sorted(k for k in set(state["settings"]) | set(settings) if state["settings"].get(k) != settings.get(k))
    if changed:
        raise ValueError(
            f"--resume: {', '.join(changed)} differ from the interrupted run's ({state_path}); rerun with its settings."
        )
    if output.stat().st_size < state["bytes"]:
        raise ValueError(f"--resume: {output} is shorter than {state_path} records; it was changed since.")
    return state["lines"], state["bytes"]


def _save_state(path: Path, lines: int, size: int, settings: dict) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({"lines": lines, "bytes": size, "settings": settings}))
    os.replace(temporary, path)  # atomic: the state is the old one or the new one, never half-written


def _progress_bar(total: int | None, done: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, unit="sent", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)


def _warn(stats: TranslationStats) -> None:
    if stats.split_lines:
        logger.warning(
            f"{stats.split_lines} line(s) were longer than the model accepts: each was split at sentence boundaries "
            "(or, for a sentence too long by itself, between words), translated in parts and joined."
        )
    if stats.reached_length_limit:
        logger.warning(
            f"{stats.reached_length_limit} hypothesis(es) stopped at the length limit before the model ended them "
            "(jsonl: reached_length_limit); raise --max_len_a/--max_len_b to allow longer translations."
        )


# ------------------------------------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "inputs", nargs="*", metavar="FILE", help="input files, one sentence per line (default: stdin)"
    )
    parser.add_argument("--model", required=True, help="model folder or Hub id (any AutoModelForSeq2SeqLM)")
    parser.add_argument("--output", help="output file (default: stdout)")
    parser.add_argument("--format", default="text", choices=FORMATS, dest="output_format")
    parser.add_argument("--nbest", type=int, default=1, help="hypotheses per line (jsonl and fairseq formats)")
    decoding = parser.add_argument_group("decoding (default: the model's generation config)")
    decoding.add_argument("--num_beams", type=int)
    decoding.add_argument("--length_penalty", type=float)
    decoding.add_argument("--do_sample", action=argparse.BooleanOptionalAction, default=None)
    decoding.add_argument("--temperature", type=float)
    decoding.add_argument("--top_k", type=int)
    decoding.add_argument("--top_p", type=float)
    decoding.add_argument("--seed", type=int, default=0, help="sampling seed (each batch is seeded from it)")
    decoding.add_argument("--max_len_a", type=float, default=0.0, help="new tokens <= a * source tokens + b")
    decoding.add_argument("--max_len_b", type=int, help="(default: the model's limit)")
    batching = parser.add_argument_group("batching")
    batching.add_argument(
        "--max_tokens", type=int, help=f"padded source tokens per batch (default {DEFAULT_MAX_TOKENS})"
    )
    batching.add_argument("--batch_size", type=int, help="sentences per batch")
    batching.add_argument("--buffer_size", type=int, default=DEFAULT_BUFFER_SIZE, help="lines read and sorted at once")
    engine = parser.add_argument_group("engine")
    engine.add_argument("--backend", default="torch", choices=("torch", "ctranslate2"))
    engine.add_argument("--device", help="torch device, or ctranslate2's cpu/cuda (default: cuda when available)")
    engine.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    engine.add_argument("--int8", action="store_true", help="dynamic int8 quantization of the linear layers (CPU)")
    engine.add_argument("--compute_type", default="default", help="ctranslate2 compute type (int8, float16, ...)")
    engine.add_argument("--trust_remote_code", action="store_true")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run into the same --output")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run a parsed `translate` command; errors in the input, the model or the settings print one line, exit 1."""
    if args.quiet:
        logging.disable_progress_bar()
    try:
        check_inputs(args.inputs or ["-"])
        translator = load_translator(
            args.model,
            backend=args.backend,
            generation=dict(
                num_beams=args.num_beams,
                length_penalty=args.length_penalty,
                do_sample=args.do_sample,
                temperature=args.temperature,
                top_k=args.top_k,
                top_p=args.top_p,
            ),
            nbest=args.nbest,
            max_len_a=args.max_len_a,
            max_len_b=args.max_len_b,
            device=args.device,
            dtype=args.dtype,
            int8=args.int8,
            compute_type=args.compute_type,
            trust_remote_code=args.trust_remote_code,
        )
        translate_file(
            args.inputs,
            args.output,
            translator,
            output_format=args.output_format,
            resume=args.resume,
            quiet=args.quiet,
            max_tokens=args.max_tokens,
            batch_size=args.batch_size,
            buffer_size=args.buffer_size,
            seed=args.seed,
        )
    except (ValueError, OSError, ImportError) as error:
        print(f"translate: error: {error}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hf_vanilla_transformer.translate", description=__doc__.split("\n")[0]
    )
    return run(add_arguments(parser).parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
