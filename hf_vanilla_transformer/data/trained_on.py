"""What a translation model was trained on, recorded in its folder for the programs that feed it text.

Training records its languages and length limits in the generation config (`generation_config.json`), which every
export copies (CTranslate2, MarianMT, ONNX and the no-server page):

    "trained_on": {"source_lang": "de", "target_lang": "en", "max_source_length": 64, "max_target_length": 64}

`max_source_length` and `max_target_length` are the training options of those names: longer sources and targets were
cut to that many tokens (end token included), so the model has never seen a longer one. The translate command, the
Gradio app and the no-server page feed it pieces of at most `max_source_length` tokens (sentences, and a longer
sentence split at clause punctuation, then between words) and split sentences by the rules of `source_lang`.
`generate()` ignores the record; the length of a translation still follows the source, as the paper's rule says.
Folders saved without it (before the record existed, or by other libraries) read as "unknown" (all None).
"""

from dataclasses import asdict, dataclass


FIELD = "trained_on"  # the generation config attribute (one JSON object), named apart from generate()'s settings


def token_ids(value: int | list[int] | None) -> list[int]:
    """A config's token-id setting (`eos_token_id`, `forced_eos_token_id`), which transformers allows as one id or a
    list of them, as a list (None: empty)."""
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


@dataclass(frozen=True)
class TrainedOn:
    source_lang: str | None = None
    target_lang: str | None = None
    max_source_length: int | None = None  # tokens, end token included
    max_target_length: int | None = None

    def source_limit(self, accepted: int | None) -> int | None:
        """The longest piece to feed the model, in tokens: the length it was trained on where recorded, within what
        the model and its tokenizer accept (`accepted`, from `max_source_length`); else what they accept."""
        limits = [n for n in (self.max_source_length, accepted) if n]
        return min(limits) if limits else None


def record_trained_on(generation_config, arguments) -> None:
    """Record in `generation_config` (saved with the model) the `TrainedOn` fields read from the attributes of the
    same names of `arguments` (the translation recipe's data arguments)."""
    fields = {name: getattr(arguments, name, None) for name in TrainedOn.__dataclass_fields__}
    setattr(generation_config, FIELD, asdict(TrainedOn(**fields)))
    # A config still marked as derived from the model's config would drop the record when the folder is loaded.
    generation_config._from_model_config = False


def trained_on(generation_config) -> TrainedOn:
    """The record of `generation_config` (None, or a config without one: every field None)."""
    record = getattr(generation_config, FIELD, None) or {}
    return TrainedOn(**{name: record.get(name) for name in TrainedOn.__dataclass_fields__})


__all__ = ["FIELD", "TrainedOn", "record_trained_on", "trained_on"]
