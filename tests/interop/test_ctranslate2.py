"""Export to CTranslate2: per-token log-probabilities equal ours, greedy and beam-4 output token-identical, refusals.

The models are random with a large init (init_std=0.3), which makes next-token distributions peaked: the top two
tokens are far apart compared with float32 rounding, so no near-tie decides a token in either engine.
"""

import json
from pathlib import Path

import pytest
import torch
from transformers import GenerationConfig


ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is in the `dev` extra: pip install -e .[dev]")

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration  # noqa: E402
from hf_vanilla_transformer.errors import InputError  # noqa: E402
from hf_vanilla_transformer.interop.ctranslate2 import (  # noqa: E402
    ctranslate2_spec,
    export_ctranslate2,
    translate_options,
    vocabulary,
)
from tests.helpers import (  # noqa: E402
    SENTENCES,
    run_command,
    tiny_config,  # noqa: E402
    tiny_tokenizer,
)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Generation on one thread: tiny models gain nothing from more, and on a busy machine OpenMP threads oversubscribe
    the cores (10x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TOKENIZER = tiny_tokenizer()
LAYOUTS = {  # id -> config overrides
    "post-norm": dict(),
    "pre-norm": dict(norm_first=True),
    "post-norm+stack-norm": dict(stack_layer_norm=True),  # torch.nn.Transformer's layout
    "pre-norm-no-final-norm": dict(norm_first=True, stack_layer_norm=False),
    "gelu-eps0.5-unscaled-untied": dict(
        activation_function="gelu", layer_norm_eps=0.5, scale_embedding=False, tie_word_embeddings=False
    ),
}


def saved_model(folder: Path, **overrides) -> VanillaTransformerForConditionalGeneration:
    torch.manual_seed(0)
    config = tiny_config(**{"vocab_size": len(TOKENIZER), "dropout": 0.0, "init_std": 0.3, **overrides})
    model = VanillaTransformerForConditionalGeneration(config).eval()
    model.generation_config = config.paper_generation_config(max_length=20)
    model.save_pretrained(folder)
    TOKENIZER.save_pretrained(folder)
    return model


def source_tokens(texts=SENTENCES) -> list[list[str]]:
    return [TOKENIZER.convert_ids_to_tokens(ids) for ids in TOKENIZER(texts).input_ids]


def ct2_log_probs(model_dir, sources, targets) -> list[torch.Tensor]:
    """CTranslate2's log-probability of each target token (and of the end token it appends)."""
    translator = ctranslate2.Translator(str(model_dir), device="cpu", intra_threads=1)
    return [torch.tensor(r.log_probs) for r in translator.score_batch(sources, targets)]


def our_log_probs(model, texts, targets) -> list[torch.Tensor]:
    """Ours for the same targets, teacher-forced on a right-padded batch."""
    target_ids = [TOKENIZER.convert_tokens_to_ids(t) + [model.config.eos_token_id] for t in targets]
    labels = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(t) for t in target_ids], batch_first=True, padding_value=-100
    )
    batch = TOKENIZER(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        log_probs = model(**batch, labels=labels).logits.log_softmax(-1)
    return [log_probs[i, range(len(t)), t] for i, t in enumerate(target_ids)]


@pytest.mark.parametrize("overrides", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_log_probs_equal_ours(tmp_path, overrides):
    model = saved_model(tmp_path / "model", **overrides)
    out = export_ctranslate2(tmp_path / "model", tmp_path / "ct2")
    texts, targets = SENTENCES[0::2], source_tokens(SENTENCES[1::2])
    targets = [t[:-1] for t in targets]  # without </s>: CTranslate2 appends the end token itself
    for actual, expected in zip(
        ct2_log_probs(out, source_tokens(texts), targets), our_log_probs(model, texts, targets)
    ):
        torch.testing.assert_close(actual, expected, atol=1e-4, rtol=0)


def test_positions_start_at_table_row_0(tmp_path):
    """The check above notices an off-by-one position: a decoder table shifted by one row (CTranslate2 adding
    row step+1, as its built-in encoding does) changes the scores far beyond rounding."""
    model = saved_model(tmp_path / "model")
    spec = ctranslate2_spec(model, vocabulary(TOKENIZER, model.config.vocab_size), "<unk>")
    positions = model.model.decoder.embed_positions(torch.arange(1, model.config.max_position_embeddings + 1))
    spec.decoder.position_encodings.encodings = positions
    spec.validate()
    spec.optimize()
    (tmp_path / "shifted").mkdir()
    spec.save(str(tmp_path / "shifted"))
    texts, targets = SENTENCES[0::2], [t[:-1] for t in source_tokens(SENTENCES[1::2])]
    shifted = ct2_log_probs(tmp_path / "shifted", source_tokens(texts), targets)
    expected = our_log_probs(model, texts, targets)
    assert max((a - b).abs().max() for a, b in zip(shifted, expected)) > 0.1


@pytest.mark.parametrize("layout", ["post-norm", "pre-norm"])
def test_greedy_and_beam_search_token_identical(tmp_path, layout):
    model = saved_model(tmp_path / "model", **LAYOUTS[layout])
    out = export_ctranslate2(tmp_path / "model", tmp_path / "ct2")
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    generation_config = json.loads((out / "generation_config.json").read_text())
    assert generation_config["num_beams"] == 4 and generation_config["length_penalty"] == 0.6
    batch = TOKENIZER(SENTENCES, return_tensors="pt", padding=True)
    for num_beams in (1, 4):
        options = translate_options(model.generation_config, beam_size=num_beams)
        results = translator.translate_batch(source_tokens(), **options)
        with torch.no_grad():
            expected = model.generate(**batch, num_beams=num_beams)
        for result, row in zip(results, expected.tolist()):
            ours = [t for t in row[1:] if t not in (model.config.pad_token_id, model.config.eos_token_id)]
            assert TOKENIZER.convert_tokens_to_ids(result.hypotheses[0]) == ours, num_beams


def test_length_penalty_formula_agrees(tmp_path):
    """Both engines score a finished beam as sum(log p) / length**length_penalty, the length counting the generated
    tokens with the end token: CTranslate2's returned scores equal transformers' sequences_scores."""
    model = saved_model(tmp_path / "model")
    out = export_ctranslate2(tmp_path / "model", tmp_path / "ct2")
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    results = translator.translate_batch(
        source_tokens(), **translate_options(model.generation_config), return_scores=True
    )
    with torch.no_grad():
        expected = model.generate(
            **TOKENIZER(SENTENCES, return_tensors="pt", padding=True), output_scores=True, return_dict_in_generate=True
        ).sequences_scores
    torch.testing.assert_close(torch.tensor([r.scores[0] for r in results]), expected, atol=1e-4, rtol=0)


def test_int8_and_padded_vocabulary(tmp_path):
    """Quantized exports run; a model vocabulary larger than the tokenizer's gets placeholder tokens."""
    saved_model(tmp_path / "model", vocab_size=len(TOKENIZER) + 8)
    float32 = export_ctranslate2(tmp_path / "model", tmp_path / "float32")
    int8 = export_ctranslate2(tmp_path / "model", tmp_path / "int8", quantization="int8")
    tokens = json.loads((int8 / "shared_vocabulary.json").read_text())
    assert len(tokens) == len(TOKENIZER) + 8 and tokens[-1] == f"<unused_{len(tokens) - 1}>"
    assert (int8 / "model.bin").stat().st_size < 0.6 * (float32 / "model.bin").stat().st_size
    translator = ctranslate2.Translator(str(int8), device="cpu", compute_type="int8", intra_threads=1)
    results = translator.translate_batch(source_tokens(), beam_size=2, max_decoding_length=10)
    assert all(r.hypotheses[0] for r in results)


def test_refusals(tmp_path):
    saved_model(tmp_path / "tanh", activation_function="tanh")
    with pytest.raises(ValueError, match="config.activation_function='tanh'"):
        export_ctranslate2(tmp_path / "tanh", tmp_path / "out")
    saved_model(tmp_path / "eos", eos_token_id=[2, 3])
    with pytest.raises(ValueError, match=r"config.eos_token_id=\[2, 3\]"):
        export_ctranslate2(tmp_path / "eos", tmp_path / "out")
    saved_model(tmp_path / "small", vocab_size=len(TOKENIZER) - 1)
    with pytest.raises(ValueError, match="does not|do not belong"):
        export_ctranslate2(tmp_path / "small", tmp_path / "out")
    saved_model(tmp_path / "model")
    with pytest.raises(ValueError, match="--quantization must be"):
        export_ctranslate2(tmp_path / "model", tmp_path / "out", quantization="int4")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "model.bin").write_bytes(b"")
    with pytest.raises(InputError, match="not empty"):
        export_ctranslate2(tmp_path / "model", tmp_path / "full")


def test_translate_options():
    config = tiny_config().paper_generation_config(max_length=64)
    options = translate_options(config)
    assert options["beam_size"] == 4 and options["length_penalty"] == 0.6
    assert options["max_decoding_length"] == 63  # max_length counts the decoder start token
    assert translate_options(config, beam_size=1)["beam_size"] == 1
    config.max_new_tokens = 10
    assert translate_options(config)["max_decoding_length"] == 10
    with pytest.raises(ValueError, match="early_stopping"):
        translate_options(tiny_config().paper_generation_config(early_stopping=False), 10)
    with pytest.raises(ValueError, match="do_sample"):
        translate_options(tiny_config().paper_generation_config(do_sample=True), 10)


def test_translate_options_carry_the_papers_rule_within_the_configs_max_length(tmp_path):
    """Trained folders cap the length at the model's positions (max_length): the limit follows the batch's longest
    source (+ 50, within that cap), never transformers' default of 20 tokens; without a source length, the cap."""
    saved_model(tmp_path / "model").config.paper_generation_config().save_pretrained(tmp_path / "model")
    export = export_ctranslate2(tmp_path / "model", tmp_path / "ct2")
    config = GenerationConfig.from_pretrained(export)
    assert config.max_length == 64 and config.max_new_tokens is None
    assert translate_options(config, 12)["max_decoding_length"] == 62
    assert translate_options(config, 30)["max_decoding_length"] == 63
    assert translate_options(config, 30, max_position_embeddings=40)["max_decoding_length"] == 39
    assert translate_options(config, max_decoding_length=7)["max_decoding_length"] == 7
    assert translate_options(config)["max_decoding_length"] == 63
    config.max_length = None
    with pytest.raises(ValueError, match="pass `source_length`"):
        translate_options(config)


@pytest.mark.slow
def test_the_export_command_writes_the_folder_and_refuses_a_non_empty_one_in_one_line(tmp_path):
    saved_model(tmp_path / "model")
    arguments = ["export", "ctranslate2", "--model", tmp_path / "model", "--output_dir", tmp_path / "ct2"]
    done = run_command(*arguments, "--quantization", "int8")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ct2" / "model.bin").exists() and (tmp_path / "ct2" / "tokenizer.json").exists()
    assert json.loads((tmp_path / "ct2" / "config.json").read_text())["decoder_start_token"] == "<s>"
    again = run_command(*arguments)
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [
        f"hf-vanilla-transformer export: error: --output_dir {tmp_path / 'ct2'} is not empty: choose a new folder, "
        "or pass --overwrite to replace what it holds."
    ]
    assert run_command(*arguments, "--overwrite").returncode == 0


def test_parity_table(tmp_path):
    """`verify-export`'s measurement on a tiny model and test file: every exact export is identical."""
    from hf_vanilla_transformer.interop.parity import format_table, parity_table

    saved_model(tmp_path / "model")
    pairs = [{"translation": {"de": de, "en": en}} for de, en in zip(SENTENCES[0::2], SENTENCES[1::2])]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    rows = parity_table(tmp_path / "model", tmp_path / "test.jsonl", engines=["marian", "ctranslate2"], batch_size=4)
    assert [(r["decoding"], r["engine"]) for r in rows] == [
        (decoding, engine)
        for decoding in ("greedy", "beam 4, length penalty 0.6")
        for engine in (
            "this package (PyTorch)",
            "MarianMTModel (export_marian)",
            "CTranslate2 float32",
            "CTranslate2 int8",
        )
    ]
    for row in rows:
        if "int8" not in row["engine"]:
            assert row["identical"] == 1.0 and row["bleu_difference"] == 0.0, row
    assert "| greedy | CTranslate2 float32 | 6 | 100.0% |" in format_table(rows)
