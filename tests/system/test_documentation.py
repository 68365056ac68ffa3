"""Every Python snippet in the README and docs/ runs as written (row 47 of docs/reliability.md's matrix).

Offline, in a folder that holds what the snippets name: `outputs/demo-de-en` (a translator of the demo's shape, with
its tokenizer), `outputs/demo-lm` (a language model), the exports `outputs/demo-ct2` and `outputs/demo-onnx`, the
published `ORG/NAME` in a Hub cache, an API key file `keys.txt`, and `serve` running on that translator (at a free
port, which replaces the default address the snippets call). A snippet gets only the names it leaves to its reader,
as placeholders: `COMMIT`, and the PyTorch tutorial's `tutorial` model with its special token ids.
"""

import math
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from hf_vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForCausalLM
from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration as Translator
from tests.helpers import (
    ROOT,
    SENTENCES,
    SMALL_TRANSLATOR,
    ServerProcess,
    run_without_package,
    tiny_tokenizer,
)


SNIPPET = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# Snippets that take minutes on a CPU: the paper's base model (beam search on 60M random weights), an ONNX export, a
# fresh process loading from the Hub cache; or seconds of start-up: a local Ray.
SLOW = ("AutoConfig.for_model", '"outputs/demo-onnx"', '"ORG/NAME"', "127.0.0.1:8000", "translate_dataset(")
SERVICE = "http://127.0.0.1:8000"  # the default address of `serve`, which a snippet calls


def snippets() -> list:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for match in SNIPPET.finditer(text):
            line = text.count("\n", 0, match.start()) + 2  # the snippet's first line
            marks = [pytest.mark.slow] if any(sign in match.group(1) for sign in SLOW) else []
            found.append(pytest.param(match.group(1), id=f"{path.relative_to(ROOT)}:{line}", marks=marks))
    return found


def translator(world: Path) -> None:
    tokenizer = tiny_tokenizer()
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer), **{**SMALL_TRANSLATOR, "encoder_layers": 3, "decoder_layers": 3}
    )  # the demo's 3 layers
    model = Translator(config).eval()
    model.generation_config = config.paper_generation_config()
    model.save_pretrained(world / "outputs/demo-de-en")
    tokenizer.save_pretrained(world / "outputs/demo-de-en")


def language_model(world: Path) -> None:
    from hf_vanilla_transformer.recipes.common import single_stack_config
    from hf_vanilla_transformer.recipes.language_modeling import (
        sampling_generation_config,
        train_language_model_tokenizer,
    )

    tokenizer = train_language_model_tokenizer(SENTENCES, vocab_size=120, model_max_length=64)
    config = single_stack_config(tokenizer, 32, 2, 2, 64, 64, is_encoder_decoder=False)
    model = VanillaTransformerForCausalLM(config).eval()
    model.generation_config = sampling_generation_config(config, max_new_tokens=20)
    model.save_pretrained(world / "outputs/demo-lm")
    tokenizer.save_pretrained(world / "outputs/demo-lm")


def ctranslate2_export(world: Path) -> None:
    from hf_vanilla_transformer.interop.ctranslate2 import export_ctranslate2

    export_ctranslate2(provide(world, "outputs/demo-de-en"), world / "outputs/demo-ct2", quantization="int8")


def onnx_export(world: Path) -> None:
    from hf_vanilla_transformer.interop.onnx import export_onnx

    export_onnx(provide(world, "outputs/demo-de-en"), world / "outputs/demo-onnx", quantize=True)


def published(world: Path) -> None:
    """`ORG/NAME` at `COMMIT` in the Hub cache of `run_without_package`'s processes."""
    from hf_vanilla_transformer.hub.publish import stage_for_hub

    repo = world / "hf_home" / "hub" / "models--ORG--NAME"
    stage_for_hub(provide(world, "outputs/demo-de-en"), repo / "snapshots" / COMMIT, "ORG/NAME", revision=COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)


FOLDERS = {
    "outputs/demo-de-en": translator,
    "outputs/demo-lm": language_model,
    "outputs/demo-ct2": ctranslate2_export,
    "outputs/demo-onnx": onnx_export,
    "ORG/NAME": published,
}


def provide(world: Path, name: str) -> Path:
    """The folder (or Hub repository) `name` in `world`, made on first use."""
    made = world / ".made" / name.replace("/", "--")
    if not made.exists():
        FOLDERS[name](world)
        made.parent.mkdir(exist_ok=True)
        made.touch()
    return world / name


def tutorial_model() -> SimpleNamespace:
    """The model of PyTorch's tutorial "Language translation with nn.Transformer", as the snippet reads it: small."""
    d_model, vocab = 16, 99
    den = torch.exp(-torch.arange(0, d_model, 2) * math.log(10000) / d_model)
    position = torch.arange(0, 5000).reshape(5000, 1)
    pos_embedding = torch.zeros((5000, d_model))
    pos_embedding[:, 0::2], pos_embedding[:, 1::2] = torch.sin(position * den), torch.cos(position * den)
    generator = nn.Linear(d_model, vocab)
    nn.init.zeros_(generator.bias)
    return SimpleNamespace(
        transformer=nn.Transformer(d_model, 4, 2, 2, 32, 0.1),
        src_tok_emb=SimpleNamespace(embedding=nn.Embedding(vocab, d_model)),
        tgt_tok_emb=SimpleNamespace(embedding=nn.Embedding(vocab, d_model)),
        positional_encoding=SimpleNamespace(pos_embedding=pos_embedding.unsqueeze(-2)),
        generator=generator,
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return tmp_path_factory.mktemp("docs")


@pytest.mark.filterwarnings("ignore:.*(nested_tensor|enable_nested_tensor).*:UserWarning")  # nn.Transformer's advice
@pytest.mark.parametrize("code", snippets())
def test_every_python_snippet_in_the_documentation_runs_as_written(code, world, monkeypatch, request):  # row 47
    for name in FOLDERS:
        if f'"{name}"' in code:
            provide(world, name)
    if '"ORG/NAME"' in code:  # loaded from the Hub cache, where this package is not installed
        result = run_without_package(f"COMMIT = {COMMIT!r}\n{code}", cwd=world)
        assert result.returncode == 0, result.stderr[-3000:]
        return
    if SERVICE in code:  # `serve` on the demo folder, at a free port rather than the default one
        folder = provide(world, "outputs/demo-de-en")
        server = ServerProcess(
            "--model", folder, "--source_lang", "de", "--target_lang", "en", log=world / "serve.log"
        )
        request.addfinalizer(server.stop)
        code = code.replace(SERVICE, server.wait_ready().url)
    if '"keys.txt"' in code:  # an API key file, one key per line
        (world / "keys.txt").write_text("a-key\n")
    monkeypatch.chdir(world)
    given = dict(COMMIT=COMMIT, tutorial=tutorial_model(), PAD_IDX=1, BOS_IDX=2, EOS_IDX=3)
    try:
        exec(compile(code, "snippet", "exec"), {"__name__": "snippet", **given})
    finally:
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():  # a Ray Data snippet starts a local Ray of its own
            ray.shutdown()


def test_the_snippets_of_the_readme_and_of_docs_are_found():
    files = {snippet.id.split(":")[0] for snippet in snippets()}
    assert "README.md" in files and any(name.startswith("docs/") for name in files)
