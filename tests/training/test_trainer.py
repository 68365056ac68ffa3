"""The training room: the paper's learning rate, the metrics, the collator and the tokenizer check."""

import copy

import pytest
import torch
from datasets import Dataset
from transformers import (
    Seq2SeqTrainingArguments,
    get_inverse_sqrt_schedule,
)

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.data.corpus import load_parallel_corpus
from hf_vanilla_transformer.data.tokenizer import train_shared_bpe_tokenizer
from hf_vanilla_transformer.model.pipeline_translation import check_tokenizer_fits_model
from hf_vanilla_transformer.training.metrics import corpus_scores
from hf_vanilla_transformer.training.trainer import TranslationDataCollator, TranslationTrainer, noam_learning_rate
from tests.helpers import tiny_config


@pytest.fixture(scope="module")
def tokenizer():
    corpus = load_parallel_corpus()  # the bundled Tatoeba corpus
    texts = (pair[lang] for pair in corpus["train"]["translation"][:3000] for lang in ("de", "en"))
    return train_shared_bpe_tokenizer(texts, vocab_size=500)


def test_tokenizer_model_mismatch_is_detected(tokenizer):
    check_tokenizer_fits_model(tokenizer, tiny_config(vocab_size=500))
    with pytest.raises(ValueError, match="500 tokens but the model's vocabulary has 99"):
        check_tokenizer_fits_model(tokenizer, tiny_config())
    with pytest.raises(ValueError, match="eos_token_id"):
        check_tokenizer_fits_model(tokenizer, tiny_config(vocab_size=500, eos_token_id=3))
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    args = Seq2SeqTrainingArguments(output_dir="unused", report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match="500 tokens but the model's vocabulary has 99"):
        TranslationTrainer(model=model, args=args, processing_class=tokenizer)


def test_inverse_sqrt_schedule_with_the_noam_peak_is_the_papers_formula():
    d_model, warmup = 512, 4000
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=noam_learning_rate(d_model, warmup))
    schedule = get_inverse_sqrt_schedule(optimizer, num_warmup_steps=warmup)
    for step in [1, 100, 3999, 4000, 4001, 20000, 100000]:
        while schedule.last_epoch < step:
            schedule.step()
        paper = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert schedule.get_last_lr()[0] == pytest.approx(paper, rel=1e-9), step


def test_corpus_scores_are_sacrebleus_bleu_and_chrf():
    import sacrebleu

    hyps, refs = ["The cat sat on the mat.", "Hello there"], ["The cat sat on a mat.", "Hello there!"]
    scores = corpus_scores(hyps, refs)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    assert corpus_scores(refs, refs)["bleu"] == pytest.approx(100.0)


def test_collator_marks_target_padding_in_the_decoder_attention_mask(tokenizer):
    from hf_vanilla_transformer.training.trainer import TranslationDataCollator

    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=500))
    features = [{"input_ids": [5, 6, 2], "labels": [7, -100, 8, 2]}, {"input_ids": [9, 2], "labels": [10, 2]}]
    batch = TranslationDataCollator(tokenizer, model=model, label_pad_token_id=-100)(features)
    # an ignored label inside a target (-100 at position 1) stays a real decoder position; only added padding is 0
    assert batch["decoder_attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["labels"][1].tolist() == [10, 2, -100, -100]


def test_evaluations_during_training_score_the_current_weights(tokenizer, tmp_path):
    # An evaluation makes the output projection's prepacked CPU copy; the recipe's optimizer must let it see the
    # training steps after it (the fused AdamW did not, and every later evaluation scored the first one's weights).
    from hf_vanilla_transformer.recipes.common import PAPER_OPTIMIZER

    pairs = load_parallel_corpus()["train"]["translation"][:64]
    rows = [{"input_ids": tokenizer(p["de"])["input_ids"], "labels": tokenizer(p["en"])["input_ids"]} for p in pairs]
    dataset = Dataset.from_list(rows)
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, max_steps=4, learning_rate=1e-2, save_strategy="no",
        per_device_train_batch_size=16, per_device_eval_batch_size=64, **PAPER_OPTIMIZER,
    )  # fmt: skip
    collator = TranslationDataCollator(tokenizer, model=model, label_pad_token_id=-100)
    trainer = TranslationTrainer(
        model=model, args=args, train_dataset=dataset, eval_dataset=dataset, data_collator=collator
    )
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    after = trainer.evaluate()["eval_loss"]
    fresh = copy.deepcopy(model).eval()  # new weight tensors: nothing prepacked yet
    with torch.no_grad():
        expected = fresh(**collator(rows)).loss.item()
    assert after == pytest.approx(expected, rel=1e-5) and after < before
