"""ONNX export: graph outputs equal PyTorch's, greedy decoding on ONNX Runtime and in transformers.js under Node
token-identical to generate(), int8 graphs, the folder layout transformers.js reads, refusals by name.

Two small models are trained in-test for a few seconds (peaked next-token distributions, so no near-tie decides a
token) and exported once each: the paper's post-norm model in the default (Marian) layout with int8 graphs, and a
pre-norm model in this package's layout through the command line.
"""

import json
import logging
import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from transformers import AutoConfig

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration, cli
from hf_vanilla_transformer.interop.onnx import _DecoderStepGraph, cache_names, export_onnx
from hf_vanilla_transformer.interop.onnx_runtime import (
    OnnxSeq2SeqLM,
    transformers_js_folder,
    transformers_js_generate,
)
from tests.helpers import SENTENCES, require_transformers_js, tiny_config, tiny_tokenizer


pytestmark = pytest.mark.slow
SOURCES, TARGETS = SENTENCES[0::2], SENTENCES[1::2]
MAX_NEW_TOKENS = 16


def train(folder: Path, **overrides) -> VanillaTransformerForConditionalGeneration:
    """A tiny model that has learnt the six German->English pairs by heart, saved with its tokenizer to `folder`."""
    tokenizer = tiny_tokenizer()
    model = VanillaTransformerForConditionalGeneration(
        tiny_config(vocab_size=len(tokenizer), dropout=0.0, **overrides)
    )
    batch = tokenizer(SOURCES, text_target=TARGETS, padding=True, return_tensors="pt")
    batch["labels"][batch["labels"] == tokenizer.pad_token_id] = -100
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # matrices this small train fastest on one thread (and a shared CPU much slower on more)
    try:
        for _ in range(100):
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def post_norm(tmp_path_factory):
    """(model, ONNX folder): the paper's post-norm model, exported in the Marian layout with int8 graphs."""
    folder = tmp_path_factory.mktemp("post_norm")
    model = train(folder / "model")
    return model, export_onnx(folder / "model", folder / "onnx", quantize=True)


@pytest.fixture(scope="module")
def pre_norm(tmp_path_factory):
    """(model, ONNX folder): a pre-norm model, exported with this package's config through the command line."""
    folder = tmp_path_factory.mktemp("pre_norm")
    model = train(folder / "model", norm_first=True, encoder_layers=1, decoder_layers=1)
    argv = ["export", "onnx", "--model", str(folder / "model"), "--output_dir", str(folder / "onnx")]
    assert cli.main([*argv, "--model_type", "vanilla_transformer"]) == 0
    return model, folder / "onnx"


@pytest.fixture(params=["post_norm", "pre_norm"])
def exported(request):
    return request.getfixturevalue(request.param)


def sources():
    """The training sources plus a shorter one, right-padded as tokenizers pad."""
    tokenizer = tiny_tokenizer()
    return tokenizer([*SOURCES, "Tom ist hier."], padding=True, return_tensors="pt")


def our_greedy(model, batch) -> np.ndarray:
    with torch.no_grad():
        ids = model.generate(**batch, max_new_tokens=MAX_NEW_TOKENS, num_beams=1, do_sample=False)
    return ids.numpy()


def until_eos(rows, eos=2) -> list[list[int]]:
    """Each row up to and including its first EOS (runtimes pad finished rows differently)."""
    rows = [list(map(int, row)) for row in rows]
    return [row[: row.index(eos) + 1] if eos in row else row for row in rows]


def session(folder: Path, name: str) -> onnxruntime.InferenceSession:
    return onnxruntime.InferenceSession(folder / "onnx" / name, providers=["CPUExecutionProvider"])


