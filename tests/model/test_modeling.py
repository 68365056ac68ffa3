"""The architecture: positional encoding, layer parity with torch.nn, masks, attention backends, loss, outputs."""

import math
import os
import subprocess
import sys

import pytest
import torch
from torch import nn
from transformers import DynamicCache

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration, VanillaTransformerModel
from hf_vanilla_transformer.model import input_checks, padding
from hf_vanilla_transformer.model.input_checks import CACHE_NAME
from hf_vanilla_transformer.model.modeling_vanilla_transformer import (
    VanillaTransformerDecoderLayer,
    VanillaTransformerEncoderLayer,
    VanillaTransformerSinusoidalPositionalEncoding,
)
from tests.helpers import HOST_READS_PER_TRAINING_STEP, ROOT, free_port, random_batch, record_packed_rows, tiny_config


def make_model(attn_implementation="eager", **overrides):
    config = tiny_config(**overrides)
    return VanillaTransformerForConditionalGeneration._from_config(
        config, attn_implementation=attn_implementation
    ).eval()


def paper_pe(length, d_model):
    """Section 3.5 written out with Python floats."""
    pe = torch.zeros(length, d_model, dtype=torch.float64)
    for pos in range(length):
        for i in range(d_model // 2):
            pe[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d_model))
            pe[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d_model))
    return pe


# --- positional encoding -------------------------------------------------------------------------------------------


def test_positional_encoding_is_the_papers_formula():
    pe = VanillaTransformerSinusoidalPositionalEncoding(16)(torch.arange(200)[None])[0]
    torch.testing.assert_close(pe.double(), paper_pe(200, 16), atol=1e-4, rtol=0)


def test_positional_encoding_survives_from_pretrained_and_meta_loading(tmp_path):
    model = make_model()
    model.save_pretrained(tmp_path)
    reloaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path)  # meta device, then weights
    assert not any("embed_positions" in key for key in reloaded.state_dict()), "positions are a formula, not weights"
    for stack in (reloaded.model.encoder, reloaded.model.decoder):
        pe = stack.embed_positions(torch.arange(64)[None])[0]
        torch.testing.assert_close(pe.double(), paper_pe(64, 16), atol=1e-5, rtol=0)


def test_embeddings_are_scaled_by_sqrt_d_model_and_added_to_positions():
    model = make_model(dropout=0.0, encoder_layers=1)
    encoder = model.model.encoder
    encoder.layers = nn.ModuleList()  # leave only embedding + positions
    ids = torch.tensor([[5, 6, 7, 2]])
    expected = model.model.shared(ids) * math.sqrt(16) + paper_pe(4, 16).float()
    torch.testing.assert_close(encoder(input_ids=ids).last_hidden_state, expected, atol=1e-5, rtol=0)


def test_longer_than_max_positions_is_a_value_error_naming_the_limit():
    model = make_model(max_position_embeddings=8)
    with pytest.raises(ValueError, match="max_position_embeddings=8"):
        model(input_ids=torch.full((1, 9), 5), decoder_input_ids=torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="max_position_embeddings=8"):
        model(input_ids=torch.full((1, 3), 5), decoder_input_ids=torch.ones(1, 9, dtype=torch.long))


# --- layer parity with torch.nn --------------------------------------------------------------------------------------


def additive_mask(keep):  # (b, k) 1 = keep -> (b, 1, 1, k) float additive
    return (1.0 - keep[:, None, None, :].float()) * torch.finfo(torch.float32).min


def copy_attention(ours, mha):
    q, k, v = mha.in_proj_weight.chunk(3)
    qb, kb, vb = mha.in_proj_bias.chunk(3)
    for proj, w, b in ((ours.q_proj, q, qb), (ours.k_proj, k, kb), (ours.v_proj, v, vb), (ours.out_proj, None, None)):
        proj.weight.data.copy_(w if w is not None else mha.out_proj.weight)
        proj.bias.data.copy_(b if b is not None else mha.out_proj.bias)


