"""demo/attention.py: the weights behind the Gradio demo's heatmaps and `plot attention`, and the pictures."""

import pytest
import torch
from PIL import Image

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration, cli
from hf_vanilla_transformer.demo.attention import attention_maps, plot_attention, plot_attention_grid, save_figure
from tests.helpers import tiny_config, tiny_tokenizer


TEXT = "Wo ist der Bahnhof?"


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    return VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))  # sdpa, dropout on


def test_weights_are_probability_rows_with_one_row_and_column_per_token(model, tokenizer):
    maps = attention_maps(model, tokenizer, TEXT, max_new_tokens=6)
    s, t, config = len(maps.source_tokens), len(maps.target_tokens), model.config
    assert maps.source_tokens == tokenizer.convert_ids_to_tokens(tokenizer(TEXT)["input_ids"])
    assert maps.decoder_input_tokens == ["<s>", *maps.target_tokens[:-1]]
    assert maps.encoder_attentions.shape == (config.encoder_layers, config.encoder_attention_heads, s, s)
    assert maps.decoder_attentions.shape == (config.decoder_layers, config.decoder_attention_heads, t, t)
    assert maps.cross_attentions.shape == (config.decoder_layers, config.decoder_attention_heads, t, s)
    for weights in (maps.encoder_attentions, maps.decoder_attentions, maps.cross_attentions):
        assert (weights >= 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    # Causal: a decoder position never attends to later ones.
    assert (maps.decoder_attentions.triu(diagonal=1) == 0).all()


def test_maps_equal_a_manual_eager_forward_over_the_generated_translation(model, tokenizer, tmp_path):
    model.save_pretrained(tmp_path)
    eager = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path, attn_implementation="eager").eval()
    maps = attention_maps(model, tokenizer, TEXT, max_new_tokens=6)
    inputs = tokenizer(TEXT, return_tensors="pt", return_token_type_ids=False)
    generated = model.eval().generate(**inputs, max_new_tokens=6)[0]
    model.train()
    assert maps.target_tokens == tokenizer.convert_ids_to_tokens(generated[1:])
    assert maps.translation == tokenizer.decode(generated, skip_special_tokens=True)
    with torch.no_grad():
        outputs = eager(**inputs, decoder_input_ids=generated[None, :-1], output_attentions=True)
    torch.testing.assert_close(maps.encoder_attentions, torch.cat(outputs.encoder_attentions))
    torch.testing.assert_close(maps.decoder_attentions, torch.cat(outputs.decoder_attentions))
    torch.testing.assert_close(maps.cross_attentions, torch.cat(outputs.cross_attentions))


def test_the_users_model_keeps_its_attention_implementation_and_training_mode(model, tokenizer):
    assert model.config._attn_implementation == "sdpa" and model.training
    attention_maps(model, tokenizer, TEXT, max_new_tokens=3)
    assert model.config._attn_implementation == "sdpa" and model.training
    with pytest.raises(ValueError):
        attention_maps(model, tokenizer, "", max_new_tokens=3)
    assert model.config._attn_implementation == "sdpa" and model.training


def test_beam_search_returns_the_n_best_and_maps_the_best(model, tokenizer):
    maps = attention_maps(model, tokenizer, TEXT, num_beams=4, num_return_sequences=3, max_new_tokens=8)
    inputs = tokenizer(TEXT, return_tensors="pt", return_token_type_ids=False)
    model.eval()
    expected = model.generate(**inputs, num_beams=4, num_return_sequences=3, max_new_tokens=8)
    model.train()
    assert maps.n_best == tokenizer.batch_decode(expected, skip_special_tokens=True)
    assert maps.translation == maps.n_best[0]
    # The best hypothesis without the padding that beam search appends to shorter ones.
    assert tokenizer.pad_token not in maps.target_tokens


def test_generation_length_comes_from_the_call_then_the_model_then_the_position_limit(model, tokenizer):
    assert len(attention_maps(model, tokenizer, TEXT, max_new_tokens=3).target_tokens) <= 3
    unset, model.generation_config.max_length = model.generation_config.max_length, 5  # with the start token
    try:
        assert len(attention_maps(model, tokenizer, TEXT).target_tokens) <= 4
    finally:
        model.generation_config.max_length = unset
    # Nothing set: not transformers' max_length of 20 but up to max_position_embeddings - 1 = 63 new tokens.
    maps = attention_maps(model, tokenizer, TEXT)
    assert len(maps.target_tokens) <= 63
    assert len(maps.target_tokens) > 20 or maps.target_tokens[-1] == "</s>"


