"""Translation metrics through `evaluate`: corpus BLEU and chrF of generated ids against references, for
`Seq2SeqTrainer` and every other evaluation of the package (parity checks, benchmarks).

The metric module ships inside the package (`sacrebleu_scores/`), so `evaluate` loads it from disk, never from the
Hub, as transformers' own translation example loads `sacrebleu`.
"""

import functools
from pathlib import Path

import numpy as np


METRIC_MODULE = Path(__file__).with_name("sacrebleu_scores")


@functools.cache
def _metric():
    import evaluate

    return evaluate.load(str(METRIC_MODULE))


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict:
    """Corpus BLEU (sacrebleu's default 13a tokenisation) and chrF, one reference per hypothesis."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references.")
    return _metric().compute(predictions=hypotheses, references=references)


def build_compute_metrics(tokenizer):
    """BLEU and chrF of generated ids against labels, both decoded with the tokenizer (-100 means padding)."""

    def compute_metrics(eval_prediction):
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        predictions = np.where(predictions < 0, tokenizer.pad_token_id, predictions)
        labels = np.where(labels < 0, tokenizer.pad_token_id, labels)
        hypotheses = [text.strip() for text in tokenizer.batch_decode(predictions, skip_special_tokens=True)]
        references = [text.strip() for text in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        lengths = [np.count_nonzero(row != tokenizer.pad_token_id) for row in predictions]
        return {
            **corpus_scores(hypotheses, references),
            "num_samples": len(hypotheses),
            "gen_len": float(np.mean(lengths)),
        }

    return compute_metrics