def copy_feed_forward(ours, ref):
    ours.fc1.load_state_dict(ref.linear1.state_dict())
    ours.fc2.load_state_dict(ref.linear2.state_dict())


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_layer_matches_torch_nn(norm_first):
    config = tiny_config(norm_first=norm_first, dropout=0.0)
    config._attn_implementation = "eager"
    ours = VanillaTransformerEncoderLayer(config).eval()
    ref = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_attention(ours.self_attn, ref.self_attn)
    copy_feed_forward(ours, ref)
    ours.self_attn_layer_norm.load_state_dict(ref.norm1.state_dict())
    ours.final_layer_norm.load_state_dict(ref.norm2.state_dict())

    x = torch.randn(3, 6, 16)
    keep = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])
    with torch.no_grad():
        expected = ref(x, src_key_padding_mask=keep == 0)
        got = ours(x, additive_mask(keep))
    real = keep.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_decoder_layer_matches_torch_nn(norm_first):
    config = tiny_config(norm_first=norm_first, dropout=0.0)
    config._attn_implementation = "eager"
    ours = VanillaTransformerDecoderLayer(config, layer_idx=0).eval()
    ref = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_attention(ours.self_attn, ref.self_attn)
    copy_attention(ours.encoder_attn, ref.multihead_attn)
    copy_feed_forward(ours, ref)
    ours.self_attn_layer_norm.load_state_dict(ref.norm1.state_dict())
    ours.encoder_attn_layer_norm.load_state_dict(ref.norm2.state_dict())
    ours.final_layer_norm.load_state_dict(ref.norm3.state_dict())

    tgt, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    tgt_keep = torch.tensor([[1] * 5, [1] * 3 + [0] * 2])
    src_keep = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    self_mask = additive_mask(tgt_keep).expand(2, 1, 5, 5).masked_fill(causal, torch.finfo(torch.float32).min)
    with torch.no_grad():
        expected = ref(
            tgt, memory, tgt_mask=causal, tgt_key_padding_mask=tgt_keep == 0, memory_key_padding_mask=src_keep == 0
        )
        got = ours(tgt, self_mask, memory, encoder_attention_mask=additive_mask(src_keep))
    real = tgt_keep.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)


def test_pre_norm_stacks_end_with_a_layer_norm_and_post_norm_stacks_do_not():
    assert make_model(norm_first=True).model.encoder.layer_norm is not None
    assert make_model(norm_first=True).model.decoder.layer_norm is not None
    assert make_model().model.encoder.layer_norm is None


# --- parameters, tying ----------------------------------------------------------------------------------------------


def test_parameter_names_follow_marian_and_bart():
    model = make_model()
    names = set(model.state_dict())
    assert model.get_parameter("model.encoder.embed_tokens.weight") is model.get_parameter("model.shared.weight")
    for name in [
        "model.shared.weight",
        "model.encoder.layers.1.self_attn.q_proj.weight",
        "model.encoder.layers.1.self_attn.out_proj.bias",
        "model.encoder.layers.0.self_attn_layer_norm.weight",
        "model.decoder.layers.1.encoder_attn.v_proj.weight",
        "model.decoder.layers.1.encoder_attn_layer_norm.bias",
        "model.decoder.layers.0.fc1.weight",
        "model.decoder.layers.0.fc2.bias",
        "model.decoder.layers.0.final_layer_norm.weight",
        "lm_head.weight",
    ]:
        assert name in names, name
    pre_norm = set(make_model(norm_first=True).state_dict())
    assert {"model.encoder.layer_norm.weight", "model.decoder.layer_norm.weight"} <= pre_norm


def test_source_target_and_output_embeddings_are_one_matrix_saved_once(tmp_path):
    from safetensors import safe_open

    model = make_model()
    shared = model.model.shared.weight
    assert model.model.encoder.embed_tokens.weight is shared
    assert model.model.decoder.embed_tokens.weight is shared
    assert model.lm_head.weight is shared
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        saved = set(f.keys())
    assert "model.shared.weight" in saved
    assert not saved & {"lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"}
    reloaded, info = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert reloaded.lm_head.weight is reloaded.model.shared.weight
    assert reloaded.model.encoder.embed_tokens.weight is reloaded.model.shared.weight


