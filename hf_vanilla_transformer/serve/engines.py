"""The server's translators: translate's `load_translator` with the command's options, and the same model with other
decoding options (beams, length penalty, n-best, sentence splitting) for the requests that ask for them."""

from collections import OrderedDict
from pathlib import Path

from transformers import GenerationConfig

from ..data.folders import resolve_model
from ..translate.translator import Translator, load_translator
from .runner import Options


class Translators:
    """The translator loaded with the server's options, and up to `keep` variants of it, made on first use (by the
    runner thread, the only caller).

    A PyTorch variant shares the loaded model (and its int8 quantization); CTranslate2 fixes its decoding options
    when it loads, so a CTranslate2 variant loads the model again. Sentence splitting alone shares the engine.
    """

    def __init__(self, base: Translator, device: str | None = None, keep: int = 8):
        self.base, self.device, self.keep = base, device, keep
        settings = base.settings
        self.defaults = Options(
            beams(base), settings["generation"].get("length_penalty"), settings["nbest"], settings["split_sentences"]
        )
        self.variants: OrderedDict[Options, Translator] = OrderedDict({self.defaults: base})

    def __call__(self, options: Options) -> Translator:
        options = self.resolved(options)
        if options not in self.variants:
            self.variants[options] = self.make(options)
            while len(self.variants) > self.keep:  # the least recently used, never the server's own
                del self.variants[next(k for k in self.variants if k != self.defaults)]
        self.variants.move_to_end(options)
        return self.variants[options]

    def resolved(self, options: Options) -> Options:
        """`options` with the server's value for each one not given."""
        defaults = self.defaults
        return Options(
            defaults.num_beams if options.num_beams is None else options.num_beams,
            defaults.length_penalty if options.length_penalty is None else options.length_penalty,
            options.nbest,
            defaults.split_sentences if options.split_sentences is None else options.split_sentences,
        )

    def make(self, options: Options) -> Translator:
        settings, defaults = self.base.settings, self.defaults
        split = options.split_sentences
        if (options.num_beams, options.length_penalty, options.nbest) == (
            defaults.num_beams,
            defaults.length_penalty,
            defaults.nbest,
        ):
            return Translator(
                self.base.backend,
                settings["max_len_a"],
                settings["max_len_b"],
                {**settings, "split_sentences": split},
                split,
                settings["source_lang"],
            )
        generation = {**settings["generation"], "num_beams": options.num_beams}
        if options.length_penalty is not None:
            generation["length_penalty"] = options.length_penalty
        common = dict(
            generation=generation,
            nbest=options.nbest,
            max_len_a=settings["max_len_a"],
            max_len_b=settings["max_len_b"],
            split_sentences=split,
            source_lang=settings["source_lang"],
        )
        if settings["backend"] == "torch":
            backend = self.base.backend  # its model, already on its device, in its dtype, quantized if asked
            return load_translator(
                backend.model,
                tokenizer=self.base.tokenizer,
                device=str(backend.device),
                dtype=settings["dtype"],
                **common,
            )
        return load_translator(
            settings["model"],
            backend="ctranslate2",
            device=self.device,
            compute_type=settings["compute_type"],
            **common,
        )


def beams(translator: Translator) -> int:
    """The beam size `translator` decodes with: its options', else its model's generation config."""
    if translator.settings["generation"].get("num_beams"):
        return translator.settings["generation"]["num_beams"]
    config = getattr(translator.backend, "generation_config", None)  # PyTorch's
    if config is None:
        folder = Path(resolve_model(translator.settings["model"]))
        config = GenerationConfig.from_pretrained(folder) if (folder / "generation_config.json").is_file() else None
    return (config.num_beams if config is not None else None) or 1
