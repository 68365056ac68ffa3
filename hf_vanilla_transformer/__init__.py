"""The "Attention Is All You Need" Transformer as a Hugging Face model.

Importing registers it with the Auto classes, and registers the translation pipeline that transformers 5 removed
(`hf_vanilla_transformer.model`).
"""

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
from .model.pipeline_translation import TranslationPipeline


__version__ = "0.1.0"

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