@pytest.mark.parametrize("model_class", [VanillaTransformerModel, VanillaTransformerForConditionalGeneration])
def test_a_folder_without_the_embedding_loads_a_model_that_runs(tmp_path, model_class):
    """Weights missing from a folder are initialised like the rest of a new model, the shared embedding included
    (not left on the meta device)."""
    from safetensors.torch import load_file, save_file

    model_class(tiny_config()).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    save_file(
        {k: v for k, v in weights.items() if "shared" not in k}, tmp_path / "model.safetensors", {"format": "pt"}
    )
    loaded, info = model_class.from_pretrained(tmp_path, output_loading_info=True)
    prefix = "model." if model_class is VanillaTransformerForConditionalGeneration else ""
    assert f"{prefix}shared.weight" in info["missing_keys"]
    assert [name for name, p in loaded.named_parameters() if p.is_meta] == []
    ids = torch.tensor([[5, 6, 2]])
    assert torch.isfinite(loaded(input_ids=ids, decoder_input_ids=ids)[0]).all()


def test_the_base_model_saves_and_reloads_every_weight(tmp_path):
    """`VanillaTransformerModel` (AutoModel) round-trips: the folder holds every weight its state dict lists, the
    shared embedding once (the stacks' names for it aside), and a reload reports none missing."""
    from safetensors import safe_open

    model = VanillaTransformerModel(tiny_config())
    model.save_pretrained(tmp_path)
    aliases = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert set(f.keys()) == set(model.state_dict()) - aliases
    reloaded, info = VanillaTransformerModel.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert not reloaded._keys_to_ignore_on_save
    for name, value in model.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[name], value)
    assert reloaded.encoder.embed_tokens is reloaded.decoder.embed_tokens is reloaded.shared


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_the_encoder_is_a_module_holding_everything_it_uses(tie):
    """`get_encoder()` alone: its state dict holds its embeddings, `.to()` moves them, and it encodes as before."""
    model = make_model(tie_word_embeddings=tie).eval()
    encoder = model.get_encoder()
    assert "embed_tokens.weight" in encoder.state_dict()
    assert {id(p) for p in encoder.parameters()} >= {id(model.get_input_embeddings().weight)}
    input_ids, attention_mask, _ = random_batch()
    expected = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    encoder.to(torch.float64)
    assert model.get_input_embeddings().weight.dtype == torch.float64
    got = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    torch.testing.assert_close(got.float(), expected, atol=1e-5, rtol=1e-5)


def test_untied_model_has_three_independent_matrices_and_round_trips(tmp_path):
    model = make_model(tie_word_embeddings=False)
    assert model.model.shared is None
    weights = [model.model.encoder.embed_tokens.weight, model.model.decoder.embed_tokens.weight, model.lm_head.weight]
    assert len({w.data_ptr() for w in weights}) == 3
    model.save_pretrained(tmp_path)
    reloaded, info = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == set()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[key], value)


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_resize_token_embeddings_keeps_ties_and_runs(tie):
    model = make_model(tie_word_embeddings=tie)
    model.resize_token_embeddings(120)
    assert model.config.vocab_size == 120
    assert model.model.encoder.embed_tokens.weight.shape[0] == 120
    assert model.model.decoder.embed_tokens.weight.shape[0] == 120
    assert model.lm_head.weight.shape[0] == 120
    if tie:
        assert model.lm_head.weight is model.model.shared.weight is model.model.decoder.embed_tokens.weight
    ids = torch.tensor([[110, 115, 2]])
    assert model(input_ids=ids, decoder_input_ids=ids).logits.shape == (1, 3, 120)


def test_init_is_normal_with_init_std_zero_biases_and_a_zero_padding_row():
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=2000, d_model=64, init_std=0.05))
    weight = model.model.shared.weight
    assert torch.all(weight[0] == 0)
    assert abs(weight[1:].std().item() - 0.05) < 0.002
    fc1 = model.model.encoder.layers[0].fc1
    assert abs(fc1.weight.std().item() - 0.05) < 0.005 and torch.all(fc1.bias == 0)


# --- masks, backends, numerics ---------------------------------------------------------------------------------------