def test_the_folder_has_the_layout_transformers_js_reads(post_norm, pre_norm):
    _, folder = post_norm
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (folder / name).is_file(), name
    for name in ("encoder_model", "decoder_model_merged"):
        assert (folder / "onnx" / f"{name}.onnx").is_file() and (folder / "onnx" / f"{name}_quantized.onnx").is_file()
    assert AutoConfig.from_pretrained(folder).model_type == "marian"
    assert AutoConfig.from_pretrained(pre_norm[1]).model_type == "vanilla_transformer"

    decoder = onnx.load(folder / "onnx" / "decoder_model_merged.onnx")
    assert all(o.version >= 18 for o in decoder.opset_import if o.domain in ("", "ai.onnx"))
    (branch,) = decoder.graph.node
    assert branch.op_type == "If" and branch.input == ["use_cache_branch"]
    inputs = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in decoder.graph.input}
    assert list(inputs) == [
        "input_ids",
        "encoder_attention_mask",
        "encoder_hidden_states",
        *cache_names("past_key_values", 2),
        "use_cache_branch",
    ]
    assert inputs["input_ids"] == ["batch_size", "decoder_sequence_length"]
    assert inputs["past_key_values.1.decoder.key"] == ["batch_size", 4, "past_sequence_length", 4]
    assert inputs["past_key_values.1.encoder.value"] == ["batch_size", 4, "encoder_sequence_length", 4]
    assert [o.name for o in decoder.graph.output] == ["logits", *cache_names("present", 2)]
    # The two branches read one copy of the weights from the enclosing graph.
    weights = {t.name for t in decoder.graph.initializer}
    for branch_graph in (branch.attribute[0].g, branch.attribute[1].g):
        assert not any(len(t.dims) > 1 for t in branch_graph.initializer)
        assert weights & {name for node in branch_graph.node for name in node.input}
    encoder = session(folder, "encoder_model.onnx")
    assert [(i.name, i.shape) for i in encoder.get_inputs()] == [
        ("input_ids", ["batch_size", "encoder_sequence_length"]),
        ("attention_mask", ["batch_size", "encoder_sequence_length"]),
    ]
    assert [o.name for o in encoder.get_outputs()] == ["last_hidden_state"]


def test_encoder_and_decoder_outputs_equal_pytorch(exported):
    model, folder = exported
    batch = sources()
    mask = batch["attention_mask"].numpy().astype(bool)
    with torch.no_grad():
        expected_states = model.get_encoder()(**batch).last_hidden_state
    (states,) = session(folder, "encoder_model.onnx").run(None, {k: v.numpy() for k, v in batch.items()})
    # Padded positions are never read (cross-attention masks them): only real tokens are compared.
    np.testing.assert_allclose(states[mask], expected_states.numpy()[mask], atol=1e-4, rtol=0)

    decoder = session(folder, "decoder_model_merged.onnx")
    names = [o.name for o in decoder.get_outputs()]
    layers = model.config.decoder_layers
    decoder_input_ids = torch.tensor([[1, 5, 9]] * len(mask))  # three target tokens, then one more from the cache
    with torch.no_grad():
        expected = model(**batch, decoder_input_ids=decoder_input_ids, use_cache=True)
        expected_next = model(
            **batch, decoder_input_ids=torch.cat([decoder_input_ids, decoder_input_ids[:, :1] + 6], 1)
        )
    feeds = {
        "encoder_attention_mask": batch["attention_mask"].numpy(),
        "encoder_hidden_states": expected_states.numpy(),
        **{n: np.zeros((len(mask), 4, 0, 4), np.float32) for n in cache_names("past_key_values", layers)},
    }
    first = dict(
        zip(names, decoder.run(None, {**feeds, "input_ids": decoder_input_ids.numpy(), "use_cache_branch": [False]}))
    )
    np.testing.assert_allclose(first["logits"], expected.logits.numpy(), atol=1e-4, rtol=0)
    cache = expected.past_key_values
    for i in range(layers):
        np.testing.assert_allclose(
            first[f"present.{i}.decoder.key"], cache.self_attention_cache.layers[i].keys.numpy(), atol=1e-4
        )
        cross = cache.cross_attention_cache.layers[i].values.numpy().transpose(0, 2, 1, 3)  # (b, s, h, dh)
        actual = first[f"present.{i}.encoder.value"].transpose(0, 2, 1, 3)
        np.testing.assert_allclose(actual[mask], cross[mask], atol=1e-4)  # padded source positions are masked

    past = {name.replace("present", "past_key_values"): value for name, value in first.items() if name != "logits"}
    step = {**feeds, **past, "input_ids": decoder_input_ids[:, :1].numpy() + 6, "use_cache_branch": [True]}
    cached = dict(zip(names, decoder.run(None, step)))
    np.testing.assert_allclose(cached["logits"][:, 0], expected_next.logits[:, -1].numpy(), atol=1e-4, rtol=0)
    assert cached["present.0.decoder.key"].shape[2] == 4  # the cache grew by one token
    assert cached["present.0.encoder.key"].shape[0] == 0  # placeholder: the first step's entries stay valid


