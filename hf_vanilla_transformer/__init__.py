"""The "Attention Is All You Need" Transformer as a Hugging Face model.

Importing registers it with the Auto classes, and registers the translation pipeline that transformers 5 removed.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
)
from transformers.models.auto import modeling_auto as _modeling_auto

from .configuration_vanilla_transformer import VanillaTransformerConfig
from .modeling_vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
)
from .pipeline_translation import TranslationPipeline, register_translation_pipeline


__version__ = "0.1.0"

AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
AutoModel.register(VanillaTransformerConfig, VanillaTransformerModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(VanillaTransformerConfig, VanillaTransformerForConditionalGeneration, exist_ok=True)
AutoModelForCausalLM.register(VanillaTransformerConfig, VanillaTransformerForCausalLM, exist_ok=True)
AutoModelForSequenceClassification.register(
    VanillaTransformerConfig, VanillaTransformerForSequenceClassification, exist_ok=True
)
# With an auto class set, save_pretrained copies the code files and writes `auto_map`, so that saved folders load with
# trust_remote_code=True where this package is not installed.
VanillaTransformerConfig.register_for_auto_class("AutoConfig")
VanillaTransformerModel.register_for_auto_class("AutoModel")
VanillaTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
VanillaTransformerForCausalLM.register_for_auto_class("AutoModelForCausalLM")
VanillaTransformerForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
# transformers' own test mixins and a few library checks recognise base models and seq2seq heads by class name through
# these tables; list ours the way a model inside the library is listed.
_modeling_auto.MODEL_MAPPING_NAMES.setdefault(VanillaTransformerConfig.model_type, "VanillaTransformerModel")
_modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.setdefault(
    VanillaTransformerConfig.model_type, "VanillaTransformerForConditionalGeneration"
)
register_translation_pipeline()

__all__ = [
    "TranslationPipeline",
    "VanillaTransformerConfig",
    "VanillaTransformerForCausalLM",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerForSequenceClassification",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
]
