"""The corpus a command trains on: its options (`train translation`'s, which `distill` and `vocabulary-map` take
alike) and its reading, the training pairs cleaned as the options say."""

from dataclasses import asdict, dataclass, field

from datasets import DatasetDict

from .cleaning import CleaningRules, clean_pairs
from .corpus import load_parallel_corpus


@dataclass
class CorpusArguments:
    source_lang: str = field(default="de")
    target_lang: str = field(default="en")
    dataset_name: str | None = field(
        default=None,
        metadata={"help": "Hub dataset, e.g. wmt14 (needs network). Default: the bundled Tatoeba corpus."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset config, e.g. de-en."})
    train_file: list[str] | None = field(
        default=None,
        metadata={
            "help": "Your training corpus: aligned plain-text files by their prefix (data/train reads data/train.de "
            "and data/train.en, .gz too), the two files, or one JSON Lines / TSV / CSV file. Default: the bundled "
            "demo."
        },
    )
    validation_file: list[str] | None = field(default=None, metadata={"help": "As --train_file."})
    test_file: list[str] | None = field(default=None, metadata={"help": "As --train_file."})
    columns: list[str] | None = field(
        default=None,
        metadata={
            "help": "The languages of the columns of TSV/CSV files without a header line, in order (manythings' "
            "deu.txt: --columns en de; later columns are ignored)."
        },
    )
    clean_empty: bool = field(
        default=False,
        metadata={"help": "Drop training pairs with an empty side (else such a pair is an error naming its line)."},
    )
    clean_max_words: int = field(
        default=0, metadata={"help": "Drop training pairs with a side of more words (0: off; Moses' clean-corpus-n)."}
    )
    clean_length_ratio: float = field(
        default=0,
        metadata={"help": "Drop training pairs whose word counts differ by more than this factor (0: off; Moses: 9)."},
    )
    clean_duplicates: bool = field(default=False, metadata={"help": "Drop training pairs seen before, exactly."})

    def cleaning(self) -> CleaningRules:
        return CleaningRules(self.clean_empty, self.clean_max_words, self.clean_length_ratio, self.clean_duplicates)


def read_training_corpus(args: CorpusArguments) -> tuple[DatasetDict, dict]:
    """The corpus of `args`, its training pairs cleaned by its rules; what each rule dropped (`{}`: no rule given)."""
    corpus = load_parallel_corpus(
        args.source_lang,
        args.target_lang,
        args.dataset_name,
        args.dataset_config_name,
        args.train_file,
        args.validation_file,
        args.test_file,
        columns=args.columns,
        keep_empty_train_pairs=args.clean_empty,
    )
    rules, dropped = args.cleaning(), {}
    if rules.any() and "train" in corpus:
        corpus["train"], dropped = clean_pairs(corpus["train"], args.source_lang, args.target_lang, rules)
    return corpus, dropped


CORPUS_OPTIONS = tuple(asdict(CorpusArguments()))

__all__ = ["CORPUS_OPTIONS", "CorpusArguments", "read_training_corpus"]
