"""`--compile`: the torch engine's static-cache path translates as the dynamic cache does (greedy and beam, n-best,
scores, order, a batch filled up with rows that are dropped), in a bounded set of batch shapes; the option's rule and
its errors."""

import dataclasses
import functools
import json
import time

import pytest
import torch
from transformers import CompileConfig

from hf_vanilla_transformer import cli
from hf_vanilla_transformer.data.corpus import BUNDLED_CORPUS
from hf_vanilla_transformer.translate import backends
from hf_vanilla_transformer.translate.backends import COMPILE_MIN_LINES, uses_static_cache
from hf_vanilla_transformer.translate.io import InputError
from hf_vanilla_transformer.translate.options import DecodeOptions, EngineOptions
from hf_vanilla_transformer.translate.translator import load_translator
from tests.helpers import tiny_translator_dir


CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture(scope="module")
def model_dir():
    return str(tiny_translator_dir())


@pytest.fixture(scope="module")
def lines():
    """Test-split sentences of 4 to 40-odd tokens, a few lines of several sentences (split, then joined), a blank."""
    with open(BUNDLED_CORPUS / "test.jsonl", encoding="utf-8") as f:
        german = [json.loads(line)["translation"]["de"] for _, line in zip(range(50), f)]
    return german[:40] + ["", *(" ".join(german[i : i + 4]) for i in range(0, 20, 4))] + german[40:]


def same_translations(expected, actual):
    assert [t.source for t in actual] == [t.source for t in expected]
    for e, a in zip(expected, actual):
        assert [(h.text, h.tokens, h.reached_length_limit) for h in a.hypotheses] == [
            (h.text, h.tokens, h.reached_length_limit) for h in e.hypotheses
        ]
        for h, g in zip(e.hypotheses, a.hypotheses):  # the source padding differs: the sums, in the last bits
            assert g.token_scores == pytest.approx(h.token_scores, abs=1e-5)
            assert g.score == pytest.approx(h.score, abs=1e-5)


@pytest.mark.parametrize(
    "decoding",
    [
        dict(),
        dict(num_beams=4, nbest=3, length_penalty=0.6),
        dict(num_beams=3, early_stopping=False),
    ],
    ids=["greedy", "beam-nbest", "beam-no-early-stopping"],
)
def test_the_static_cache_translates_as_the_dynamic_cache(model_dir, lines, decoding):
    options = DecodeOptions(max_tokens=300, batch_size=7, **decoding)  # full batches of 7 and batches filled up to 7
    dynamic = load_translator(model_dir, device="cpu", compile="never")
    static = load_translator(model_dir, device="cpu", compile="always")
    assert not dynamic.backend.static_cache
    assert static.backend.static_cache and static.backend.compile_config is None  # a CPU: not compiled
    same_translations(dynamic.translate(lines, options), static.translate(lines, options))
    other = dataclasses.replace(options, num_beams=5)  # other options per call, through the same static caches
    same_translations(dynamic.translate(lines[:9], other), static.translate(lines[:9], other))


@pytest.mark.parametrize("num_beams", [1, 4])
def test_the_search_through_the_static_cache_waits_for_the_device_every_few_steps_only(
    model_dir, lines, monkeypatch, num_beams
):
    reads = []  # each `if tensor:` waits for the device
    boolean = torch.Tensor.__bool__
    monkeypatch.setattr(torch.Tensor, "__bool__", lambda tensor: reads.append(1) or boolean(tensor))
    counts = {}
    for compile in ("never", "always"):
        translator = load_translator(model_dir, device="cpu", compile=compile)
        reads.clear()
        translator.translate(lines[:7], DecodeOptions(batch_size=7, num_beams=num_beams))
        counts[compile] = len(reads)
    assert counts["always"] <= counts["never"] / 2, counts


def test_a_sampled_batch_filled_up_draws_as_the_batch_alone(model_dir, lines):
    """Sampling seeds each batch, and the static cache cuts other batches (by padded length): on the same batch, the
    same draws, the filling rows drawing nothing."""
    dynamic = load_translator(model_dir, device="cpu", compile="never")
    static = load_translator(model_dir, device="cpu", compile="always")
    decoding = static.decoding(DecodeOptions(do_sample=True, top_k=20, batch_size=16))
    sources = [ids for line in static.encode(lines[:9]) for ids in line.ids]
    limit = functools.partial(static.limit, decoding=decoding)
    expected = dynamic.backend.generate(sources, limit, decoding, seed=5)
    actual = static.backend.generate(sources, limit, decoding, seed=5)
    assert static.backend.static_shape(sources, limit, decoding.options.max_tokens, 16)[0] == 16 > len(sources)
    assert [[h.token_ids for h in hs] for hs in actual] == [[h.token_ids for h in hs] for hs in expected]


