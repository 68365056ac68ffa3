"""transformers' own model tests on every head: `ModelTesterMixin` and `ConfigTester`, from the installed release's
source distribution (tests/transformers_test_files.py), with a model tester written the way transformers' model test
files write theirs. `MarianMTModel` runs through the same mixins (slow) for the skips compared in
docs/development.md."""

import unittest

import pytest
import torch
from transformers import MarianConfig, MarianModel, MarianMTModel

from hf_vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerModel,
)
from tests.helpers import TINY
from tests.transformers_test_files import FETCH_COMMAND, VERSION, GenerationTesterMixin, load


try:
    modeling_common, configuration_common = load()
except OSError as error:  # no network (or a release PyPI lacks) and nothing in the cache
    pytest.skip(
        f"transformers {VERSION}'s test files are not in the cache and could not be downloaded ({error}); "
        f"`{FETCH_COMMAND}` fetches them",
        allow_module_level=True,
    )
# test_bc_cache_name_forward records the pre-5.24 cache name's FutureWarning without letting it through the suite's
# error filter, as transformers' own suite (which has no such filter) does.
pytestmark = pytest.mark.filterwarnings("default:`past_key_values` is deprecated:FutureWarning")
ModelTesterMixin, ids_tensor = modeling_common.ModelTesterMixin, modeling_common.ids_tensor
ConfigTester = configuration_common.ConfigTester


class VanillaTransformerModelTester:
    """The tiny model of the suite (`tests.helpers.TINY`), its inputs, and the sizes `ModelTesterMixin` reads."""

    def __init__(self, parent, batch_size=13, seq_length=7, is_training=True, is_encoder_decoder=True, **overrides):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = self.encoder_seq_length = self.decoder_seq_length = seq_length
        self.is_training = is_training
        self.is_encoder_decoder = is_encoder_decoder
        self.config_kwargs = {**TINY, "is_encoder_decoder": is_encoder_decoder, **overrides}
        self.vocab_size = self.config_kwargs["vocab_size"]
        self.hidden_size = self.config_kwargs["d_model"]
        self.num_hidden_layers = self.config_kwargs["encoder_layers"]
        self.num_attention_heads = self.config_kwargs["encoder_attention_heads"]

    def get_config(self) -> VanillaTransformerConfig:
        return VanillaTransformerConfig(**self.config_kwargs)

    def prepare_config_and_inputs(self):
        config = self.get_config()
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        input_ids[:, -1] = config.eos_token_id
        inputs_dict = {"input_ids": input_ids, "attention_mask": input_ids.ne(config.pad_token_id).long()}
        if self.is_encoder_decoder:
            decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
            inputs_dict["decoder_input_ids"] = decoder_input_ids
            inputs_dict["decoder_attention_mask"] = decoder_input_ids.ne(config.pad_token_id).long()
        return config, inputs_dict

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


class VanillaTransformerModelTest(ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    all_model_classes = (VanillaTransformerModel, VanillaTransformerForConditionalGeneration)
    is_encoder_decoder = True

    def setUp(self):
        self.model_tester = VanillaTransformerModelTester(self)
        self.config_tester = ConfigTester(self, config_class=VanillaTransformerConfig, **TINY)

    def test_config(self):
        self.config_tester.run_common_tests()


class VanillaTransformerForCausalLMTest(ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    all_model_classes = (VanillaTransformerForCausalLM,)

    def setUp(self):
        self.model_tester = VanillaTransformerModelTester(self, is_encoder_decoder=False)

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        # transformers gives labels to the heads its own tables name; the inputs are a causal LM's labels.
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels)
        if return_labels:
            inputs_dict["labels"] = inputs_dict["input_ids"].clone()
        return inputs_dict


class VanillaTransformerForSequenceClassificationTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (VanillaTransformerForSequenceClassification,)

    def setUp(self):
        self.model_tester = VanillaTransformerModelTester(self, is_encoder_decoder=False)

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        # transformers gives labels to the heads its own tables name; one class id per sequence.
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels)
        if return_labels:
            inputs_dict["labels"] = torch.zeros(self.model_tester.batch_size, dtype=torch.long)
        return inputs_dict


class MarianModelTester(VanillaTransformerModelTester):
    """transformers' own `MarianModelTester` sizes (tests/models/marian), for the comparison of skips."""

    def get_config(self) -> MarianConfig:
        return MarianConfig(
            vocab_size=99, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=4, decoder_ffn_dim=4, max_position_embeddings=100,
            eos_token_id=2, pad_token_id=1, bos_token_id=0, decoder_start_token_id=3,
        )  # fmt: skip


@pytest.mark.slow
class MarianModelTest(ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    """Not ours: the reference the skips of the classes above are compared with (docs/development.md)."""

    all_model_classes = (MarianModel, MarianMTModel)
    is_encoder_decoder = True
    test_missing_keys = False  # as in transformers' own Marian tests

    def setUp(self):
        self.model_tester = MarianModelTester(self)
