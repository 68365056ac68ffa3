"""The server's translators: the one loaded with the command's options, and variants of it (`Translator.variant`,
the same weights) for the requests that ask for other decoding options (beams, length penalty, n-best, sentence
splitting)."""

from collections import OrderedDict

from ..translate.translator import Translator
from .runner import Options


class Translators:
    """The translator loaded with the server's options, and up to `keep` variants of it, made on first use (by the
    runner thread, the only caller)."""

    def __init__(self, base: Translator, keep: int = 8):
        self.base, self.keep = base, keep
        options = base.options
        self.defaults = Options(base.num_beams, options.length_penalty, options.nbest, options.split_sentences)
        self.variants: OrderedDict[Options, Translator] = OrderedDict({self.defaults: base})

    def __call__(self, options: Options) -> Translator:
        options = self.resolved(options)
        if options not in self.variants:
            changed = {k: v for k, v in vars(options).items() if v != getattr(self.defaults, k)}
            self.variants[options] = self.base.variant(**changed)
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