def test_any_seq2seq_model_translates_through_the_static_cache_as_through_the_dynamic_one(model_dir, lines):
    from transformers import AutoTokenizer

    from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
    from hf_vanilla_transformer.interop.marian import to_marian

    marian = to_marian(VanillaTransformerForConditionalGeneration.from_pretrained(model_dir)).eval()
    engine, options = (
        dict(tokenizer=AutoTokenizer.from_pretrained(model_dir), device="cpu"),
        DecodeOptions(num_beams=3, max_tokens=300),
    )
    dynamic = load_translator(marian, compile="never", **engine).translate(lines, options)
    same_translations(dynamic, load_translator(marian, compile="always", **engine).translate(lines, options))


def test_batch_shapes_take_one_value_per_source_length_bucket(model_dir, lines, monkeypatch):
    shapes, caches = [], set()
    decode = backends.decode

    def recording(model, input_ids, *args, **kwargs):
        cache = kwargs["static_cache"]
        positions = cache.self_attention_cache.layers[0].max_cache_len if cache is not None else None
        shapes.append((*input_ids.shape, positions))
        caches.add(id(cache))
        return decode(model, input_ids, *args, **kwargs)

    monkeypatch.setattr(backends, "decode", recording)
    translator, options = load_translator(model_dir, device="cpu", compile="always"), DecodeOptions(max_tokens=400)
    for start in range(0, len(lines), 6):  # runs of varied inputs: every batch a shape the run has not seen
        translator.translate(lines[start : start + 6 + start % 11], options)
    assert len(shapes) > 10
    buckets = {length for _, length, _ in shapes}
    assert buckets <= {16, 32, 64, 128} and len(buckets) >= 2
    assert len(set(shapes)) == len(buckets)  # one (rows, source length, target positions) per source length
    assert len(caches) == len(buckets)  # one static cache per shape, reused
    decoding = translator.decoding(options)
    assert all(rows == 400 // n and positions == translator.limit(n, decoding) for rows, n, positions in shapes)

    shapes.clear()
    translator = load_translator(model_dir, device="cpu", compile="never")
    for start in range(0, len(lines), 6):
        translator.translate(lines[start : start + 6 + start % 11], options)
    assert all(positions is None for *_, positions in shapes) and len(set(shapes)) > 2 * len(buckets)


def test_the_static_source_length_is_a_power_of_two_within_the_model(model_dir):
    backend = load_translator(model_dir, device="cpu", compile="always").backend
    assert [backend.static_length(n) for n in (1, 16, 17, 33, 64, 65, 127)] == [16, 16, 32, 64, 64, 128, 128]
    backend.max_source_tokens = 100  # a model of 100 source positions: its longest sentence
    assert [backend.static_length(n) for n in (60, 65, 100)] == [64, 100, 100]


def test_the_auto_rule():
    assert not uses_static_cache("auto", CPU, None) and not uses_static_cache("auto", CPU, 10**9)
    assert not uses_static_cache("auto", CUDA, None)  # a service, a library call: its first requests would wait
    assert uses_static_cache("auto", CUDA, COMPILE_MIN_LINES) and not uses_static_cache("auto", CUDA, 1000)
    assert not uses_static_cache("auto", CUDA, 0)  # translate from standard input
    assert uses_static_cache("always", CPU, 1) and not uses_static_cache("never", CUDA, None)


def test_translate_weighs_its_input_s_line_count(model_dir, tmp_path, monkeypatch):
    from hf_vanilla_transformer.translate import translator as module

    seen = []

    def stop(model, options, lines):
        seen.append((options.compile, lines))
        raise InputError("stop here")

    monkeypatch.setattr(module, "load_translator", stop)
    source = tmp_path / "in.de"
    source.write_text("a\nb\nc", encoding="utf-8")
    assert cli.main(["translate", "--model", model_dir, str(source), "--quiet"]) == 2
    assert cli.main(["translate", "--model", model_dir, "--compile", "never", "--quiet"]) == 2  # standard input
    assert seen == [("auto", 3), ("never", 0)]


def test_bad_values_are_one_line_errors(model_dir, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["translate", "--model", model_dir, "--compile", "sometimes"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --compile: invalid choice: 'sometimes'" in err
    with pytest.raises(InputError, match=r"--compile must be one of \['auto', 'always', 'never'\], got 'yes'"):
        EngineOptions(compile="yes").check()
    with pytest.raises(InputError, match="--compile are PyTorch options"):
        load_translator(model_dir, backend="ctranslate2", compile="always")


@pytest.mark.slow
def test_the_compiled_step_translates_as_the_dynamic_cache(model_dir, lines):
    """torch.compile (fullgraph) on the CPU, as transformers does on a GPU; a minute on two cores."""
    options = DecodeOptions(max_tokens=300, num_beams=2)
    dynamic = load_translator(model_dir, device="cpu", compile="never")
    static = load_translator(model_dir, device="cpu", compile="always")
    config = CompileConfig(fullgraph=True, mode="default")
    config._compile_all_devices = True  # transformers compiles on GPUs only
    static.backend.compile_config = config
    start = time.perf_counter()
    same_translations(dynamic.translate(lines[:30], options), static.translate(lines[:30], options))
    print(f"compiled in {time.perf_counter() - start:.0f} s")
