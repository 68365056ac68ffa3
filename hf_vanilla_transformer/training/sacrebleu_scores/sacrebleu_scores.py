"""An `evaluate` metric module, shipped with the package so that evaluation never reaches the Hub: corpus BLEU
(sacrebleu's default 13a tokenisation) and chrF, one reference per prediction, as the WMT evaluations report them.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...])  # {"bleu": ..., "chrf": ...}

It computes what the Hub's `sacrebleu` and `chrf` modules compute, in one pass.
"""

import datasets
import evaluate
import sacrebleu


class SacrebleuScores(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=__doc__,
            citation="Post, 2018. A Call for Clarity in Reporting BLEU Scores. WMT. / Popović, 2015. chrF. WMT.",
            inputs_description="predictions: list of str; references: list of str (one reference per prediction)",
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
            reference_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(self, predictions, references):
        return {
            "bleu": sacrebleu.corpus_bleu(predictions, [references]).score,
            "chrf": sacrebleu.corpus_chrf(predictions, [references]).score,
        }