def test_bad_text_and_bad_selections_are_clear_errors(model, tokenizer):
    with pytest.raises(TypeError, match="`text` must be a string, got int"):
        attention_maps(model, tokenizer, 42)
    with pytest.raises(ValueError, match="`text` is empty"):
        attention_maps(model, tokenizer, "   ")
    with pytest.raises(ValueError, match="tokens but the model accepts at most 64"):
        attention_maps(model, tokenizer, "Wo ist der Bahnhof? " * 40)
    maps = attention_maps(model, tokenizer, TEXT, max_new_tokens=3)
    with pytest.raises(ValueError, match=r"`kind` must be one of \['cross', 'decoder', 'encoder'\]"):
        maps.select("self")
    with pytest.raises(ValueError, match=r"`layer` must be in \[0, 2\)"):
        maps.select("cross", layer=2)
    with pytest.raises(ValueError, match=r"`head` must be in \[0, 4\)"):
        maps.select("cross", head=-1)


def test_selection_averages_over_layers_and_heads(model, tokenizer):
    maps = attention_maps(model, tokenizer, TEXT, max_new_tokens=4)
    weights, queries, keys = maps.select("cross")
    torch.testing.assert_close(weights, maps.cross_attentions.mean((0, 1)))
    assert (queries, keys) == (maps.target_tokens, maps.source_tokens)
    weights, _, _ = maps.select("encoder", layer=1)
    torch.testing.assert_close(weights, maps.encoder_attentions[1].mean(0))
    assert torch.equal(maps.select("decoder", 0, 3)[0], maps.decoder_attentions[0, 3])


def test_plots_put_the_tokens_on_the_axes(model, tokenizer, tmp_path):
    maps = attention_maps(model, tokenizer, TEXT, max_new_tokens=4)
    fig = plot_attention(maps, "cross", layer=1, head=0)
    ax = fig.axes[0]
    assert [label.get_text() for label in ax.get_xticklabels()] == maps.source_tokens
    assert [label.get_text() for label in ax.get_yticklabels()] == maps.target_tokens
    assert ax.get_title() == "cross-attention\nlayer 2, head 1"
    assert (
        plot_attention(maps, "encoder", head=2).axes[0].get_title()
        == "encoder self-attention\nhead 3, averaged over layers"
    )
    save_figure(fig, tmp_path / "one.png")
    grid = plot_attention_grid(maps, "encoder")
    assert len([ax for ax in grid.axes if ax.images]) == 2 * 4  # layers x heads
    save_figure(grid, tmp_path / "grid.png")
    assert Image.open(tmp_path / "one.png").size[0] > 0 and Image.open(tmp_path / "grid.png").size[0] > 0


def test_plot_attention_writes_every_kind_per_head_and_averaged(model, tokenizer, tmp_path, capsys):
    unset, model.generation_config.max_new_tokens = model.generation_config.max_new_tokens, 6  # small pictures
    try:
        model.save_pretrained(tmp_path / "model")
    finally:
        model.generation_config.max_new_tokens = unset
    tokenizer.save_pretrained(tmp_path / "model")
    argv = ["plot", "attention", "--model", str(tmp_path / "model"), "--text", TEXT]
    assert cli.main([*argv, "--output_dir", str(tmp_path / "out")]) == 0
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == sorted(
        f"{kind}_attention{suffix}.png" for kind in ("encoder", "decoder", "cross") for suffix in ("", "_average")
    )
    assert f"{TEXT}\n  -> " in capsys.readouterr().out
    argv = [
        "plot",
        "attention",
        "--model",
        str(tmp_path / "model"),
        "--text",
        " ",
        "--output_dir",
        str(tmp_path / "x"),
    ]
    assert cli.main(argv) == 2
    assert "error: --text: `text` is empty" in capsys.readouterr().err


def test_plot_positional_encoding_draws_the_models_encoding(tmp_path, capsys):
    def plot(*argv):
        return cli.main(["plot", "positional-encoding", *map(str, argv)])

    assert plot("--output", tmp_path / "pe.png", "--d_model", 64, "--positions", 50) == 0
    assert Image.open(tmp_path / "pe.png").size[0] > 0
    assert plot("--output", tmp_path / "pe.png") == 2
    assert "pe.png already exists: choose another file, or pass --overwrite" in capsys.readouterr().err
    assert plot("--output", tmp_path / "x.png", "--d_model", 63) == 2
    assert "--d_model must be an even number" in capsys.readouterr().err
    assert plot("--output", tmp_path / "x.png", "--dimensions", 300) == 2
    assert "--dimensions: 300 is outside [0, 256)" in capsys.readouterr().err