def test_onnx_runtime_greedy_is_token_identical_to_generate(exported):
    model, folder = exported
    batch = sources()
    expected = our_greedy(model, batch)
    translator = OnnxSeq2SeqLM(folder)
    actual = translator.generate(batch["input_ids"].numpy(), batch["attention_mask"].numpy(), MAX_NEW_TOKENS)
    np.testing.assert_array_equal(actual, expected)
    texts = translator.translate([*SOURCES, "Tom ist hier."], max_new_tokens=MAX_NEW_TOKENS)
    assert texts[: len(TARGETS)] == TARGETS  # the model learnt them
    assert texts == tiny_tokenizer().batch_decode(expected, skip_special_tokens=True)
    # min_new_tokens keeps EOS out of the first tokens, as in transformers (the benchmark decodes fixed lengths).
    with torch.no_grad():
        expected = model.generate(**batch, min_new_tokens=10, max_new_tokens=10, num_beams=1, do_sample=False)
    actual = translator.generate(batch["input_ids"].numpy(), batch["attention_mask"].numpy(), 10, min_new_tokens=10)
    np.testing.assert_array_equal(actual, expected.numpy())


def test_int8_graphs_are_quantized_and_translate(post_norm):
    model, folder = post_norm
    for name in ("encoder_model", "decoder_model_merged"):
        float_size = (folder / "onnx" / f"{name}.onnx").stat().st_size
        assert (folder / "onnx" / f"{name}_quantized.onnx").stat().st_size < float_size
    decoder = onnx.load(folder / "onnx" / "decoder_model_merged_quantized.onnx")
    for branch in decoder.graph.node[0].attribute:  # both branches of the If node: integer matrix products
        assert "MatMulInteger" in {node.op_type for node in branch.g.node}, branch.name
    batch = sources()
    int8 = OnnxSeq2SeqLM(folder, quantized=True)
    ids = int8.generate(batch["input_ids"].numpy(), batch["attention_mask"].numpy(), MAX_NEW_TOKENS)
    assert (ids[:, 0] == 1).all() and (ids == 2).any(axis=1).all()
    assert int8.translate(SOURCES, max_new_tokens=MAX_NEW_TOKENS) == TARGETS


@pytest.fixture(scope="module")
def transformers_js():
    return require_transformers_js()


def test_transformers_js_under_node_is_token_identical(post_norm, transformers_js):
    model, folder = post_norm
    texts = [*SOURCES, "Tom ist hier."]
    expected = our_greedy(model, sources())
    assert until_eos(transformers_js_generate(folder, texts, MAX_NEW_TOKENS)) == until_eos(expected)
    # The int8 graphs: transformers.js (dtype "q8") and the ONNX Runtime loop run the same graphs alike.
    batch = sources()
    int8 = OnnxSeq2SeqLM(folder, quantized=True).generate(
        batch["input_ids"].numpy(), batch["attention_mask"].numpy(), MAX_NEW_TOKENS
    )
    assert until_eos(transformers_js_generate(folder, texts, MAX_NEW_TOKENS, dtype="q8")) == until_eos(int8)


