"""The model room's files, which `save_pretrained` ships as remote code, and their registration with transformers
(Auto classes, remote-code saving, the translation pipeline), which importing the package does and saved folders do
not need: they name their classes in `auto_map` and `custom_pipelines`."""

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

from .configuration_vanilla_transformer import VanillaTransformerConfig
from .modeling_vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerModel,
)
from .pipeline_translation import TASK_PATTERN, TranslationPipeline


AUTO_CLASSES = {
    AutoModel: VanillaTransformerModel,
    AutoModelForSeq2SeqLM: VanillaTransformerForConditionalGeneration,
    AutoModelForCausalLM: VanillaTransformerForCausalLM,
    AutoModelForSequenceClassification: VanillaTransformerForSequenceClassification,
}


def register_auto_classes():
    """Each head under its Auto class, and for remote-code saving: with an auto class set, `save_pretrained` copies
    the code files and `auto_map` names them, so that saved folders load with trust_remote_code=True where this
    package is not installed."""
    AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
    VanillaTransformerConfig.register_for_auto_class("AutoConfig")
    for auto_class, model_class in AUTO_CLASSES.items():
        auto_class.register(VanillaTransformerConfig, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto_class.__name__)


# The steps below have no public API in transformers. Each names the upstream behaviour it relies on, and
# tests/model/test_auto_and_remote_code.py fails with that name the day the behaviour changes.


def register_base_and_seq2seq_names():
    """`modeling_auto.MODEL_MAPPING_NAMES` and `MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES` (model type -> class
    name) are read by class name: `Trainer.create_model_card()` names the task (text2text-generation) from the second,
    and transformers' own model tests (`ModelTesterMixin`) tell base models from heads by the first.
    `AutoModel.register` fills the lazy mappings, not these tables."""
    modeling_auto.MODEL_MAPPING_NAMES.setdefault(VanillaTransformerConfig.model_type, "VanillaTransformerModel")
    modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.setdefault(
        VanillaTransformerConfig.model_type, "VanillaTransformerForConditionalGeneration"
    )


def register_translation_pipeline():
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


register_auto_classes()
register_base_and_seq2seq_names()
register_translation_pipeline()