def test_eager_and_sdpa_agree_with_padding():
    eager = make_model("eager")
    sdpa = make_model("sdpa")
    sdpa.load_state_dict(eager.state_dict())
    input_ids, attention_mask, labels = random_batch()
    with torch.no_grad():
        a = eager(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        b = sdpa(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.loss, b.loss)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_encoder_and_cross_attention_are_not_causal(attn):
    """Changing the last source token must change the encoder state of the first one (no mask: the SDPA fast path)."""
    model = make_model(attn, dropout=0.0)
    ids = torch.tensor([[5, 6, 7, 8, 2]])
    other = ids.clone()
    other[0, -2] = 9
    with torch.no_grad():
        first = model.model.encoder(input_ids=ids).last_hidden_state[0, 0]
        second = model.model.encoder(input_ids=other).last_hidden_state[0, 0]
        dec = torch.tensor([[1]])
        logits_a = model(input_ids=ids, decoder_input_ids=dec).logits
        logits_b = model(input_ids=other, decoder_input_ids=dec).logits
    assert not torch.allclose(first, second)
    assert not torch.allclose(logits_a, logits_b)


@pytest.mark.parametrize("attn", ["eager", "sdpa", "flex_attention"])
def test_all_padding_row_gives_no_nan_in_logits_loss_or_gradients(attn):
    model = make_model(attn).train()
    input_ids, attention_mask, labels = random_batch()
    attention_mask[1] = 0  # a whole source row of padding
    input_ids[1] = 0
    backward = attn != "flex_attention" or torch.cuda.is_available()  # FlexAttention has no CPU backward in torch
    with torch.set_grad_enabled(backward):
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)
    if not backward:
        return
    out.loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is None or torch.isfinite(param.grad).all(), name


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_precision_with_padding_is_finite(attn, dtype):
    model = make_model(attn).to(dtype)
    input_ids, attention_mask, labels = random_batch()
    attention_mask[2] = 0
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_padded_rows_give_the_same_logits_as_alone(attn):
    model = make_model(attn)
    input_ids, attention_mask, labels = random_batch()
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    decoder_attention_mask = (labels != -100).long()
    with torch.no_grad():
        batched = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
        ).logits
        for row in range(input_ids.shape[0]):
            src, tgt = attention_mask[row].bool(), decoder_attention_mask[row].bool()
            alone = model(
                input_ids=input_ids[row, src][None], decoder_input_ids=decoder_input_ids[row, tgt][None]
            ).logits
            torch.testing.assert_close(batched[row, tgt], alone[0], atol=1e-5, rtol=1e-5)


def test_left_and_right_padding_give_the_same_encoder_states():
    model = make_model()
    ids = torch.tensor([[5, 6, 7, 2]])
    right = torch.tensor([[5, 6, 7, 2, 0, 0]]), torch.tensor([[1, 1, 1, 1, 0, 0]])
    left = torch.tensor([[0, 0, 5, 6, 7, 2]]), torch.tensor([[0, 0, 1, 1, 1, 1]])
    with torch.no_grad():
        alone = model.model.encoder(input_ids=ids).last_hidden_state[0]
        r = model.model.encoder(input_ids=right[0], attention_mask=right[1]).last_hidden_state[0, :4]
        l = model.model.encoder(input_ids=left[0], attention_mask=left[1]).last_hidden_state[0, 2:]
    torch.testing.assert_close(r, alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(l, alone, atol=1e-5, rtol=1e-5)


def test_mask_dtypes_bool_int_float_agree():
    model = make_model()
    input_ids, attention_mask, _ = random_batch()
    dec = torch.ones(3, 2, dtype=torch.long)
    with torch.no_grad():
        outs = [
            model(input_ids=input_ids, attention_mask=m, decoder_input_ids=dec).logits
            for m in (attention_mask, attention_mask.bool(), attention_mask.float())
        ]
    torch.testing.assert_close(outs[0], outs[1])
    torch.testing.assert_close(outs[0], outs[2])


# --- loss ------------------------------------------------------------------------------------------------------------


def test_loss_ignores_minus_100_and_equals_a_hand_computation():
    model = make_model()
    input_ids, attention_mask, labels = random_batch()
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    log_probs = out.logits.double().log_softmax(-1)
    picked = [-log_probs[b, t, labels[b, t]] for b in range(3) for t in range(5) if labels[b, t] != -100]
    torch.testing.assert_close(out.loss.double(), torch.stack(picked).mean(), atol=1e-6, rtol=1e-6)


def test_loss_uses_num_items_in_batch_for_gradient_accumulation():
    model = make_model()
    input_ids, attention_mask, labels = random_batch()
    full = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    n = int((labels != -100).sum())
    parts = [
        model(
            input_ids=input_ids[i : i + 1],
            attention_mask=attention_mask[i : i + 1],
            labels=labels[i : i + 1],
            num_items_in_batch=torch.tensor(n),
        ).loss
        for i in range(3)
    ]
    torch.testing.assert_close(sum(parts), full, atol=1e-6, rtol=1e-6)


def test_loss_of_a_batch_without_targets_is_zero_not_nan():
    model = make_model().train()
    input_ids, attention_mask, labels = random_batch()
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=torch.full_like(labels, -100))
    assert out.loss.item() == 0.0
    out.loss.backward()


