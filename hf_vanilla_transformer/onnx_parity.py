"""How exactly the ONNX export reproduces a trained model: token-identical greedy outputs and BLEU on a test split, on
ONNX Runtime (float32 and int8 graphs) and, on a sample, in transformers.js under Node.

The rows have the format of `export_parity.parity_table`'s (its `format_table` prints them); greedy only, the one
decoding the ONNX runtimes here implement.
"""

import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoTokenizer, GenerationConfig

from .data import BUNDLED_CORPUS, load_parallel_corpus
from .export_onnx import export_onnx
from .export_parity import _strip, generate_ids
from .modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from .onnx_runtime import OnnxSeq2SeqLM, transformers_js_generate
from .training import corpus_scores


def onnx_runtime_ids(translator: OnnxSeq2SeqLM, tokenizer, sources, max_new_tokens: int, batch_size: int, config):
    """Greedy ids of `sources` (decoder start and everything from EOS on removed), on right-padded batches."""
    outputs = []
    for start in range(0, len(sources), batch_size):
        batch = tokenizer(sources[start : start + batch_size], padding=True, truncation=True, return_tensors="np")
        ids = translator.generate(batch["input_ids"], batch["attention_mask"], max_new_tokens)
        outputs += [_strip(row, config) for row in ids.tolist()]
    return outputs


def onnx_parity_tables(
    model_dir: str | Path,
    onnx_dir: str | Path | None = None,
    test_file: str | Path | None = None,
    source_lang: str = "de",
    target_lang: str = "en",
    limit: int | None = None,
    js_sentences: int = 50,
    batch_size: int = 32,
    threads: int = 1,
) -> list[list[dict]]:
    """Two tables of rows: the whole split on ONNX Runtime, and its first `js_sentences` in transformers.js (left out
    when Node.js is not installed or `js_sentences` is 0). `onnx_dir`: an `export_onnx(..., quantize=True)` folder of
    the model; by default the model is exported to a temporary one (Marian layout)."""
    test_file = test_file or BUNDLED_CORPUS / "test.jsonl"
    pairs = load_parallel_corpus(source_lang, target_lang, test_file=str(test_file))["test"]["translation"]
    pairs = pairs[:limit] if limit else pairs
    sources, references = [p[source_lang] for p in pairs], [p[target_lang] for p in pairs]
    model = VanillaTransformerForConditionalGeneration.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    beam_defaults = {"num_beams": 1, "length_penalty": 1.0, "early_stopping": False}  # as export_parity's greedy rows
    greedy = GenerationConfig.from_dict({**model.generation_config.to_dict(), **beam_defaults})
    # One length budget for every engine: the model's (max_length counts the decoder start token), else its limit.
    max_length = greedy.max_length or model.config.max_position_embeddings
    greedy.max_new_tokens, greedy.max_length = greedy.max_new_tokens or max_length - 1, None
    max_new_tokens = greedy.max_new_tokens

    def row(engine: str, ids: list[list[int]], ours: list[list[int]], count: int) -> dict:
        def score(rows):
            texts = [t.strip() for t in tokenizer.batch_decode(rows, skip_special_tokens=True)]
            return corpus_scores(texts, references[:count])["bleu"]

        bleu_score = score(ids)
        identical = sum(a == b for a, b in zip(ids, ours)) / count
        difference = bleu_score - score(ours[:count])
        return dict(
            decoding="greedy",
            engine=engine,
            sentences=count,
            bleu=bleu_score,
            identical=identical,
            bleu_difference=difference,
        )

    torch_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ours = generate_ids(model, tokenizer, sources, greedy, batch_size)
        with tempfile.TemporaryDirectory() as work_dir:
            onnx_dir = Path(onnx_dir or export_onnx(model_dir, Path(work_dir) / "onnx", quantize=True))
            tables = [[row("this package (PyTorch)", ours, ours, len(sources))]]
            for name, quantized in (("float32", False), ("int8", True)):
                translator = OnnxSeq2SeqLM(onnx_dir, quantized, num_threads=threads)
                ids = onnx_runtime_ids(translator, tokenizer, sources, max_new_tokens, batch_size, model.config)
                tables[0].append(row(f"ONNX Runtime {name}", ids, ours, len(sources)))
            count = min(js_sentences, len(sources))
            if count and shutil.which("node"):
                tables.append([row("this package (PyTorch)", ours[:count], ours, count)])
                for dtype, name in (("fp32", "float32"), ("q8", "int8")):
                    rows = transformers_js_generate(onnx_dir, sources[:count], max_new_tokens, dtype)
                    ids = [_strip(r, model.config) for r in rows]
                    tables[1].append(row(f"transformers.js {name}", ids, ours, count))
    finally:
        torch.set_num_threads(torch_threads)
    return tables


__all__ = ["onnx_parity_tables", "onnx_runtime_ids"]
