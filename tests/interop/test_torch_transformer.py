"""Importing torch.nn.Transformer models built the way the PyTorch translation tutorial builds them: equal logits."""

import math

import pytest
import torch
from torch import nn

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.interop.torch_transformer import from_torch_transformer
from tests.helpers import random_batch


# nn.Transformer's advisories about its fast path and the tutorial's float causal mask beside boolean padding masks.
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*(nested_tensor|nested tensors|mismatched key_padding_mask):UserWarning"
)
D_MODEL, HEADS, VOCAB = 16, 4, 99


class PositionalEncoding(nn.Module):
    """The tutorial's ("Language translation with nn.Transformer"), for sequence-first or batch-first inputs."""

    def __init__(self, emb_size: int, dropout: float, maxlen: int = 5000, batch_first: bool = False):
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        self.batch_first = batch_first
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding.unsqueeze(-2))  # (maxlen, 1, d)

    def forward(self, token_embedding):
        if self.batch_first:
            return self.dropout(token_embedding + self.pos_embedding[: token_embedding.size(1)].transpose(0, 1))
        return self.dropout(token_embedding + self.pos_embedding[: token_embedding.size(0)])


class Seq2SeqTransformer(nn.Module):
    """The tutorial's model: TokenEmbedding x sqrt(d), PositionalEncoding, nn.Transformer, generator Linear."""

    def __init__(self, batch_first=False, norm_first=False, bias=True, src_vocab=VOCAB, shared=False, **kwargs):
        super().__init__()
        self.batch_first = batch_first
        self.transformer = nn.Transformer(
            D_MODEL, HEADS, 2, 2, 32, 0.1, batch_first=batch_first, norm_first=norm_first, bias=bias, **kwargs
        )
        self.generator = nn.Linear(D_MODEL, VOCAB)
        self.src_tok_emb = nn.Embedding(src_vocab, D_MODEL)
        self.tgt_tok_emb = self.src_tok_emb if shared else nn.Embedding(VOCAB, D_MODEL)
        self.positional_encoding = PositionalEncoding(D_MODEL, 0.1, batch_first=batch_first)
        nn.init.zeros_(self.generator.bias)  # ours has no output bias (see test_refusals)

    def forward(self, src, tgt, src_padding_mask, tgt_padding_mask):
        """(b, s), (b, t) ids; masks True at padding, as the tutorial builds them."""
        if not self.batch_first:
            src, tgt = src.T, tgt.T
        embed = lambda emb, ids: self.positional_encoding(emb(ids) * math.sqrt(D_MODEL))  # noqa: E731
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1 if self.batch_first else 0])
        outs = self.transformer(
            embed(self.src_tok_emb, src),
            embed(self.tgt_tok_emb, tgt),
            tgt_mask=tgt_mask,
            src_key_padding_mask=src_padding_mask,
            tgt_key_padding_mask=tgt_padding_mask,
            memory_key_padding_mask=src_padding_mask,
        )
        logits = self.generator(outs)
        return logits if self.batch_first else logits.transpose(0, 1)


def import_tutorial_model(tutorial: Seq2SeqTransformer, **kwargs) -> VanillaTransformerForConditionalGeneration:
    return from_torch_transformer(
        tutorial.transformer,
        tutorial.src_tok_emb,
        tutorial.generator,
        target_embedding=tutorial.tgt_tok_emb,
        positions=tutorial.positional_encoding.pos_embedding,
        **kwargs,
    )


def assert_same_logits(tutorial, ours, src_vocab=VOCAB):
    tutorial.eval(), ours.eval()
    input_ids, attention_mask, labels = random_batch(source_length=9, target_length=6, vocab_size=src_vocab)
    decoder_input_ids = ours.prepare_decoder_input_ids_from_labels(labels)
    decoder_attention_mask = (labels != -100).long()
    with torch.no_grad():
        expected = tutorial(input_ids, decoder_input_ids, attention_mask == 0, decoder_attention_mask == 0)
        actual = ours(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
        ).logits
    real = decoder_attention_mask.bool()  # padded target positions are not compared: neither model defines them
    torch.testing.assert_close(actual[real], expected[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("batch_first", [False, True], ids=["seq-first", "batch-first"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_tutorial_model_same_logits(batch_first, norm_first):
    tutorial = Seq2SeqTransformer(batch_first=batch_first, norm_first=norm_first)
    ours = import_tutorial_model(tutorial)
    assert ours.training  # the tutorial model was in training mode when converted
    config = ours.config
    assert (config.norm_first, config.stack_layer_norm, config.tie_word_embeddings) == (norm_first, True, False)
    assert (config.dropout, config.attention_dropout, config.activation_dropout) == (0.1, 0.1, 0.1)
    assert config.max_position_embeddings == 5000
    assert_same_logits(tutorial, ours)


def test_shared_embeddings_no_biases_gelu_and_smaller_source_vocabulary():
    shared = Seq2SeqTransformer(shared=True, bias=False, activation="gelu", layer_norm_eps=1e-6)
    ours = from_torch_transformer(shared.transformer, shared.src_tok_emb)  # no generator: logits against embeddings
    assert ours.config.tie_word_embeddings and ours.config.activation_function == "gelu"
    shared.generator.weight = shared.src_tok_emb.weight
    assert_same_logits(shared, ours)

    small_source = Seq2SeqTransformer(src_vocab=50)
    assert_same_logits(small_source, import_tutorial_model(small_source), src_vocab=50)


def test_refusals():
    tutorial = Seq2SeqTransformer()
    with torch.no_grad():
        tutorial.generator.bias[3] = 0.5
    with pytest.raises(ValueError, match="generator's bias is not zero"):
        import_tutorial_model(tutorial)

    tutorial = Seq2SeqTransformer(activation=nn.SiLU())
    with pytest.raises(ValueError, match="is not ReLU or GELU"):
        import_tutorial_model(tutorial)

    tutorial = Seq2SeqTransformer()
    marian_layout = tutorial.positional_encoding.pos_embedding[:, 0].clone()
    marian_layout = torch.cat([marian_layout[:, 0::2], marian_layout[:, 1::2]], dim=-1)  # [sin | cos]
    with pytest.raises(ValueError, match="`positions` is not the interleaved sinusoid"):
        from_torch_transformer(tutorial.transformer, tutorial.src_tok_emb, tutorial.generator, positions=marian_layout)

    with pytest.raises(ValueError, match="source vocabulary .* is larger"):
        big_source = nn.Embedding(VOCAB + 1, D_MODEL)
        from_torch_transformer(
            tutorial.transformer, big_source, tutorial.generator, target_embedding=tutorial.tgt_tok_emb
        )

    tutorial.transformer.decoder.norm = None
    with pytest.raises(ValueError, match="only one of encoder.norm and decoder.norm"):
        import_tutorial_model(tutorial)

    tutorial = Seq2SeqTransformer()
    tutorial.transformer.encoder.layers[1].norm2.eps = 1e-3
    with pytest.raises(ValueError, match="differ in LayerNorm eps"):
        import_tutorial_model(tutorial)
