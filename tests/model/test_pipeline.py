"""pipeline("translation"): outputs, batching, generation arguments, edge inputs, other models, remote code."""

import json
import logging
import textwrap

import pytest
import torch
from transformers import MarianConfig, MarianMTModel, pipeline
from transformers.pipelines import PIPELINE_REGISTRY

import hf_vanilla_transformer
from hf_vanilla_transformer import TranslationPipeline, VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.model import register_translation_pipeline
from hf_vanilla_transformer.model.configuration_vanilla_transformer import max_new_tokens_for
from tests.helpers import run_without_package, tiny_config, tiny_tokenizer


SOURCES = [
    "Ich habe Hunger.",
    "Wo ist der Bahnhof?",
    "Tom ist nicht hier.",
    "Kannst du mir helfen?",
    "Das Wetter ist heute schön.",
    "Wer hat dir das gegeben?",
    "Ich",
    "Tom hat Hunger.",
    "Wo ist Tom?",
    "Das ist schön.",
]


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def make_model(tokenizer, **overrides):
    """An untrained model whose outputs differ visibly between inputs (large embeddings, and seed 2's weights), so
    that order is checked."""
    torch.manual_seed(2)
    config = tiny_config(vocab_size=len(tokenizer), init_std=1.0, **overrides)
    model = VanillaTransformerForConditionalGeneration(config).eval()
    # Untrained models often predict <s>, which decodes to nothing.
    model.generation_config.suppress_tokens = [tokenizer.bos_token_id]
    return model


@pytest.fixture(scope="module")
def translator(tokenizer):
    return pipeline("translation", model=make_model(tokenizer), tokenizer=tokenizer)


def direct_translation(model, tokenizer, text, **generate_kwargs):
    inputs = tokenizer(text, return_tensors="pt")
    return tokenizer.decode(model.generate(**inputs, **generate_kwargs)[0], skip_special_tokens=True)


def test_a_string_gives_a_list_with_one_translation_equal_to_generate(translator, tokenizer):
    result = translator(SOURCES[0], max_new_tokens=6)
    assert isinstance(translator, TranslationPipeline)
    expected = direct_translation(translator.model, tokenizer, SOURCES[0], max_new_tokens=6)
    assert result == [{"translation_text": expected}]
    assert result[0]["translation_text"]


def test_a_list_gives_one_dict_per_input(translator):
    assert translator(SOURCES[:1], max_new_tokens=4) == translator(SOURCES[0], max_new_tokens=4)
    results = translator(SOURCES[:3], max_new_tokens=4)
    assert [list(r) for r in results] == [["translation_text"]] * 3
    assert translator([]) == []


def test_batches_of_four_over_ten_inputs_give_ten_outputs_in_order(translator):
    batched = translator(SOURCES, batch_size=4, max_new_tokens=5)  # ragged last batch of 2
    assert len(batched) == 10 and len({r["translation_text"] for r in batched}) > 3
    assert batched == [translator(text, max_new_tokens=5)[0] for text in SOURCES]


def test_generation_arguments_reach_generate(translator, tokenizer):
    ids = translator(SOURCES[1], max_new_tokens=3, return_tensors=True)[0]["translation_token_ids"]
    assert len(ids) <= 3 + 1  # decoder start token + at most 3 new tokens
    beams = translator(SOURCES[1], num_beams=3, num_return_sequences=2, max_new_tokens=5)
    assert len(beams) == 2
    assert beams[0]["translation_text"] == direct_translation(
        translator.model, tokenizer, SOURCES[1], num_beams=3, max_new_tokens=5
    )
    assert [len(r) for r in translator(SOURCES[:2], num_beams=2, num_return_sequences=2, max_new_tokens=3)] == [2, 2]
    with pytest.raises(ValueError, match="not_a_generation_argument"):
        translator(SOURCES[0], not_a_generation_argument=1)


def test_arguments_given_at_construction_apply_to_every_call(translator, tokenizer):
    short = pipeline("translation", model=translator.model, tokenizer=tokenizer, max_new_tokens=2)
    assert short(SOURCES[0]) == translator(SOURCES[0], max_new_tokens=2)


def test_the_default_length_budget_fits_the_model(tokenizer):
    # A random model never ends by itself: the default budget must stop within max_position_embeddings.
    translate = pipeline("translation", model=make_model(tokenizer, max_position_embeddings=16), tokenizer=tokenizer)
    ids = translate(SOURCES[0], return_tensors=True)[0]["translation_token_ids"]
    assert len(ids) <= 16


def test_blank_inputs_translate_to_empty_strings(translator):
    results = translator(["", "   ", SOURCES[0]], batch_size=2, max_new_tokens=4)
    assert results[:2] == [{"translation_text": ""}] * 2
    assert results[2] == translator(SOURCES[0], max_new_tokens=4)[0]
    assert translator("") == [{"translation_text": ""}]


def test_overlong_inputs_are_truncated_with_a_warning_or_rejected(translator, caplog):
    overlong = " ".join(SOURCES * 5)  # far more than max_position_embeddings=64 tokens
    with caplog.at_level(logging.WARNING):
        result = translator(overlong, max_new_tokens=3)
    assert result[0]["translation_text"]
    assert "Truncating an input of" in caplog.text
    with pytest.raises(ValueError, match="accepts at most 64"):
        translator(overlong, truncation=False)


def test_inputs_must_be_strings(translator):
    with pytest.raises(TypeError, match="translates strings"):
        translator([SOURCES[0], None])


def test_task_names_with_languages(translator, tokenizer):
    translate = pipeline("translation_de_to_en", model=translator.model, tokenizer=tokenizer)
    assert isinstance(translate, TranslationPipeline)
    assert (translate.src_lang, translate.tgt_lang) == ("de", "en")
    assert translate(SOURCES[0], max_new_tokens=4) == translator(SOURCES[0], max_new_tokens=4)


