"""A page that translates in the browser, with no server behind it: the ONNX export run by transformers.js.

    build_web_page("outputs/demo-de-en", "site/")  # or: hf-vanilla-transformer web-page --model ... --output_dir site/
    python -m http.server -d site/ 8000              # any static file server; then open http://127.0.0.1:8000

The folder holds everything the page loads, nothing comes from a CDN or the Hub:

    index.html, app.mjs      the page (plain HTML and an ES module: no build step)
    translate.mjs            the greedy translation with transformers.js, the file the ONNX tests run under Node
    demo.json                title, examples, the sentence rules and language, the longest piece the model takes
                             and the generation length by source length
    runtime/                 transformers.js (`transformers.min.js`) and ONNX Runtime's WebAssembly files, copied from
                             an npm install of the pinned `@huggingface/transformers`
                             (`onnx_runtime.install_transformers_js`)
    model/                   the ONNX export (`export_onnx`, Marian form): config, tokenizer, onnx/*.onnx

The page has the element ids of the Gradio demo: `source`, `translate`, `target`.
"""

import json
import shutil
import tempfile
from pathlib import Path

from transformers import AutoConfig, GenerationConfig

from ..data.folders import check_output_dir, check_translation_folder, load_tokenizer, resolve_model, writes_folder
from ..data.trained_on import trained_on
from ..interop.onnx import export_onnx
from ..interop.onnx_runtime import TRANSFORMERS_JS_VERSION, TRANSLATE_SCRIPT, install_transformers_js
from ..model.configuration_vanilla_transformer import max_new_tokens_for
from ..model.pipeline_translation import max_source_length
from ..translate.backends import default_length_rule
from ..translate.options import DEFAULT_MAX_TOKENS
from ..translate.sentences import RULES
from .gradio_app import EXAMPLES


PAGE_FILES = [Path(__file__).with_name("web") / name for name in ("index.html", "app.mjs")]
# What transformers.js reads from a model folder; the PyTorch weights beside the graphs stay out of the page.
MODEL_FILES = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]
# transformers.min.js bundles ONNX Runtime's JavaScript; app.mjs points it at the plain WebAssembly build (CPU, 14 MB)
# instead of the WebGPU-capable one (27 MB) that it would fetch from a CDN.
RUNTIME_FILES = {
    "@huggingface/transformers/dist": ["transformers.min.js"],
    "onnxruntime-web/dist": ["ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"],
}


def build_web_page(
    model_dir: str | Path,
    output_dir: str | Path,
    examples: list[str] | None = None,
    title: str = "German to English, in your browser",
    max_new_tokens: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the no-server page for the trained model in `model_dir` into `output_dir` (created; must be empty).

    The page translates as the translate command does, greedily: each line split into sentences by the rules of the
    language the model was trained on, sentences longer than it was trained on into pieces, in token-budget batches.
    `max_new_tokens` (one limit for every batch) defaults to the model's generation config (`max_new_tokens`, or
    `max_length` - 1), else to the paper's source length + 50 for each batch's longest source.
    """
    model_dir = resolve_model(model_dir)
    check_translation_folder(model_dir)
    check_output_dir(output_dir, overwrite)
    modules = install_transformers_js() / "node_modules"  # first, as it is the step that can fail on a network

    with writes_folder(output_dir, overwrite) as output, tempfile.TemporaryDirectory() as export_dir:
        export = export_onnx(model_dir, export_dir)
        shutil.copytree(export / "onnx", output / "model" / "onnx")
        for name in MODEL_FILES:
            if (export / name).is_file():
                shutil.copy2(export / name, output / "model" / name)
        (output / "runtime").mkdir()
        for folder, names in RUNTIME_FILES.items():
            for name in names:
                shutil.copy2(modules / folder / name, output / "runtime" / name)
        for page_file in [*PAGE_FILES, TRANSLATE_SCRIPT]:
            shutil.copy2(page_file, output / page_file.name)
        settings = {
            "title": title,
            "examples": examples or EXAMPLES,
            **text_settings(output / "model", max_new_tokens),
            "transformers_js": TRANSFORMERS_JS_VERSION,
        }
        text = json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
        (output / "demo.json").write_text(text, encoding="utf-8")
    return Path(output_dir)


def text_settings(model_dir: Path, max_new_tokens: int | None = None) -> dict:
    """What `translateText` (translate.mjs) needs to split and translate as the translate command does, for the
    model in `model_dir`: the sentence rules and language, the longest piece in tokens, the batch budget, and
    `max_new_tokens[n]`, the generation limit for a batch whose longest source has n tokens (computed here by the
    one length rule, `max_new_tokens_for`)."""
    config = AutoConfig.from_pretrained(model_dir)
    generation_config = GenerationConfig.from_pretrained(model_dir)
    record = trained_on(generation_config)
    longest = record.source_limit(max_source_length(load_tokenizer(str(model_dir)), config))
    positions = getattr(config, "max_position_embeddings", None)
    a, b = (0.0, max_new_tokens) if max_new_tokens else default_length_rule(generation_config)
    return {
        "rules": RULES,
        "source_lang": record.source_lang,
        "split_sentences": True,
        "max_source_tokens": longest,
        "max_tokens": DEFAULT_MAX_TOKENS,
        "max_new_tokens": [max_new_tokens_for(n, positions, a, b) for n in range(longest + 1)],
    }


__all__ = ["build_web_page", "text_settings"]
