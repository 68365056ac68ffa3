"""generate() on CUDA: the CPU's greedy output for a trained model, and the static cache with torch.compile."""

import pytest
import torch
from transformers import AutoTokenizer
from transformers.generation import CompileConfig

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from tests.helpers import CUDA_TESTS, DEMO_SENTENCES, tiny_translator_dir


pytestmark = CUDA_TESTS


def translator_and_inputs():
    folder = tiny_translator_dir()
    model = VanillaTransformerForConditionalGeneration.from_pretrained(folder).eval()
    inputs = AutoTokenizer.from_pretrained(folder)(DEMO_SENTENCES, padding=True, return_tensors="pt")
    return model, {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}


def test_greedy_generate_on_cuda_gives_the_cpu_tokens():
    model, inputs = translator_and_inputs()
    on_cpu = model.generate(**inputs, num_beams=1, do_sample=False)
    on_cuda = model.cuda().generate(**{name: value.cuda() for name, value in inputs.items()}, num_beams=1)
    assert len({tuple(row) for row in on_cpu.tolist()}) > 1  # the output depends on the source
    assert on_cuda.cpu().tolist() == on_cpu.tolist()


@pytest.mark.slow
def test_static_cache_with_torch_compile_on_cuda_gives_the_dynamic_cache_tokens():
    model, inputs = translator_and_inputs()
    model = model.cuda()
    inputs = {name: value.cuda() for name, value in inputs.items()}
    dynamic = model.generate(**inputs, num_beams=1)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    # fullgraph: a graph break is an error, not a silent fallback to eager decoding.
    compiled = model.generate(
        **inputs, num_beams=1, cache_implementation="static", compile_config=CompileConfig(fullgraph=True)
    )
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs  # the decoding step was compiled
    assert compiled.tolist() == dynamic.tolist()
    again = model.generate(
        **inputs, num_beams=1, cache_implementation="static", compile_config=CompileConfig(fullgraph=True)
    )
    assert again.tolist() == dynamic.tolist()  # the second call replays what the first compiled (and recorded)