def test_a_marian_model_works_through_the_same_pipeline(tokenizer):
    config = MarianConfig(
        vocab_size=len(tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=0,
    )
    torch.manual_seed(0)
    marian = MarianMTModel(config).eval()
    translate = pipeline("translation", model=marian, tokenizer=tokenizer)
    results = translate(SOURCES[:5] + [""], batch_size=4, max_new_tokens=5)
    assert len(results) == 6 and results[-1] == {"translation_text": ""}
    assert results[0]["translation_text"] == direct_translation(marian, tokenizer, SOURCES[0], max_new_tokens=5)


def test_the_length_limit_follows_the_source_as_in_the_paper(tokenizer, caplog):
    assert (
        max_new_tokens_for(10) == 60 and max_new_tokens_for(10, max_position_embeddings=41) == 40
    )  # source + 50 (section 6.1)
    assert max_new_tokens_for(10, max_len_a=1.5, max_len_b=2) == 17  # fairseq's a * x + b
    # A random model never ends by itself: it stops at the limit, and the warning says so.
    translate = pipeline("translation", model=make_model(tokenizer, max_position_embeddings=64), tokenizer=tokenizer)
    source = SOURCES[0]
    source_length = len(tokenizer(source)["input_ids"])
    with caplog.at_level(logging.WARNING):
        ids = translate(source, return_tensors=True)[0]["translation_token_ids"]
    assert len(ids) == 1 + source_length + 50  # the decoder start token, then the limit
    assert "1 of 1 translations reached the length limit (max_length=" in caplog.text
    ids = translate(source, return_tensors=True, max_len_a=0, max_len_b=3)[0]["translation_token_ids"]
    assert len(ids) == 1 + 3
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        translate(source, max_new_tokens=4, eos_token_id=None)  # no end-of-sequence token: nothing to warn about
    assert "length limit" not in caplog.text


def test_given_lengths_apply_without_warnings_about_max_length(tokenizer, recwarn, caplog):
    """The generation config's max_length (the model's positions) gives way to a length the call gives, without the
    warning generate() prints when it is given max_new_tokens beside a configured max_length (as for MarianMTModel)."""
    model = make_model(tokenizer)
    model.generation_config = hf_vanilla_transformer.paper_generation_config(model.config)
    translate = pipeline("translation", model=model, tokenizer=tokenizer)
    with caplog.at_level(logging.WARNING):
        assert len(translate(SOURCES[0], max_new_tokens=3, return_tensors=True)[0]["translation_token_ids"]) <= 4
        assert len(translate(SOURCES[0], max_length=5, return_tensors=True)[0]["translation_token_ids"]) <= 5
        assert model.generate(**tokenizer(SOURCES[0], return_tensors="pt"), max_length=4).shape[1] <= 4
    assert "seem to have been set" not in caplog.text and not [w for w in recwarn if "max_length" in str(w.message)]


REMOTE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from transformers import pipeline
    try:
        pipeline("translation", model=sys.argv[1], trust_remote_code=False)
    except ValueError as error:
        assert "trust_remote_code=True" in str(error), error
    else:
        raise SystemExit("loaded remote code without trust_remote_code=True")
    translate = pipeline("translation", model=sys.argv[1], trust_remote_code=True)
    assert type(translate).__module__.startswith("transformers_modules."), type(translate).__module__
    print(json.dumps(translate(json.loads(sys.argv[2]), batch_size=4, max_new_tokens=5)))
    """
)


@pytest.mark.slow
def test_a_saved_pipeline_runs_as_remote_code_without_the_package(tokenizer, tmp_path):
    # A pipeline of its own: Pipeline.save_pretrained sets `custom_pipelines` on the model's config.
    translator = pipeline("translation", model=make_model(tokenizer), tokenizer=tokenizer)
    folder = tmp_path / "saved"
    translator.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_translation.TranslationPipeline"
    assert (folder / "pipeline_translation.py").is_file()

    result = run_without_package(REMOTE_SCRIPT, str(folder), json.dumps(SOURCES), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == translator(SOURCES, max_new_tokens=5)


def test_with_the_package_imported_a_saved_pipeline_folder_builds_the_local_pipeline(tokenizer, tmp_path):
    # The folder names its pipeline in `custom_pipelines` (for processes without the package), which transformers
    # checks before its registry; the locally registered pipeline wins, as local code wins for the model.
    translator = pipeline("translation", model=make_model(tokenizer), tokenizer=tokenizer)
    translator.save_pretrained(tmp_path)
    assert "custom_pipelines" in json.loads((tmp_path / "config.json").read_text())
    for trust in (None, True):
        translate = pipeline("translation", model=str(tmp_path), trust_remote_code=trust)
        assert type(translate) is TranslationPipeline
        assert translate(SOURCES[0], max_new_tokens=4) == translator(SOURCES[0], max_new_tokens=4)


def test_a_plain_saved_folder_builds_the_local_pipeline_without_remote_code(translator, tokenizer, tmp_path):
    make_model(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    translate = pipeline("translation", model=str(tmp_path))
    assert type(translate) is TranslationPipeline
    assert translate(SOURCES[0], max_new_tokens=4) == translator(SOURCES[0], max_new_tokens=4)


def test_registration_is_idempotent():
    register_translation_pipeline()
    register_translation_pipeline()
    assert not hasattr(PIPELINE_REGISTRY.check_task.__wrapped__, "__wrapped__")
    assert PIPELINE_REGISTRY.check_task("translation_en_to_fr")[2] == ("en", "fr")
    assert PIPELINE_REGISTRY.supported_tasks["translation"]["impl"] is TranslationPipeline