def test_labels_build_decoder_inputs_by_shifting_right():
    model = make_model()
    labels = torch.tensor([[5, 6, 2, -100]])
    assert model.prepare_decoder_input_ids_from_labels(labels).tolist() == [[1, 5, 6, 2]]
    explicit = model(input_ids=labels.clamp(min=0), decoder_input_ids=torch.tensor([[1, 5, 6, 2]]), labels=labels)
    implicit = model(input_ids=labels.clamp(min=0), labels=labels)
    torch.testing.assert_close(explicit.logits, implicit.logits)


# --- outputs ---------------------------------------------------------------------------------------------------------


def test_hidden_states_and_attentions_have_the_expected_shapes():
    model = make_model()
    input_ids, attention_mask, labels = random_batch()
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        labels=labels,
        output_hidden_states=True,
        output_attentions=True,
    )
    assert len(out.encoder_hidden_states) == 3 and out.encoder_hidden_states[0].shape == (3, 7, 16)
    assert len(out.decoder_hidden_states) == 3 and out.decoder_hidden_states[-1].shape == (3, 5, 16)
    assert out.encoder_attentions[0].shape == (3, 4, 7, 7)
    assert out.decoder_attentions[0].shape == (3, 4, 5, 5)
    assert out.cross_attentions[1].shape == (3, 4, 5, 7)
    # causal: no weight on future positions; padding: no weight on padded source tokens
    assert torch.all(out.decoder_attentions[0][..., 0, 1:] == 0)
    assert torch.all(out.cross_attentions[0][1, :, :, 5:] == 0)


def test_hidden_states_selected_by_index_keep_the_padded_layout():
    model = make_model()
    input_ids, attention_mask, labels = random_batch()
    for selection in ([0, -1], [1]):
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, output_hidden_states=selection)
        for states, shape in ((out.encoder_hidden_states, (3, 7, 16)), (out.decoder_hidden_states, (3, 5, 16))):
            recorded = [state.shape for state in states if state is not None]  # the others are None
            assert recorded and recorded == [shape] * len(recorded)


def test_a_plain_cache_is_refused_by_the_encoder_decoder_model():
    model = make_model()
    input_ids, attention_mask, labels = random_batch()
    with pytest.raises(TypeError, match="cache must be an `EncoderDecoderCache`, got DynamicCache"):
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **{CACHE_NAME: DynamicCache()})


def test_return_dict_false_gives_a_tuple_starting_with_loss_and_logits():
    model = make_model()
    input_ids, attention_mask, labels = random_batch()
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, return_dict=False)
    assert isinstance(out, tuple)
    ref = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    torch.testing.assert_close(out[0], ref.loss)
    torch.testing.assert_close(out[1], ref.logits)


def test_base_model_returns_decoder_and_encoder_states():
    config = tiny_config()
    model = VanillaTransformerModel(config).eval()
    input_ids, attention_mask, labels = random_batch()
    out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=labels.clamp(min=0))
    assert out.last_hidden_state.shape == (3, 5, 16)
    assert out.encoder_last_hidden_state.shape == (3, 7, 16)


