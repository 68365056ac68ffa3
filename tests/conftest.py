import os


# Tests never reach the Hugging Face Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

from hf_vanilla_transformer import VanillaTransformerConfig  # noqa: E402


TINY = dict(
    vocab_size=99,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_position_embeddings=64,
)


def tiny_config(**overrides) -> VanillaTransformerConfig:
    """A model small enough for exhaustive checks; dropout on, as in training, unless a test turns it off."""
    return VanillaTransformerConfig(**{**TINY, **overrides})


def random_batch(batch_size=3, source_length=7, target_length=5, vocab_size=99, seed=0):
    """Source ids ending in EOS with ragged right padding, and target labels padded with -100."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, vocab_size, (batch_size, source_length), generator=g)
    attention_mask = torch.ones_like(input_ids)
    labels = torch.randint(4, vocab_size, (batch_size, target_length), generator=g)
    for row in range(1, batch_size):
        src_len = max(1, source_length - 2 * row)
        tgt_len = max(1, target_length - row)
        input_ids[row, src_len - 1] = 2
        input_ids[row, src_len:] = 0
        attention_mask[row, src_len:] = 0
        labels[row, tgt_len - 1] = 2
        labels[row, tgt_len:] = -100
    input_ids[0, -1] = 2
    labels[0, -1] = 2
    return input_ids, attention_mask, labels


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
