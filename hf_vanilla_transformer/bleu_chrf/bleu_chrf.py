"""Corpus BLEU and chrF with sacrebleu, as a local `evaluate` module.

`evaluate.load("sacrebleu")` fetches its script from the Hugging Face Hub and fails offline; this module loads from
the package folder (`evaluate.load(hf_vanilla_transformer.metrics.BLEU_CHRF_PATH)`) and computes the same scores.
"""

import datasets
import evaluate
import sacrebleu


class BleuChrf(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Corpus-level BLEU (13a tokenisation) and chrF from sacrebleu, one reference per prediction.",
            citation="Post, 'A Call for Clarity in Reporting BLEU Scores', WMT 2018.",
            inputs_description="predictions: list of str; references: list of str (one reference each).",
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
            reference_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(self, predictions, references):
        if len(predictions) != len(references):
            raise ValueError(f"{len(predictions)} predictions but {len(references)} references.")
        bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
        return {
            "bleu": bleu.corpus_score(predictions, [references]).score,
            "chrf": chrf.corpus_score(predictions, [references]).score,
            "num_samples": len(predictions),
            "signature": f"{bleu.get_signature()} {chrf.get_signature()}",
        }
