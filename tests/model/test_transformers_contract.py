"""What the package takes from transformers beyond its public, documented API, checked against the installed release:
each test fails with a message naming the upstream behaviour and the code that relies on it. Also: importing the
package changes no other model's outputs, and our models print no deprecation warning that MarianMTModel does not."""

import inspect
import logging
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from transformers import (
    GenerationMixin,
    MarianConfig,
    MarianMTModel,
    Pipeline,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    masking_utils,
    modelcard,
    pipeline,
    pipelines,
)
from transformers.models.auto import modeling_auto

import hf_vanilla_transformer
from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration, VanillaTransformerModel
from hf_vanilla_transformer.model.modeling_vanilla_transformer import CACHE_NAME
from tests.helpers import ROOT, random_batch, tiny_config, tiny_tokenizer


def upstream(condition: bool, behaviour: str, relied_on_by: str) -> None:
    assert condition, f"transformers changed: {behaviour}. Update {relied_on_by}."


def test_the_cache_name_is_the_one_generate_passes():
    parameters = inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    upstream(
        CACHE_NAME in parameters,
        f"generate() no longer passes the decoding cache as `{CACHE_NAME}` ({list(parameters)})",
        "CACHE_NAME in model/modeling_vanilla_transformer.py",
    )


def test_the_masks_take_the_cache_fourth():
    parameters = list(inspect.signature(masking_utils.create_causal_mask).parameters)
    upstream(
        parameters[:4] == ["config", "inputs_embeds", "attention_mask", CACHE_NAME],
        f"create_causal_mask's first parameters are {parameters[:4]}",
        "VanillaTransformerDecoder.causal_mask",
    )


def test_the_name_tables_the_package_fills_are_read_by_name():
    for table in ("MODEL_MAPPING_NAMES", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"):
        upstream(
            isinstance(getattr(modeling_auto, table, None), dict),
            f"modeling_auto.{table} is gone",
            "register_base_and_seq2seq_names in hf_vanilla_transformer/model/__init__.py",
        )
    assert modeling_auto.MODEL_MAPPING_NAMES["vanilla_transformer"] == "VanillaTransformerModel"
    upstream(
        modelcard.TASK_MAPPING.get("text2text-generation")
        is modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
        "model cards no longer infer text2text-generation from MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
        "register_base_and_seq2seq_names",
    )
    assert "VanillaTransformerForConditionalGeneration" in modelcard.TASK_MAPPING["text2text-generation"].values()


def test_the_translation_task_is_removed_upstream_and_served_here():
    upstream(
        isinstance(getattr(pipelines, "REMOVED_TASKS", None), dict),
        "pipelines.REMOVED_TASKS is gone",
        "register_translation_pipeline in hf_vanilla_transformer/model/__init__.py",
    )
    upstream(
        "translation" not in pipelines.REMOVED_TASKS,
        "the package's registration no longer takes 'translation' off pipelines.REMOVED_TASKS",
        "register_translation_pipeline",
    )
    tokenizer = tiny_tokenizer()
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer))).eval()
    for task in ("translation", "translation_de_to_en"):
        translator = pipeline(task, model=model, tokenizer=tokenizer)
        assert type(translator) is hf_vanilla_transformer.TranslationPipeline, task
    assert (translator.src_lang, translator.tgt_lang) == ("de", "en")


def test_the_pipeline_helpers_the_translation_pipeline_calls_exist():
    for name in ("_prepare_generate_kwargs", "_get_set_generation_params"):
        upstream(
            callable(getattr(Pipeline, name, None)),
            f"Pipeline.{name} is gone",
            "TranslationPipeline._forward in model/pipeline_translation.py",
        )


def test_the_resizing_helper_marian_uses_exists():
    upstream(
        "mean_resizing" in inspect.signature(VanillaTransformerModel._get_resized_embeddings).parameters,
        "PreTrainedModel._get_resized_embeddings changed",
        "VanillaTransformerPreTrainedModel.resize_token_embeddings",
    )


def test_the_int8_engine_torch_deprecates_still_exists():
    assert callable(getattr(torch.ao.quantization, "quantize_dynamic", None)), (
        "torch removed torch.ao.quantization.quantize_dynamic: move `translate --int8` (translate/backends.py) to "
        "torchao's int8 dynamic quantization."
    )


OTHER_MODEL = textwrap.dedent(
    """
    import sys, torch
    from transformers import MarianConfig, MarianMTModel, pipeline
    if sys.argv[1] == "import":
        import hf_vanilla_transformer
    torch.manual_seed(0)
    config = MarianConfig(vocab_size=60, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, pad_token_id=0, eos_token_id=2,
        decoder_start_token_id=0, max_position_embeddings=64)
    model = MarianMTModel(config).eval()
    ids = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    print(model.generate(ids, attention_mask=(ids != 0).long(), num_beams=3, max_new_tokens=8).tolist())
    print(model(input_ids=ids, labels=ids).loss.item())
    """
)


@pytest.mark.slow
def test_importing_the_package_changes_no_other_models_outputs():
    outputs = [
        subprocess.run(
            [sys.executable, "-c", OTHER_MODEL, mode], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        for mode in ("plain", "import")
    ]
    assert outputs[0] == outputs[1] and outputs[0]


def deprecations(steps) -> list[str]:
    """The deprecation and future warnings, and transformers' logged deprecation notices, of `steps()`."""
    from transformers.utils import logging as transformers_logging

    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Collect()
    transformers_logging.get_logger().addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            steps()
    finally:
        transformers_logging.get_logger().removeHandler(handler)
    found = [str(w.message) for w in caught if issubclass(w.category, (DeprecationWarning, FutureWarning))]
    return found + [message for message in records if "deprecat" in message.lower()]


def usual_steps(model, tokenizer, folder):
    """The steps of a translation model's life: save and load, forward with labels, generate greedy and beam, the
    pipeline, a Seq2SeqTrainer step."""
    from datasets import Dataset

    def steps():
        model.save_pretrained(folder)
        type(model).from_pretrained(folder)
        input_ids, attention_mask, labels = random_batch(vocab_size=model.config.vocab_size)
        model.train()
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        model.eval()
        for beams in (1, 4):
            model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=beams, max_length=6)
        pipeline("translation", model=model, tokenizer=tokenizer)("Wo ist Tom?", max_length=6)
        data = Dataset.from_dict({"input_ids": input_ids.tolist(), "labels": labels.clamp(min=0).tolist()})
        args = Seq2SeqTrainingArguments(
            "unused", max_steps=1, report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True
        )
        Seq2SeqTrainer(model=model, args=args, train_dataset=data).train()

    return steps


def test_our_model_prints_no_deprecation_that_marian_does_not(tmp_path):
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    ours = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
    marian = MarianMTModel(
        MarianConfig(
            vocab_size=len(tokenizer),
            d_model=16,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            pad_token_id=0,
            eos_token_id=2,
            decoder_start_token_id=1,
            max_position_embeddings=64,
        )  # fmt: skip
    )
    ours_found = deprecations(usual_steps(ours, tokenizer, tmp_path / "ours"))
    marian_found = deprecations(usual_steps(marian, tokenizer, tmp_path / "marian"))
    assert set(ours_found) <= set(marian_found), set(ours_found) - set(marian_found)
