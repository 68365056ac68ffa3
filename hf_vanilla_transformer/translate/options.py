"""The translation options, declared once: what `translate`, `serve` and `translate-corpus` accept on their command
lines, with their defaults and help. `EngineOptions` are what loading a model needs (`load_translator`);
`DecodeOptions` what one call of the engine decodes with (`Translator.translate`), as CTranslate2 separates
`Translator(...)` from `translate_batch(..., beam_size=...)`.

    engine, decoding = EngineOptions(backend="ctranslate2"), DecodeOptions(num_beams=5, max_tokens=2000)
    add_arguments(parser)                       # --backend, --num_beams, --max_tokens, ... in their groups
    args = parser.parse_args()
    engine, decoding = EngineOptions.of(args), DecodeOptions.of(args)
"""

import argparse
import functools
import math
import os
from dataclasses import dataclass, field, fields, replace

from ..data.glossary import Glossary
from ..errors import InputError, check_at_least, import_extra


DEFAULT_MAX_TOKENS = 3000
DEFAULT_SHARD_ROWS = 10_000  # translate-corpus's input rows per output shard, the unit of resume
GENERATION_OPTIONS = ("num_beams", "length_penalty", "early_stopping", "do_sample", "temperature", "top_k", "top_p")
GROUPS = {
    "engine": "engine",
    "decoding": "decoding (default: the model's generation config)",
    "sentences": "sentences",
    "batching": "batching",
}


def option(group: str, default=None, help: str | None = None, minimum=None, **argument):
    """A field with its command-line form: `argument` are `add_argument`'s keywords (type, choices, action)."""
    return field(default=default, metadata=dict(group=group, help=help, minimum=minimum, argument=argument))


class Options:
    """What both kinds of options do: check their values, and take theirs from parsed arguments."""

    def check(self):
        for f in fields(self):
            if "group" not in f.metadata:
                continue
            choices = f.metadata["argument"].get("choices")
            if choices and getattr(self, f.name) not in choices:
                raise InputError(f"--{f.name} must be one of {list(choices)}, got {getattr(self, f.name)!r}.")
            if f.metadata["minimum"] is not None:
                check_at_least(f"--{f.name}", getattr(self, f.name), f.metadata["minimum"])
        return self

    @classmethod
    def of(cls, values):
        """The options among the attributes of `values` (parsed arguments, a server's settings); the rest default."""
        return cls(**{f.name: getattr(values, f.name) for f in fields(cls) if hasattr(values, f.name)}).check()


@dataclass(frozen=True)
class EngineOptions(Options):
    """Which engine runs the model, where, in which precision, on how many threads: fixed when it loads."""

    backend: str = option("engine", "torch", choices=("torch", "ctranslate2"))
    device: str | None = option("engine", help="cpu, cuda, cuda:1, ... (default: cuda when there is one)")
    dtype: str = option("engine", "float32", choices=("float32", "bfloat16", "float16"))
    int8: bool = option("engine", False, "dynamic int8 quantization of the linear layers (CPU)", action="store_true")
    compute_type: str = option("engine", "default", "CTranslate2's compute type (int8, float16, ...)")
    trust_remote_code: bool = option("engine", False, "run the model folder's own code", action="store_true")
    compile: str = option(
        "engine",
        "auto",
        "PyTorch: decode through a static key/value cache whose decoding step transformers compiles (torch.compile, "
        "CUDA graphs; on a GPU only: on a CPU the static cache runs uncompiled). auto: on a GPU, where the process is "
        "known to translate enough to repay the compilation (an input of 50,000 lines or more, or a translate-corpus "
        "worker's share of as many; not a service); see docs/translate.md",
        choices=("auto", "always", "never"),
    )
    vmap: str | None = option(
        "engine",
        help="PyTorch: a vocabulary map (CTranslate2's vmap.txt format) for --use_vmap (default: the model folder's "
        "vmap.txt; CTranslate2 reads only that one)",
        metavar="FILE",
    )
    threads: int | None = option(
        "engine",
        help="torch threads per process (default: the cores divided among the processes on this machine)",
        minimum=1,
        type=int,
    )

    def prepared(self, processes: int | None = 1, reserved: int = 0):
        """These options for a command's process, before anything loads: `--device` checked against this machine, and
        `--threads`, where not given, its cores shared among `processes` on it, less `reserved` each (a server's event
        loop). `processes` None leaves the threads to whoever starts the workers (translate-corpus's Ray)."""
        check_device(self.device, self.backend)
        if self.threads or processes is None:
            return self
        return replace(self, threads=default_threads(processes, reserved))


