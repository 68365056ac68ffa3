"""KV cache and generate(): incremental decoding, cache on/off, beams, sampling, static cache, torch.compile."""

import pytest
import torch
from transformers import DynamicCache, EncoderDecoderCache, GenerationConfig
from transformers.generation import CompileConfig

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.model.input_checks import CACHE_NAME
from tests.helpers import random_batch, tiny_config


def make_model(attn_implementation="sdpa", **overrides):
    config = tiny_config(**overrides)
    model = VanillaTransformerForConditionalGeneration._from_config(config, attn_implementation=attn_implementation)
    # A random tiny model rarely emits EOS by chance; make the outputs of different settings comparable over full
    # length.
    return model.eval()


def sources():
    input_ids, attention_mask, _ = random_batch(batch_size=3, source_length=9)
    return input_ids, attention_mask


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_step_by_step_decoding_with_cache_equals_the_full_forward(attn):
    model = make_model(attn)
    input_ids, attention_mask = sources()
    decoder_input_ids = torch.randint(4, 99, (3, 6))
    decoder_input_ids[:, 0] = 1
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
        cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
        steps = []
        for t in range(6):
            out = model(
                encoder_outputs=encoder_outputs,
                attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids[:, t : t + 1],
                **{CACHE_NAME: cache},
                use_cache=True,
            )
            cache = out.past_key_values
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_greedy_generate_equals_a_manual_greedy_loop_without_cache():
    model = make_model()
    input_ids, attention_mask = sources()
    generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8, eos_token_id=None)
    tokens = torch.full((3, 1), model.config.decoder_start_token_id)
    with torch.no_grad():
        for _ in range(8):
            logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=tokens).logits
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(generated, tokens)


@pytest.mark.parametrize("num_beams", [1, 3], ids=["greedy", "beam3"])
def test_generate_with_and_without_cache_is_identical(num_beams):
    model = make_model()
    input_ids, attention_mask = sources()
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=10, num_beams=num_beams)
    assert torch.equal(model.generate(**kwargs, use_cache=True), model.generate(**kwargs, use_cache=False))


def test_padded_rows_generate_the_same_tokens_as_alone():
    model = make_model()
    input_ids, attention_mask = sources()
    batched = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=10, eos_token_id=None)
    for row in range(3):
        alone = model.generate(
            input_ids=input_ids[row, attention_mask[row].bool()][None], max_new_tokens=10, eos_token_id=None
        )
        assert torch.equal(batched[row], alone[0])


def test_cross_attention_keys_and_values_are_projected_once_per_generation():
    model = make_model(decoder_layers=2)
    calls = []
    for layer in model.model.decoder.layers:
        layer.encoder_attn.k_proj.register_forward_hook(lambda *args: calls.append(1))
    input_ids, attention_mask = sources()
    model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=7, eos_token_id=None)
    assert len(calls) == 2  # one per decoder layer, not one per step


def test_beam_search_returns_the_requested_sequences_and_scores():
    model = make_model()
    input_ids, attention_mask = sources()
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        num_beams=4,
        num_return_sequences=2,
        max_new_tokens=6,
        length_penalty=0.6,
        return_dict_in_generate=True,
        output_scores=True,
    )
    assert out.sequences.shape[0] == 6 and out.sequences.shape[1] <= 7
    assert out.sequences_scores.shape == (6,)
    assert torch.all(out.sequences_scores[0::2] >= out.sequences_scores[1::2])  # best beam first


def test_sampling_is_reproducible_and_respects_top_k_one():
    model = make_model()
    input_ids, attention_mask = sources()
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8, do_sample=True)
    torch.manual_seed(1)
    a = model.generate(**kwargs, temperature=0.7, top_p=0.9)
    torch.manual_seed(1)
    b = model.generate(**kwargs, temperature=0.7, top_p=0.9)
    assert torch.equal(a, b)
    greedy = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8)
    assert torch.equal(model.generate(**kwargs, top_k=1), greedy)


def test_static_cache_gives_the_same_tokens_as_the_dynamic_cache():
    model = make_model()
    input_ids, attention_mask = sources()
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8, eos_token_id=None)
    assert torch.equal(model.generate(**kwargs, cache_implementation="static"), model.generate(**kwargs))


@pytest.mark.slow
def test_torch_compile_with_static_cache_gives_the_same_tokens():
    model = make_model()
    input_ids, attention_mask = sources()
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6, eos_token_id=None)
    compile_config = CompileConfig(fullgraph=True, backend="inductor")
    compile_config._compile_all_devices = True  # transformers only auto-compiles on accelerators
    compiled = model.generate(**kwargs, cache_implementation="static", compile_config=compile_config)
    assert torch.equal(compiled, model.generate(**kwargs))


def test_a_fresh_model_keeps_transformers_generation_defaults_within_its_positions():
    model = make_model()
    default = GenerationConfig()
    for name in ("num_beams", "do_sample", "length_penalty", "temperature"):
        assert getattr(model.generation_config, name) == getattr(default, name), name
    assert model.generation_config.max_length == model.config.max_position_embeddings
    assert model.generation_config.decoder_start_token_id == model.config.decoder_start_token_id
    assert model.generation_config.eos_token_id == model.config.eos_token_id


def test_the_papers_decoding_settings_are_one_call_away():
    model = make_model()
    model.generation_config = model.config.paper_generation_config()
    assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (4, 0.6)
    assert model.generation_config.pad_token_id == model.config.pad_token_id
    input_ids, attention_mask = sources()
    assert model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=4).shape[0] == 3


def test_without_a_length_limit_generate_runs_to_the_models_positions():
    """The generation config's max_length is the model's positions, not transformers' 20 new tokens; the paper's
    source length + 50 is for the translation pipeline and `translate` (tests/model/test_pipeline.py)."""
    model = make_model(max_position_embeddings=64)
    input_ids, attention_mask = sources()
    kwargs = dict(attention_mask=attention_mask, eos_token_id=None)  # never stops early
    assert model.generate(input_ids=input_ids, **kwargs).shape[1] == 64
    assert model.generate(input_ids=input_ids, max_length=5, **kwargs).shape[1] == 5
    assert model.generate(input_ids=input_ids, max_new_tokens=3, **kwargs).shape[1] == 1 + 3
