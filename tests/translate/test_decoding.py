"""The translate command's own search (finished sentences leave the batch) chooses what generate() chooses: greedy and
beam search, every early_stopping mode, positive and negative length penalties, n-best, one length limit per
sentence, and the logits processors it applies; sampling is seeded; settings it does not apply are refused by name."""

import itertools

import pytest
import torch
from transformers import StoppingCriteria

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.translate.decoding import check_settings, decode
from tests.helpers import SENTENCES, tiny_config, tiny_tokenizer


TOKENIZER = tiny_tokenizer()
TEXTS = [*SENTENCES, "Tom hat Hunger.", "Wo ist Tom?", "Das ist schön.", "Wer ist hier?", "Ich", "Hunger heute"]
LIMITS = [6 + (i % 5) * 4 for i in range(len(TEXTS))]  # some translations end, some reach their limit


class SentenceLengthLimit(StoppingCriteria):
    """generate() with one limit per sentence, as `decode` has: stops every row of sentence i after `limits[i]` new
    tokens (rows are (sentence, beam), sentence-major)."""

    def __init__(self, limits: torch.Tensor):
        self.limits = limits

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        rows_per_sentence = input_ids.shape[0] // self.limits.shape[0]
        return input_ids.shape[1] - 1 >= self.limits.repeat_interleave(rows_per_sentence)  # -1: decoder start


@pytest.fixture(scope="module")
def model():
    """A tiny model trained for a moment on the six sentence pairs: unsure enough that its hypotheses end at many
    different steps, some only at their limit, and beam search's finished lists change late (as seed 1 makes it)."""
    torch.manual_seed(1)
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(TOKENIZER), dropout=0.0))
    batch = TOKENIZER(SENTENCES[0::2], text_target=SENTENCES[1::2], padding=True, return_tensors="pt")
    batch["labels"][batch["labels"] == TOKENIZER.pad_token_id] = -100
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
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
PROCESSORS = [
    dict(bad_words_ids=[[5, 6], [7]]),
    dict(no_repeat_ngram_size=2),
    dict(repetition_penalty=1.5),
    dict(suppress_tokens=[5, 6]),
    dict(min_new_tokens=4),
    dict(forced_bos_token_id=8),
    dict(bad_words_ids=[[5]], renormalize_logits=True),
]


def assert_same_hypotheses(model, config, limits):
    batch = TOKENIZER(TEXTS, return_tensors="pt", padding=True, return_token_type_ids=False)
    nbest = config.num_return_sequences or 1
    with torch.no_grad():
        expected = model.generate(
            **batch,
            generation_config=config,
            stopping_criteria=[SentenceLengthLimit(torch.tensor(limits))],
        ).tolist()
        decoded = decode(model, batch["input_ids"], batch["attention_mask"], limits, config, nbest)
    lengths = []
    for i, hypotheses in enumerate(decoded):
        assert len(hypotheses) == nbest
        for j, (ids, token_scores) in enumerate(hypotheses):
            row = expected[i * nbest + j][1:]
            ended = ids[-1] == model.config.eos_token_id
            assert ids == row[: len(ids)] and len(token_scores) == len(ids)
            assert ended or len(ids) == limits[i]
            lengths.append(len(ids))
    return lengths


def settings_id(settings: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in settings.items())


def generation_config(model, **settings):
    config = model.config.paper_generation_config(**settings)
    config.max_length = None  # the limits are the sentences'
    check_settings(model, config)
    return config


@pytest.mark.parametrize("settings", SETTINGS, ids=settings_id)
def test_the_same_hypotheses_as_generate(model, settings):
    config = generation_config(model, **settings, max_new_tokens=max(LIMITS))
    assert len(set(assert_same_hypotheses(model, config, LIMITS))) > 3  # ending at many different steps


@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("processor", PROCESSORS, ids=settings_id)
def test_the_logits_processors_choose_as_in_generate(model, processor, num_beams):
    assert_same_hypotheses(
        model, generation_config(model, num_beams=num_beams, **processor, max_new_tokens=22), LIMITS
    )


@pytest.mark.parametrize("num_beams", [1, 3])
def test_a_forced_end_token_ends_every_hypothesis_at_the_limit(model, num_beams):
    """generate() forces it at its one max_length: here every sentence has that limit."""
    limit = 7
    config = generation_config(
        model, num_beams=num_beams, forced_eos_token_id=model.config.eos_token_id, max_new_tokens=limit
    )
    lengths = assert_same_hypotheses(model, config, [limit] * len(TEXTS))
    assert limit in lengths


def test_sampling_is_seeded_and_top_k_1_is_greedy(model):
    batch = TOKENIZER(TEXTS, return_tensors="pt", padding=True, return_token_type_ids=False)
    args = (batch["input_ids"], batch["attention_mask"], LIMITS)

    def sample(seed, **settings):
        config = model.config.paper_generation_config(num_beams=1, do_sample=True, **settings)
        return decode(model, *args, config, 1, seed=seed)

    greedy = decode(model, *args, model.config.paper_generation_config(num_beams=1), 1)
    assert sample(0, top_k=1) == greedy
    assert sample(0, temperature=1.5, top_p=0.9) == sample(0, temperature=1.5, top_p=0.9)
    assert sample(0, temperature=1.5) != sample(1, temperature=1.5)


def test_settings_it_does_not_apply_are_refused_by_name(model):
    for settings in [dict(diversity_penalty=0.5, num_beam_groups=2), dict(typical_p=0.5, do_sample=True)]:
        with pytest.raises(InputError, match=next(iter(settings))):
            check_settings(model, model.config.paper_generation_config(**settings))