def check_device(device: str | None, backend: str) -> None:
    """Refuse a `--device` that this machine (or this build of torch) does not have, before the model loads."""
    import torch  # here, so that a command's --help answers without loading torch

    if device is None:
        return
    try:
        cuda = torch.device(device).type == "cuda"
    except RuntimeError:
        raise InputError(f"--device {device}: expected cpu, cuda or cuda:N.") from None
    if not cuda:
        return
    if backend == "ctranslate2":
        gpus = import_extra("ctranslate2", "export", "--backend ctranslate2").get_cuda_device_count()
    else:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not gpus:
        why = "this torch is a CPU-only build" if backend == "torch" and torch.version.cuda is None else "no GPU"
        raise InputError(f"--device {device}: {why}; translate on the CPU (--device cpu, the default without a GPU).")
    index = torch.device(device).index or 0
    if index >= gpus:
        raise InputError(f"--device {device}: this machine has {gpus} GPU(s), cuda:0 to cuda:{gpus - 1}.")


@dataclass(frozen=True)
class DecodeOptions(Options):
    """How one call decodes, splits lines into sentences and batches them (see docs/translate.md); any call of a loaded
    translator may take other ones."""

    # Decoding; None keeps the model's generation config.
    num_beams: int | None = option("decoding", minimum=1, type=int)
    length_penalty: float | None = option("decoding", type=float)
    early_stopping: bool | None = option("decoding", action=argparse.BooleanOptionalAction)
    do_sample: bool | None = option("decoding", action=argparse.BooleanOptionalAction)
    temperature: float | None = option("decoding", type=float)
    top_k: int | None = option("decoding", minimum=0, type=int)
    top_p: float | None = option("decoding", type=float)
    seed: int = option("decoding", 0, "sampling seed (each batch is seeded from it)", type=int)
    max_len_a: float | None = option("decoding", help="new tokens <= a * source tokens + b", type=float)
    max_len_b: int | None = option(
        "decoding", help="(default: the model's own limit, else a=1, b=50 as generate())", type=int
    )
    nbest: int = option("decoding", 1, "hypotheses per line (the n best)", minimum=1, type=int)
    use_vmap: bool = option(
        "decoding",
        False,
        "choose each batch's tokens among those its source tokens map to in the model's vocabulary map (a lexical "
        "shortlist, as CTranslate2's use_vmap): faster where the output layer is a large share of the work",
        action="store_true",
    )
    glossary: str | Glossary | None = option(
        "decoding",
        help="a TSV file of source and target terms: each sentence's translation holds the target terms of the source "
        "terms it contains (constrained beam search; PyTorch engine; docs/translate.md, Glossaries)",
        metavar="FILE",
    )
    glossary_ignore_case: bool = option(
        "decoding", False, "match the glossary's source terms in any case", action="store_true"
    )
    # How lines become sentences.
    split_sentences: bool = option(
        "sentences",
        True,
        "split each line into sentences, translate them one by one and join their translations on one line "
        "(default). --no-split_sentences translates each line as one sentence, as the translation pipeline does: for "
        "input that is already one sentence per line and must stay so (a test set scored line by line against its "
        "references), or a model trained on multi-sentence segments. A sentence longer than the model was trained "
        "on is split at clause punctuation either way.",
        action=argparse.BooleanOptionalAction,
    )
    source_lang: str | None = option(
        "sentences",
        help="language of the input (de, en, ...) for the sentence rules, e.g. whether '3. Oktober' is an ordinal "
        "(default: the source language the model's folder records from training, else rules common to all)",
    )
    # Batching: length-sorted batches of at most max_tokens padded source tokens (and batch_size sentences).
    max_tokens: int = option("batching", DEFAULT_MAX_TOKENS, "padded source tokens per batch", minimum=1, type=int)
    batch_size: int | None = option("batching", help="sentences per batch", minimum=1, type=int)

    def loaded_glossary(self) -> Glossary | None:
        """The glossary, read once per file (and its size and time), or as given."""
        if self.glossary is None or isinstance(self.glossary, Glossary):
            return self.glossary
        stat = os.stat(self.glossary) if os.path.isfile(self.glossary) else None
        return _read_glossary(self.glossary, self.glossary_ignore_case, stat and (stat.st_size, stat.st_mtime_ns))

    @property
    def generation(self) -> dict:
        """The options that go on top of the model's generation config (those given)."""
        return {name: getattr(self, name) for name in GENERATION_OPTIONS if getattr(self, name) is not None}

    def check(self) -> "DecodeOptions":
        """Refuse, naming the option, a value or a combination that would decode nonsense (as transformers'
        `GenerationConfig.validate()` and CTranslate2 refuse theirs)."""
        super().check()
        for name in ("length_penalty", "temperature", "top_p", "max_len_a"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise InputError(f"--{name} must be a finite number, got {value}.")
        if (self.max_len_a is not None and self.max_len_a < 0) or (self.max_len_b is not None and self.max_len_b < 0):
            raise InputError(f"--max_len_a and --max_len_b must be >= 0, got {self.max_len_a} and {self.max_len_b}.")
        if self.temperature is not None and self.temperature <= 0:
            raise InputError(
                f"--temperature must be above 0, got {self.temperature}: it divides the logits (for the most likely "
                "tokens, decode without --do_sample)."
            )
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise InputError(f"--top_p must be a probability in (0, 1], got {self.top_p}.")
        if self.do_sample and self.nbest > 1:
            raise InputError(
                f"--nbest {self.nbest} needs beam search: sampling draws one translation per line (drop --do_sample)."
            )
        if self.glossary is not None and self.do_sample:
            raise InputError("--glossary places its terms by beam search: drop --do_sample.")
        if self.glossary is not None:
            self.loaded_glossary()  # a bad file is refused now, naming its line
        if self.num_beams is not None and self.nbest > self.num_beams:
            raise InputError(
                f"--nbest {self.nbest} needs --num_beams {self.nbest} or more (beam search keeps num_beams "
                "hypotheses)."
            )
        return self


@functools.lru_cache(maxsize=8)
def _read_glossary(path: str, ignore_case: bool, stamp) -> Glossary:
    return Glossary.read(path, ignore_case)


def add_arguments(parser: argparse.ArgumentParser, exclude: tuple[str, ...] = (), **defaults) -> None:
    """The options as command-line arguments of `parser`, in their groups; `exclude` leaves some out and `defaults`
    replaces a command's defaults (e.g. `nbest` per request in the service)."""
    groups = {}
    for f in fields(EngineOptions) + fields(DecodeOptions):
        if f.name in exclude:
            continue
        if f.metadata["group"] not in groups:
            groups[f.metadata["group"]] = parser.add_argument_group(GROUPS[f.metadata["group"]])
        default = defaults.get(f.name, f.default)
        help = f.metadata["help"]
        if default not in (None, False, True) and "action" not in f.metadata["argument"]:
            help = f"{help} (default {default})" if help else f"(default {default})"
        groups[f.metadata["group"]].add_argument(f"--{f.name}", default=default, help=help, **f.metadata["argument"])


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_threads(processes: int = 1, reserved: int = 0) -> int:
    """Torch threads for each of `processes` on this machine: its cores shared among them, less `reserved` per process
    (a server's event loop), at least one. torchrun and accelerate launch set one thread per process otherwise."""
    return max(1, cores() // max(processes, 1) - reserved)
