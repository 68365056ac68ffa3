"""The "Attention Is All You Need" Transformer as a Hugging Face model.

Importing registers it with the Auto classes, and registers the translation pipeline that transformers 5 removed.
"""

import functools

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
)
from transformers.models.auto import modeling_auto
from transformers.pipelines import PIPELINE_REGISTRY, REMOVED_TASKS

from .model.configuration_vanilla_transformer import (
    VanillaTransformerConfig,
    max_new_tokens_for,
    paper_generation_config,
)
from .model.modeling_vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
)
from .model.pipeline_translation import TASK_PATTERN, TranslationPipeline


__version__ = "0.1.0"

AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
AutoModel.register(VanillaTransformerConfig, VanillaTransformerModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(VanillaTransformerConfig, VanillaTransformerForConditionalGeneration, exist_ok=True)
AutoModelForCausalLM.register(VanillaTransformerConfig, VanillaTransformerForCausalLM, exist_ok=True)
AutoModelForSequenceClassification.register(
    VanillaTransformerConfig, VanillaTransformerForSequenceClassification, exist_ok=True
)
# With an auto class set, save_pretrained copies the code files and the model's save_pretrained wires them in
# `config.json`, so that saved folders load with trust_remote_code=True where this package is not installed.
VanillaTransformerConfig.register_for_auto_class("AutoConfig")
VanillaTransformerModel.register_for_auto_class("AutoModel")
VanillaTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
VanillaTransformerForCausalLM.register_for_auto_class("AutoModelForCausalLM")
VanillaTransformerForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")

# The steps below have no public API in transformers. Each names the upstream behaviour it relies on, and
# tests/model/test_auto_and_remote_code.py fails with that name the day the behaviour changes.


def _register_base_and_seq2seq_names():
    """`modeling_auto.MODEL_MAPPING_NAMES` and `MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES` (model type -> class
    name) are read by class name: `Trainer.create_model_card()` names the task (text2text-generation) from the second,
    and transformers' own model tests (`ModelTesterMixin`) tell base models from heads by the first.
    `AutoModel.register` fills the lazy mappings, not these tables."""
    modeling_auto.MODEL_MAPPING_NAMES.setdefault(VanillaTransformerConfig.model_type, "VanillaTransformerModel")
    modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.setdefault(
        VanillaTransformerConfig.model_type, "VanillaTransformerForConditionalGeneration"
    )


def _register_translation_pipeline():
    """`pipeline("translation")` and `pipeline("translation_xx_to_yy")` build a [`TranslationPipeline`].

    Registered publicly (`PIPELINE_REGISTRY.register_pipeline`), plus two steps: transformers 5 refuses every task
    named in `pipelines.REMOVED_TASKS` before it looks at the registry, so "translation" comes off that list; and the
    registry only knows exact task names, so `translation_xx_to_yy` resolves to "translation" through a wrapper of
    `PIPELINE_REGISTRY.check_task`, which keeps the languages as the task options (as transformers 4 did). Safe to
    call repeatedly; other tasks resolve as before.
    """
    REMOVED_TASKS.pop("translation", None)
    if PIPELINE_REGISTRY.supported_tasks.get("translation", {}).get("impl") is not TranslationPipeline:
        PIPELINE_REGISTRY.register_pipeline(
            "translation", pipeline_class=TranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
        )
    # Saved folders name this pipeline for processes without the package; here it is served as local code.
    VanillaTransformerConfig.local_pipelines = {"translation": TranslationPipeline.__name__}
    check_task = PIPELINE_REGISTRY.check_task
    if not hasattr(check_task, "__wrapped__"):

        @functools.wraps(check_task)
        def check_task_with_languages(task: str):
            match = TASK_PATTERN.fullmatch(task)
            if match:
                name, targeted_task, _ = check_task("translation")
                return name, targeted_task, match.groups()
            return check_task(task)

        PIPELINE_REGISTRY.check_task = check_task_with_languages


_register_base_and_seq2seq_names()
_register_translation_pipeline()

__all__ = [
    "TranslationPipeline",
    "VanillaTransformerConfig",
    "VanillaTransformerForCausalLM",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerForSequenceClassification",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
    "max_new_tokens_for",
    "paper_generation_config",
]
