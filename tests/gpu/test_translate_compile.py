"""translate's `--compile` on CUDA: the rule takes the static cache, whose compiled step translates as the dynamic
cache does, in one graph per batch shape."""

import pytest
import torch

from hf_vanilla_transformer.translate.backends import COMPILE_MIN_LINES
from hf_vanilla_transformer.translate.options import DecodeOptions
from hf_vanilla_transformer.translate.translator import load_translator
from tests.helpers import CUDA_TESTS, DEMO_SENTENCES, tiny_translator_dir


pytestmark = CUDA_TESTS

LINES = DEMO_SENTENCES + [" ".join(DEMO_SENTENCES[i:] + DEMO_SENTENCES[:i]) for i in range(4)]


def test_auto_takes_the_static_cache_on_cuda_for_a_long_input_only():
    folder = str(tiny_translator_dir())
    assert load_translator(folder, device="cuda", lines=COMPILE_MIN_LINES).backend.compile_config is not None
    assert not load_translator(folder, device="cuda", lines=len(LINES)).backend.static_cache
    assert not load_translator(folder, device="cuda").backend.static_cache  # unknown: a service, a library call


@pytest.mark.slow
def test_the_compiled_static_cache_translates_as_the_dynamic_cache_on_cuda():
    folder = str(tiny_translator_dir())
    options = DecodeOptions(num_beams=2, split_sentences=False, max_tokens=256)
    dynamic = load_translator(folder, device="cuda", compile="never")
    expected = [t.hypotheses[0].tokens for t in dynamic.translate(LINES, options)]
    translator = load_translator(folder, device="cuda", compile="always")
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for _ in range(2):  # the second pass replays what the first compiled and recorded
        assert [t.hypotheses[0].tokens for t in translator.translate(LINES, options)] == expected
    shapes = {key[:2] for key in translator.backend.static_caches}  # (rows, source length)
    assert 0 < torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs <= len(shapes)
