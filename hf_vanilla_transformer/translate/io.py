"""Files and records of `hf_vanilla_transformer.translate.translator`: reading inputs line by line with errors that
name the file and line, length-sorted batches, the output formats, and the resume state."""

import json
import math
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..data.folders import write_whole
from ..errors import InputError


FORMATS = ("text", "jsonl", "fairseq")


@dataclass
class TextHypothesis:
    text: str
    tokens: list[str]  # subword tokens, EOS included when the model ended the translation
    token_scores: list[float]  # natural-log probability of each token
    score: float | None  # sum(token_scores) / len(tokens) ** length_penalty, beam search's ranking score
    reached_length_limit: bool
    missing_terms: list[str] = field(default_factory=list)  # a glossary's target terms that did not fit


@dataclass
class LineTranslation:
    source: str
    hypotheses: list[TextHypothesis]  # the n best; none for a blank line
    parts: int  # pieces translated: 0 for a blank line, more than 1 for several sentences or a sentence split to fit
    split_sentences: int = 0  # sentences longer than the model takes, translated in pieces


# ------------------------------------------------------------------------------------------------------- input


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


def count_lines(paths: list[str]) -> int | None:
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


def windows(lines: Iterable[str], size: int) -> Iterator[list[str]]:
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


# ----------------------------------------------------------------------------------------------------- batches


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


# ------------------------------------------------------------------------------------------------------ output


def format_translation(line_id: int, translation: LineTranslation, output_format: str) -> str:
    """The output of one input line, ending with a newline.

    `text`: the best translation on one line (empty for a blank line). `jsonl`: one JSON object per input line.
    `fairseq`: fairseq-generate's layout, S-id (source), then per hypothesis H-id (score, subword tokens), D-id (score,
    text) and P-id (the tokens' scores), scores in base 2 as fairseq prints them. Newlines inside a translation become
    spaces.
    """
    if output_format == "text":
        return (translation.hypotheses[0].text if translation.hypotheses else "").replace("\n", " ") + "\n"
    if output_format == "jsonl":
        record = {
            "id": line_id,
            "source": translation.source,
            "hypotheses": [_record(h) for h in translation.hypotheses],
        }
        if translation.parts > 1:
            record["parts"] = translation.parts
        return json.dumps(record, ensure_ascii=False) + "\n"
    lines = [f"S-{line_id}\t{translation.source}"]
    for h in translation.hypotheses:
        score = _base2(h.score)
        lines += [
            f"H-{line_id}\t{score}\t{' '.join(h.tokens)}",
            f"D-{line_id}\t{score}\t{h.text}",
            f"P-{line_id}\t{' '.join(f'{_base2(s):.4f}' for s in h.token_scores)}",
        ]
    return "".join(line.replace("\n", " ") + "\n" for line in lines)


def _base2(score: float | None) -> float | None:
    return None if score is None or math.isnan(score) else score / math.log(2)


def _rounded(score: float | None) -> float | None:
    return None if score is None or math.isnan(score) else round(score, 4)


def _record(h: TextHypothesis) -> dict:
    return {
        "text": h.text,
        "score": _rounded(h.score),
        "tokens": h.tokens,
        "token_scores": [_rounded(s) for s in h.token_scores],
        "reached_length_limit": h.reached_length_limit,
    } | ({"missing_terms": h.missing_terms} if h.missing_terms else {})


# ------------------------------------------------------------------------------------------------ resume state


def resume_point(output: Path, state_path: Path, settings: dict, resume: bool) -> tuple[int, int]:
    """(input lines done, output bytes to keep) for this run, after checking that resuming is what is asked."""
    if not resume:
        if state_path.exists():
            raise InputError(
                f"{state_path} shows that an earlier run into {output} was interrupted: add --resume to continue it, "
                "or delete that file to start over."
            )
        return 0, 0
    if not state_path.exists():
        if output.exists() and output.stat().st_size:
            raise InputError(f"Nothing to resume: {output} exists but has no {state_path.name} (the run finished?).")
        return 0, 0
    state = json.loads(state_path.read_text())
    changed = differences(state["settings"], settings)
    if changed:
        options, earlier, now = changed
        raise InputError(
            f"--resume: {options} from the interrupted run's ({state_path}): it had {earlier}, this run {now}; rerun "
            "with its settings."
        )
    if output.stat().st_size < state["bytes"]:
        raise InputError(f"--resume: {output} is shorter than {state_path} records; it was changed since.")
    return state["lines"], state["bytes"]


def save_state(path: Path, lines: int, size: int, settings: dict) -> None:
    """Record that `lines` input lines are done and written in the first `size` bytes of the output."""
    write_whole(path, json.dumps({"lines": lines, "bytes": size, "settings": settings}))


# Record keys that are not their option's name.
OPTION_NAMES = {"inputs": "input"}


def differences(earlier: dict, now: dict) -> tuple[str, str, str] | None:
    """How two runs' records (settings, nested) differ, named as the options a user gives: ("--num_beams differs",
    "--num_beams 5", "--num_beams 4"); None where they agree."""
    earlier, now = _flat(earlier), _flat(now)
    changed = sorted(key for key in earlier.keys() | now.keys() if earlier.get(key) != now.get(key))
    if not changed:
        return None
    options = [f"--{OPTION_NAMES.get(key, key)}" for key in changed]
    what = f"{' and '.join(options)} differ" + ("s" if len(options) == 1 else "")
    return tuple(
        [what] + [", ".join(f"{o} {_value(run.get(k))}" for o, k in zip(options, changed)) for run in (earlier, now)]
    )


def _flat(record: dict) -> dict:
    """A record whose nested records (the decoding's generation settings) are merged into it."""
    flat = {}
    for key, value in record.items():
        flat.update(_flat(value) if isinstance(value, dict) else {key: value})
    return flat


def _value(value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, list):  # input files
        return " ".join(map(str, value)) if len(value) <= 3 else f"{value[0]} ... ({len(value):,} files)"
    return str(value)