def test_gradient_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    model = make_model(dropout=0.0).train()
    input_ids, attention_mask, labels = random_batch()

    def grads():
        model.zero_grad()
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain = grads()
    model.activation_checkpointing_enable()
    checkpointed = grads()
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], atol=1e-6, rtol=1e-5, msg=name)


def test_every_parameter_gets_a_gradient():
    """DDP with find_unused_parameters=False needs this."""
    for tie in (True, False):
        model = make_model(tie_word_embeddings=tie).train()
        input_ids, attention_mask, labels = random_batch()
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        assert [n for n, p in model.named_parameters() if p.grad is None] == []


# --- padding is skipped, not computed --------------------------------------------------------------------------------


def test_a_padded_training_batch_gives_the_gradients_of_its_rows_alone():
    """Position-wise layers skip padded tokens; the result must be what each sequence gives on its own."""
    model = make_model(dropout=0.0, label_smoothing=0.1).train()
    input_ids, attention_mask, labels = random_batch()
    decoder_attention_mask = (labels != -100).long()
    n = int(decoder_attention_mask.sum())

    def grads(**batch):
        model.zero_grad()
        model(**batch, num_items_in_batch=torch.tensor(n)).loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    batched = grads(
        input_ids=input_ids,
        attention_mask=attention_mask,
        labels=labels,
        decoder_attention_mask=decoder_attention_mask,
    )
    rows = [
        grads(input_ids=input_ids[i, attention_mask[i].bool()][None], labels=labels[i, labels[i] != -100][None])
        for i in range(3)
    ]
    for name, grad in batched.items():
        torch.testing.assert_close(grad, sum(row[name] for row in rows), atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_rows_rounded_up_with_padded_positions_change_nothing_a_real_token_sees(attn_implementation, monkeypatch):
    """On a GPU each stack packs its rows up to a multiple of `PACKED_ROWS_MULTIPLE` with padded positions (a few
    matmul shapes per run), here some of a source row and a target row that are all padding (whose real tokens attend
    to padding alone): the loss, the gradients and the stacks' outputs stay those of the real rows."""
    model = make_model(attn_implementation, dropout=0.0, label_smoothing=0.1).train()
    input_ids, attention_mask, labels = random_batch(batch_size=4, source_length=9, target_length=8)
    input_ids[1], attention_mask[1], labels[3] = 0, 0, -100

    def step():
        model.zero_grad()
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        out.loss.backward()
        encoder_states = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return out, encoder_states, {name: p.grad.clone() for name, p in model.named_parameters()}

    rows = record_packed_rows(monkeypatch)
    packed, packed_states, packed_grads = step()
    monkeypatch.setitem(padding.PACKED_ROWS_MULTIPLE, "cpu", 5)
    rounded, rounded_states, rounded_grads = step()
    assert rows == [17, 21, 17, 20, 25, 20]  # source 17 and target 21 real tokens: 20 and 25 rows rounded up

    torch.testing.assert_close(rounded.loss, packed.loss, atol=1e-6, rtol=1e-6)
    has_target = labels != -100
    assert torch.all(rounded.logits[~has_target] == 0)
    torch.testing.assert_close(rounded.logits[has_target], packed.logits[has_target], atol=1e-5, rtol=1e-5)
    assert torch.all(rounded_states[~attention_mask.bool()] == 0)
    torch.testing.assert_close(rounded_states, packed_states, atol=1e-5, rtol=1e-5)
    for name, grad in packed_grads.items():
        torch.testing.assert_close(rounded_grads[name], grad, atol=1e-6, rtol=1e-5, msg=name)


def test_training_mode_gives_the_logits_of_evaluation_where_a_row_has_targets_and_zeros_after():
    """In training the decoder skips what follows a row's last target: the states there are 0, and so the logits."""
    model = make_model(dropout=0.0)
    input_ids, attention_mask, labels = random_batch()
    model.eval()
    full = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    model.train()
    sparse = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    has_target = labels != -100
    assert torch.all(sparse.logits[~has_target] == 0)
    torch.testing.assert_close(sparse.logits[has_target], full.logits[has_target], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sparse.loss, full.loss, atol=1e-6, rtol=1e-6)


def test_label_smoothing_matches_transformers_label_smoother():
    from transformers.trainer_pt_utils import LabelSmoother

    model = make_model(dropout=0.0, label_smoothing=0.1)
    input_ids, attention_mask, labels = random_batch()
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    reference = LabelSmoother(epsilon=0.1)(out, labels)
    torch.testing.assert_close(out.loss, reference, atol=1e-6, rtol=1e-6)
    n = int((labels != -100).sum())
    rows = [
        model(
            input_ids=input_ids[i : i + 1],
            attention_mask=attention_mask[i : i + 1],
            labels=labels[i : i + 1],
            num_items_in_batch=torch.tensor(n),
        ).loss
        for i in range(labels.shape[0])
    ]
    torch.testing.assert_close(sum(rows), out.loss, atol=1e-6, rtol=1e-5)  # gradient accumulation = one batch


# --- host synchronisations ------------------------------------------------------------------------------------------


class HostReads(torch.overrides.TorchFunctionMode):
    """Counts the calls that make the host wait for a tensor's values: on an accelerator each one stalls the stream."""

    READS = {"__bool__", "__int__", "__float__", "__index__", "item", "tolist", "cpu", "numpy", "nonzero", "equal"}
    READS |= {"masked_select", "unique", "unique_consecutive", "allclose", "repeat_interleave"}

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        boolean_index = name in ("__getitem__", "__setitem__") and any(
            isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in args[1:2]
        )
        if name in self.READS or boolean_index:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("decoder_mask", [False, True], ids=["labels-only", "with-decoder-mask"])
def test_a_training_step_reads_back_only_which_tokens_are_real(decoder_mask, monkeypatch):
    """Reads only to find the real tokens of the padded masks (tests.helpers counts them); the masks add none, nor do
    the input checks on an accelerator: their token-id range check reads CPU tensors only (a no-op here)."""
    monkeypatch.setattr(input_checks, "check_token_ids", lambda *args, **kwargs: None)
    model = make_model(attn_implementation="sdpa", label_smoothing=0.1).train()
    input_ids, attention_mask, labels = random_batch()
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    if decoder_mask:
        batch["decoder_attention_mask"] = (labels != -100).long()
    with HostReads() as reads:
        model(**batch).loss.backward()
    assert len(reads.calls) == HOST_READS_PER_TRAINING_STEP, reads.calls

    with HostReads() as reads:  # evaluation without masks: nothing to find out
        model.eval()(input_ids=input_ids, labels=labels)
    assert reads.calls == []


FSDP_SCRIPT = """
import os, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from tests.helpers import random_batch, tiny_config
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gloo", rank=0, world_size=1)
torch.manual_seed(0)
model = VanillaTransformerForConditionalGeneration(tiny_config(dropout=0.0))
input_ids, attention_mask, labels = random_batch()
expected = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.item()
# accelerate's FSDP2 grouping: the layers, then the tied embeddings, then the rest
for module in list(model.modules()):
    if type(module).__name__.endswith("Layer"):
        fully_shard(module)
fully_shard([model.get_input_embeddings(), model.get_output_embeddings()], reshard_after_forward=False)
fully_shard(model)
loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
loss.backward()
assert abs(loss.item() - expected) < 1e-5, (loss.item(), expected)
assert model.model.encoder.embed_tokens.weight is model.lm_head.weight
print(sum(p.numel() for p in model.parameters()))
"""


def test_fsdp2_shards_the_tied_embeddings_as_one_weight():
    """accelerate's FSDP2 puts the input and output embeddings in one group: the encoder's and decoder's embeddings
    must be that module, or their shared weight sits in two groups (an error, or silently untied weights)."""
    done = subprocess.run(
        [sys.executable, "-c", FSDP_SCRIPT],
        cwd=ROOT,
        env={**os.environ, "PORT": str(free_port())},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = sum(p.numel() for p in make_model(dropout=0.0).parameters())
    assert int(done.stdout.split()[-1]) == expected
