"""Exact conversion to and from transformers' MarianMTModel: equal logits, identical generation, refusals by name."""

import json

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, MarianConfig, MarianMTModel

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration, cli
from hf_vanilla_transformer.interop.marian import export_marian, from_marian, marian_permutation, to_marian
from tests.helpers import TINY, random_batch, tiny_config, tiny_tokenizer


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Generation on one thread: tiny models gain nothing from more, and on a busy machine OpenMP threads oversubscribe
    the cores (10x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def peaked_model(**overrides) -> VanillaTransformerForConditionalGeneration:
    """A random model whose next-token distributions are peaked (large init), so that no near-tie decides a token."""
    return VanillaTransformerForConditionalGeneration(tiny_config(dropout=0.0, init_std=0.3, **overrides)).eval()


def assert_same_logits(ours, marian, atol=1e-5):
    input_ids, attention_mask, labels = random_batch()  # right padding, as tokenizers produce it
    decoder_input_ids = ours.prepare_decoder_input_ids_from_labels(labels)
    with torch.no_grad():
        expected = ours(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        actual = marian(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(actual, expected, atol=atol, rtol=0)


def assert_same_generation(ours, marian):
    input_ids, attention_mask, _ = random_batch(batch_size=4, source_length=9, seed=1)
    for settings in (dict(num_beams=1), dict(num_beams=4, length_penalty=0.6, early_stopping=True)):
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=12, do_sample=False)
        expected = ours.generate(**kwargs, **settings)
        assert torch.equal(marian.generate(**kwargs, **settings), expected), settings


def test_permutation_turns_our_encoding_into_marians():
    model = peaked_model()
    marian = to_marian(model)
    ours = model.model.encoder.embed_positions(torch.arange(64))
    table = marian.model.encoder.embed_positions.weight
    torch.testing.assert_close(ours[:, marian_permutation(16)], table, atol=1e-5, rtol=0)
    assert torch.equal(marian_permutation(16)[marian_permutation(16).argsort()], torch.arange(16))


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_to_marian_same_logits_and_generation(tied):
    model = peaked_model(tie_word_embeddings=tied)
    marian = to_marian(model)
    assert isinstance(marian, MarianMTModel) and not marian.training
    assert marian.config.share_encoder_decoder_embeddings is tied and marian.config.tie_word_embeddings is tied
    assert (marian.lm_head.weight is marian.model.shared.weight) if tied else not hasattr(marian.model, "shared")
    assert not marian.final_logits_bias.any()
    assert_same_logits(model, marian)
    assert_same_generation(model, marian)


def test_round_trip_restores_every_weight():
    model = peaked_model(activation_function="gelu", scale_embedding=False)
    back = from_marian(to_marian(model))
    assert back.config.activation_function == "gelu" and back.config.scale_embedding is False
    expected = model.state_dict()
    assert set(back.state_dict()) == set(expected)
    for name, weight in back.state_dict().items():
        assert torch.equal(weight, expected[name]), name


def opus_style_marian(**overrides) -> MarianMTModel:
    """A MarianMTModel the way OPUS-MT checkpoints are laid out: pad is the last id and also the decoder start, no BOS,
    SiLU ("swish") activation, scaled embeddings."""
    torch.manual_seed(0)
    settings = dict(
        **TINY,  # the suite's tiny sizes: Marian names them as this package's config does
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=98,
        decoder_start_token_id=98,
        eos_token_id=2,
        bos_token_id=None,
        forced_eos_token_id=None,
        dropout=0.0,
        init_std=0.3,
    )
    return MarianMTModel(MarianConfig(**{**settings, **overrides})).eval()


@pytest.mark.parametrize("tie_output", [True, False], ids=["tied-output", "untied-output"])
def test_from_marian_same_logits_and_beams(tie_output):
    marian = opus_style_marian(tie_word_embeddings=tie_output)
    if not tie_output:
        torch.nn.init.normal_(marian.lm_head.weight, std=0.3)
    ours = from_marian(marian)
    assert isinstance(ours, VanillaTransformerForConditionalGeneration)
    assert ours.config.tie_word_embeddings is tie_output
    assert (ours.config.decoder_start_token_id, ours.config.pad_token_id) == (98, 98)
    assert_same_logits(marian, ours)
    assert_same_generation(marian, ours)


def test_from_marian_folder(tmp_path):
    marian = opus_style_marian()
    marian.generation_config.num_beams = 3
    marian.save_pretrained(tmp_path)
    ours = from_marian(tmp_path)
    assert ours.generation_config.num_beams == 3
    assert_same_logits(marian, ours)


@pytest.mark.parametrize(
    "overrides, setting",
    [
        (dict(norm_first=True), "norm_first"),
        (dict(stack_layer_norm=True), "stack_layer_norm"),
        (dict(layer_norm_eps=1e-6), "layer_norm_eps"),
    ],
)
def test_to_marian_refuses_what_marian_cannot_express(overrides, setting):
    with pytest.raises(ValueError, match=f"config.{setting}="):
        to_marian(peaked_model(**overrides))


def test_from_marian_refusals():
    marian = opus_style_marian()
    marian.final_logits_bias[0, 5] = 1.0
    with pytest.raises(ValueError, match="final_logits_bias is not zero"):
        from_marian(marian)

    marian = opus_style_marian()
    with torch.no_grad():
        marian.model.decoder.embed_positions.weight.add_(0.1)  # e.g. learned positions loaded from a checkpoint
    with pytest.raises(ValueError, match="model.decoder.embed_positions is not the sinusoidal encoding"):
        from_marian(marian)

    marian = opus_style_marian()
    marian.config.normalize_before = True  # a key older BART-style configs carry
    with pytest.raises(ValueError, match="config.normalize_before=True"):
        from_marian(marian)

    marian = opus_style_marian(share_encoder_decoder_embeddings=False, decoder_vocab_size=120)
    with pytest.raises(ValueError, match="decoder_vocab_size=120"):
        from_marian(marian)

    with pytest.raises(TypeError, match="must be a MarianMTModel or a folder"):
        from_marian(peaked_model())


def test_export_marian_folder_loads_without_remote_code(tmp_path):
    tokenizer = tiny_tokenizer()
    model = VanillaTransformerForConditionalGeneration(
        tiny_config(vocab_size=len(tokenizer), dropout=0.0, init_std=0.3)
    ).eval()
    model.generation_config = model.config.paper_generation_config(max_length=64)
    model.save_pretrained(tmp_path / "ours")
    tokenizer.save_pretrained(tmp_path / "ours")

    out = export_marian(tmp_path / "ours", tmp_path / "marian")
    argv = ["export", "marian", "--model", str(tmp_path / "ours"), "--output_dir", str(tmp_path / "cli")]
    assert cli.main(argv) == 0
    assert (tmp_path / "cli" / "model.safetensors").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "marian" and "auto_map" not in config
    assert not list(out.glob("*.py"))
    marian = AutoModelForSeq2SeqLM.from_pretrained(out)  # no trust_remote_code: plain transformers
    assert isinstance(marian, MarianMTModel)
    assert marian.generation_config.num_beams == 4 and marian.generation_config.length_penalty == 0.6
    marian_tokenizer = AutoTokenizer.from_pretrained(out)
    batch = marian_tokenizer(["Wo ist der Bahnhof?", "Ich habe Hunger."], return_tensors="pt", padding=True)
    assert torch.equal(marian.generate(**batch, max_new_tokens=10), model.generate(**batch, max_new_tokens=10))


def test_a_model_without_a_length_limit_exports_one_so_marian_does_not_stop_at_20_tokens():
    model = VanillaTransformerForConditionalGeneration(tiny_config(dropout=0.0)).eval()
    model.generation_config = model.config.paper_generation_config(max_length=None)  # as folders saved before 0.2
    assert to_marian(model).generation_config.max_length == model.config.max_position_embeddings


def test_verify_export_refuses_an_export_folder_in_one_line_naming_the_folder_it_wants(tmp_path, capsys):
    tokenizer = tiny_tokenizer()
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer))).eval()
    model.save_pretrained(tmp_path / "ours")
    tokenizer.save_pretrained(tmp_path / "ours")
    marian = export_marian(tmp_path / "ours", tmp_path / "marian")
    onnx = export_marian(tmp_path / "ours", tmp_path / "onnx")  # an `export onnx` folder: the Marian folder + graphs
    (onnx / "onnx").mkdir()
    (onnx / "onnx" / "encoder_model.onnx").write_bytes(b"")
    for folder, kind in ((marian, "a MarianMTModel folder"), (onnx, "an ONNX model folder")):
        capsys.readouterr()
        argv = ["verify-export", "--model", str(folder), "--limit", "2", "--engines", "marian"]
        assert cli.main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1, err
        assert f"--model {folder} is {kind}" in err and "the folder it was exported from" in err, err


def test_export_onnx_says_what_a_marian_model_of_its_own_is_and_what_it_reads(tmp_path, capsys):
    opus_style_marian().save_pretrained(tmp_path / "opus-mt")
    argv = ["export", "onnx", "--model", tmp_path / "opus-mt", "--output_dir", tmp_path / "onnx"]
    assert cli.main([str(arg) for arg in argv]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        f"hf-vanilla-transformer export: error: --model {tmp_path / 'opus-mt'} is a MarianMTModel folder (model_type "
        "'marian'), not a folder of this package's model (model_type 'vanilla_transformer', "
        "VanillaTransformerForConditionalGeneration), which is what this command reads."
    )
    assert line.endswith("`hf_vanilla_transformer.interop.marian.from_marian(folder).save_pretrained(...)`.")
    assert not (tmp_path / "onnx").exists()
