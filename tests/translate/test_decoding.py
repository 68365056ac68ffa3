"""The translate command's own search (finished sentences leave the batch) chooses what generate() chooses: greedy and
beam search, every early_stopping mode, positive and negative length penalties, n-best, one length limit per
sentence, banned tokens; settings it does not cover go to generate()."""

import itertools

import pytest
import torch

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.translate.backends import SentenceLengthLimit
from hf_vanilla_transformer.translate.decoding import decode, supported
from tests.helpers import SENTENCES, one_thread, tiny_config, tiny_tokenizer


TOKENIZER = tiny_tokenizer()
TEXTS = [*SENTENCES, "Tom hat Hunger.", "Wo ist Tom?", "Das ist schön.", "Wer ist hier?", "Ich", "Hunger heute"]
LIMITS = [6 + (i % 5) * 4 for i in range(len(TEXTS))]  # some translations end, some reach their limit


@pytest.fixture(scope="module")
def model():
    """A tiny model trained for a moment on the six sentence pairs: unsure enough that its hypotheses end at many
    different steps, some only at their limit, and beam search's finished lists change late."""
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(TOKENIZER), dropout=0.0))
    batch = TOKENIZER(SENTENCES[0::2], text_target=SENTENCES[1::2], padding=True, return_tensors="pt")
    batch["labels"][batch["labels"] == TOKENIZER.pad_token_id] = -100
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    with one_thread():
        for _ in range(80):
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return model.eval()


SETTINGS = [
    dict(num_beams=1, length_penalty=None, early_stopping=None),
    dict(num_beams=1, length_penalty=None, early_stopping=None, bad_words_ids=[[5], [9]]),
    *(
        dict(num_beams=beams, length_penalty=penalty, early_stopping=stopping, num_return_sequences=nbest)
        for beams, penalty, stopping, nbest in itertools.product(
            (2, 4), (0.6, 2.0, -0.5), (True, False, "never"), (1, 2)
        )
    ),
    dict(num_beams=4, length_penalty=1.0, early_stopping=True, bad_words_ids=[[5]]),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_the_same_hypotheses_as_generate(model, settings):
    config = model.config.paper_generation_config(**settings, max_new_tokens=max(LIMITS))
    assert supported(model, config)
    batch = TOKENIZER(TEXTS, return_tensors="pt", padding=True, return_token_type_ids=False)
    nbest = config.num_return_sequences or 1
    with one_thread(), torch.no_grad():
        expected = model.generate(
            **batch,
            generation_config=config,
            stopping_criteria=[SentenceLengthLimit(torch.tensor(LIMITS))],
        ).tolist()
        decoded = decode(model, batch["input_ids"], batch["attention_mask"], LIMITS, config, nbest)
    lengths = []
    for i, hypotheses in enumerate(decoded):
        assert len(hypotheses) == nbest
        for j, (ids, token_scores) in enumerate(hypotheses):
            row = expected[i * nbest + j][1:]
            ended = ids[-1] == model.config.eos_token_id
            assert ids == row[: len(ids)] and len(token_scores) == len(ids)
            assert ended or len(ids) == LIMITS[i]
            lengths.append(len(ids))
    assert len(set(lengths)) > 3


def test_settings_it_does_not_cover_go_to_generate(model):
    for settings in [dict(do_sample=True), dict(no_repeat_ngram_size=2), dict(bad_words_ids=[[5, 6]])]:
        assert not supported(model, model.config.paper_generation_config(**settings)), settings