def test_the_traced_decoder_step_passes_the_cache_by_its_current_name():
    """The module the decoder graphs are traced from, run here with warnings as errors: it passes the cache by the
    name this transformers gives it, with no deprecation of `past_key_values` (transformers 5.24) at export."""
    model = VanillaTransformerForConditionalGeneration(tiny_config(dropout=0.0)).eval()
    ids, mask = torch.tensor([[1], [1]]), torch.ones(2, 3, dtype=torch.long)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        logits, *present = _DecoderStepGraph(model)(ids, mask, torch.zeros(2, 3, model.config.d_model))
        assert logits.shape == (2, 1, model.config.vocab_size) and len(present) == 4 * model.config.decoder_layers
        _DecoderStepGraph(model)(ids, mask, torch.zeros(2, 3, model.config.d_model), *present)


def test_refusals_name_the_setting(pre_norm, tmp_path, capsys):
    model, folder = pre_norm
    model_dir = folder.parent / "model"
    with pytest.raises(ValueError, match=r"norm_first=True.*model_type='vanilla_transformer'"):
        export_onnx(model_dir, tmp_path / "out")  # transformers.js reads only the Marian form
    assert not (tmp_path / "out").exists()
    assert cli.main(["export", "onnx", "--model", str(model_dir), "--output_dir", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("hf-vanilla-transformer export: error: Cannot convert to MarianMTModel: config.norm_first")
    with pytest.raises(ValueError, match="--model_type must be one of"):
        export_onnx(model_dir, tmp_path / "out", model_type="bart")
    with pytest.raises(FileNotFoundError, match=r"_quantized\.onnx does not exist.*quantize=True"):
        OnnxSeq2SeqLM(folder, quantized=True)
    with pytest.raises(ValueError, match="`attention_mask` must have the shape of `input_ids`"):
        OnnxSeq2SeqLM(folder).generate(np.ones((2, 3)), np.ones((2, 4)))


def test_verify_export_on_a_test_file_quietly(post_norm, tmp_path, capfd):
    test_file = tmp_path / "test.jsonl"
    test_file.write_text(
        "".join(json.dumps({"translation": {"de": s, "en": t}}) + "\n" for s, t in zip(SOURCES, TARGETS))
    )
    engines = ["onnx", "transformers.js"] if transformers_js_folder() else ["onnx"]
    argv = ["verify-export", "--model", str(post_norm[1].parent / "model"), "--test_file", str(test_file)]
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("transformers").addHandler(handler)  # transformers' logger does not propagate to pytest's
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a warning our calls cause is a failure
            assert cli.main([*argv, "--engines", "marian", *engines, "--js_sentences", "2"]) == 0
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    # generate() said at every batch that both max_new_tokens and max_length were set.
    assert [record.getMessage() for record in records] == []
    table = capfd.readouterr().out
    assert "| greedy | this package (PyTorch) | 6 | 100.0% | 100.00 | +0.00 |" in table
    assert "| greedy | ONNX Runtime float32 | 6 | 100.0% |" in table and "| greedy | ONNX Runtime int8 | 6 |" in table
    if transformers_js_folder():
        assert "| greedy | transformers.js float32 | 2 | 100.0% |" in table


def test_exports_run_quietly_and_give_their_files_the_umasks_modes(post_norm, tmp_path, capfd):
    model_dir = post_norm[1].parent / "model"
    umask = os.umask(0o022)
    try:
        for engine in ("onnx", "marian", "ctranslate2"):
            argv = ["export", engine, "--model", str(model_dir), "--output_dir", str(tmp_path / engine)]
            assert cli.main([*argv, "--quantize"] if engine == "onnx" else argv) == 0
            out, err = capfd.readouterr()
            assert out == f"Wrote {tmp_path / engine}\n" and err == "", err  # no warning a user cannot act on
            modes = {
                path.name: path.stat().st_mode & 0o777 for path in (tmp_path / engine).rglob("*") if path.is_file()
            }
            assert set(modes.values()) == {0o644}, modes  # safetensors alone would write 0600
    finally:
        os.umask(umask)
