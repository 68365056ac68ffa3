"""How exactly each export reproduces a trained model: token-identical outputs and BLEU per engine, on a test split.

`parity_table(model_dir)` translates the bundled test split (or `test_file`) with the model itself and with each export
(MarianMTModel, CTranslate2 float32 / int8, ONNX Runtime float32 / int8, transformers.js float32 / int8), greedily and
with the model's own beam search (its generation config; the ONNX engines decode greedily only), and compares each
engine's output token by token with the model's. Every engine gets the same batches and the same length budget, the
paper's source length + 50 (`max_new_tokens_for`). The engines share this process: fine for outputs, not for timing
(`scripts/benchmark.py` times each alone).
"""

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import GenerationConfig

from ..data.corpus import BUNDLED_CORPUS, load_parallel_corpus
from ..data.folders import load_tokenizer, load_translation_model, resolve_model
from ..data.trained_on import token_ids
from ..errors import InputError
from ..model.configuration_vanilla_transformer import max_new_tokens_for
from ..model.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from ..training.metrics import corpus_scores


ENGINES = ("marian", "ctranslate2", "onnx", "transformers.js")
OURS = "this package (PyTorch)"
# What an export must reach, by its weights: (least share of outputs token-identical to the model's, how far its BLEU
# may fall below the model's, how far rise above). A float32 export computes the model's own function; int8 weights
# only approximate it.
BARS = {"float32": (0.99, 0.1, 0.1), "int8": (0.0, 0.5, float("inf"))}


def strip_generated(ids: list[int], config) -> list[int]:
    """Generated ids without the decoder start token, cut before the end token (padding follows it)."""
    ids = ids[1:]
    eos = token_ids(config.eos_token_id)
    end = next((i for i, token in enumerate(ids) if token in eos or token == config.pad_token_id), len(ids))
    return ids[:end]


class Batches:
    """The test sources in right-padded batches, each with the paper's length budget for its longest source."""

    def __init__(self, tokenizer, sources: list[str], batch_size: int, max_position_embeddings: int):
        self.tokenizer, self.batches = tokenizer, []
        for start in range(0, len(sources), batch_size):
            texts = sources[start : start + batch_size]
            encoded = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
            limit = max_new_tokens_for(encoded["input_ids"].shape[1], max_position_embeddings)
            self.batches.append((texts, encoded, limit))

    def __iter__(self):
        return iter(self.batches)


def generate_ids(model, batches: Batches, generation_config: GenerationConfig) -> list[list[int]]:
    """`model.generate` (ours or a MarianMTModel), batch by batch, in order, each batch within its length budget."""
    outputs, generation_config = [], GenerationConfig.from_dict(generation_config.to_dict())
    # The budget alone: generate() would merge a length of the model's own generation config into the one given, and
    # warn at every call that both `max_new_tokens` and `max_length` are set.
    model.generation_config.max_length = model.generation_config.max_new_tokens = generation_config.max_length = None
    for _, encoded, limit in batches:
        generation_config.max_new_tokens = limit  # in the config: an argument beside a config is deprecated
        with torch.no_grad():
            generated = model.generate(**encoded, generation_config=generation_config)
        outputs += [strip_generated(row, model.config) for row in generated.tolist()]
    return outputs


def ctranslate2_ids(folder, batches: Batches, generation_config, compute_type: str, threads: int) -> list[list[int]]:
    import ctranslate2

    from .ctranslate2 import translate_options

    translator = ctranslate2.Translator(str(folder), device="cpu", compute_type=compute_type, intra_threads=threads)
    tokenizer, outputs = batches.tokenizer, []
    for _, encoded, limit in batches:
        tokens = [
            tokenizer.convert_ids_to_tokens(row[mask.bool()].tolist())
            for row, mask in zip(encoded["input_ids"], encoded["attention_mask"])
        ]
        results = translator.translate_batch(tokens, **translate_options(generation_config, max_decoding_length=limit))
        outputs += [tokenizer.convert_tokens_to_ids(result.hypotheses[0]) for result in results]
    return outputs


def onnx_runtime_ids(folder, batches: Batches, quantized: bool, threads: int, config) -> list[list[int]]:
    from .onnx_runtime import OnnxSeq2SeqLM

    translator, outputs = OnnxSeq2SeqLM(folder, quantized, num_threads=threads), []
    for _, encoded, limit in batches:
        ids = translator.generate(encoded["input_ids"].numpy(), encoded["attention_mask"].numpy(), limit)
        outputs += [strip_generated(row, config) for row in ids.tolist()]
    return outputs


def transformers_js_ids(folder, batches: Batches, dtype: str, config) -> list[list[int]]:
    from .onnx_runtime import transformers_js_generate

    outputs = []
    for texts, _, limit in batches:
        outputs += [strip_generated(row, config) for row in transformers_js_generate(folder, texts, limit, dtype)]
    return outputs


def _engines(model_dir: Path, work_dir: Path, names, threads: int, config) -> dict[str, Callable | Exception]:
    """Engine name -> fn(batches, generation_config) -> ids (None where the engine lacks that decoding), or the error
    that keeps it out (an export that refuses the model, a package that is not installed)."""
    engines = {}
    if "marian" in names:
        try:
            from transformers import MarianMTModel

            from .marian import export_marian

            marian = MarianMTModel.from_pretrained(export_marian(model_dir, work_dir / "marian")).eval()
            engines["MarianMTModel (export_marian)"] = lambda batches, generation: generate_ids(
                marian, batches, generation
            )
        except ValueError as error:
            engines["MarianMTModel (export_marian)"] = error
    if "ctranslate2" in names:
        try:
            from .ctranslate2 import export_ctranslate2

            for quantization in ("float32", "int8"):
                folder = export_ctranslate2(model_dir, work_dir / f"ct2-{quantization}", quantization=quantization)
                engines[f"CTranslate2 {quantization}"] = lambda batches, generation, f=folder, q=quantization: (
                    ctranslate2_ids(f, batches, generation, q, threads)
                )
        except (ImportError, ValueError) as error:
            engines["CTranslate2"] = error
    onnx_dir = None
    if "onnx" in names or "transformers.js" in names:
        try:
            from .onnx import export_onnx

            onnx_dir = export_onnx(model_dir, work_dir / "onnx", quantize=True)
        except (ImportError, ValueError) as error:
            engines["ONNX"] = error
    if onnx_dir is not None and "onnx" in names:
        for name, quantized in (("float32", False), ("int8", True)):
            engines[f"ONNX Runtime {name}"] = lambda batches, generation, q=quantized: (
                onnx_runtime_ids(onnx_dir, batches, q, threads, config) if generation.num_beams == 1 else None
            )
    if onnx_dir is not None and "transformers.js" in names:
        if shutil.which("node") is None:
            engines["transformers.js"] = RuntimeError("Node.js is not installed")
        else:
            for name, dtype in (("float32", "fp32"), ("int8", "q8")):
                engines[f"transformers.js {name}"] = lambda batches, generation, d=dtype: (
                    transformers_js_ids(onnx_dir, batches, d, config) if generation.num_beams == 1 else None
                )
    return engines


def check_comparable(model_dir, decoding: str, ids: list[list[int]], sources: list[str], texts_of) -> None:
    """Refuse to compare exports with the model's outputs where those prove nothing: every line translated to nothing
    (an undertrained model ends every sentence at once), or different lines all to the same output. Any export that
    did the same would count as exact."""
    outputs = {tuple(row) for row in ids}
    if len(outputs) > 1 or (outputs != {()} and len(set(sources)) < 2):
        return
    got = "empty outputs" if outputs == {()} else f"one and the same output, {texts_of(ids[:1])[0]!r}"
    raise InputError(
        f"--model {model_dir} translates all {len(ids)} test lines to {got} ({decoding} decoding): comparing its "
        "exports with that proves nothing. Verify a model that translates (train it longer)."
    )


def _row(decoding: str, engine: str, ids, ours, texts_of, references) -> dict:
    """One table row: the share of outputs token-identical to the model's, BLEU, its difference to the model's, and
    (for an export) whether that meets the export's bar."""
    count = len(ids)
    bleu = corpus_scores(texts_of(ids), references[:count])["bleu"]
    row = dict(
        decoding=decoding,
        engine=engine,
        sentences=count,
        identical=sum(a == b for a, b in zip(ids, ours)) / count,
        bleu=bleu,
        bleu_difference=bleu - corpus_scores(texts_of(ours[:count]), references[:count])["bleu"],
    )
    if engine != OURS:
        identical, below, above = _bar(engine)
        row["met"] = row["identical"] >= identical and -below <= row["bleu_difference"] <= above
    return row


def _bar(engine: str) -> tuple[float, float, float]:
    return BARS["int8" if "int8" in engine else "float32"]


def bar(engine: str) -> str:
    """An export's bar, as the table prints it."""
    identical, below, above = _bar(engine)
    bleu = f"BLEU within {below:g}" if above == below else f"BLEU at most {below:g} below"
    return f">= {100 * identical:g}% identical, {bleu}" if identical else bleu


def misses(rows: list[dict]) -> list[str]:
    """The exports (engine and decoding) of `parity_table`'s rows that miss their bar."""
    return [f"{row['engine']} ({row['decoding']})" for row in rows if row.get("met") is False]


def parity_table(
    model_dir: str | Path,
    test_file: str | Path | None = None,
    source_lang: str = "de",
    target_lang: str = "en",
    *,
    limit: int | None = None,
    engines=ENGINES,
    js_sentences: int = 50,
    batch_size: int = 32,
    threads: int = 1,
) -> list[dict]:
    """One row per (decoding, engine); transformers.js translates only the first `js_sentences` pairs (it is slow).

    `threads` per engine: torch, CTranslate2 and ONNX Runtime share this process, and their thread pools would
    oversubscribe the machine.
    """
    model_dir = Path(resolve_model(model_dir))
    test_file = test_file or BUNDLED_CORPUS / "test.jsonl"
    pairs = load_parallel_corpus(source_lang, target_lang, test_file=str(test_file))["test"]["translation"]
    pairs = pairs[:limit] if limit else pairs
    sources, references = [p[source_lang] for p in pairs], [p[target_lang] for p in pairs]
    model = load_translation_model(model_dir, model_class=VanillaTransformerForConditionalGeneration).eval()
    tokenizer = load_tokenizer(model_dir)
    beam = GenerationConfig.from_dict(model.generation_config.to_dict())
    beam.max_length = beam.max_new_tokens = None  # the length budget is the batches'
    greedy = GenerationConfig.from_dict({**beam.to_dict(), "num_beams": 1, "length_penalty": 1.0})
    greedy.early_stopping = False  # beam-only settings at their defaults
    decodings = {"greedy": greedy, f"beam {beam.num_beams}, length penalty {beam.length_penalty}": beam}
    all_batches = Batches(tokenizer, sources, batch_size, model.config.max_position_embeddings)
    js_batches = Batches(tokenizer, sources[:js_sentences], batch_size, model.config.max_position_embeddings)

    def texts_of(ids):
        return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]

    rows, torch_threads = [], torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ours = {decoding: generate_ids(model, all_batches, config) for decoding, config in decodings.items()}
        for decoding, ids in ours.items():  # before any export is made
            check_comparable(model_dir, decoding, ids, sources, texts_of)
        with tempfile.TemporaryDirectory() as work_dir:
            others = _engines(model_dir, Path(work_dir), engines, threads, model.config)
            for decoding, generation_config in decodings.items():
                rows.append(_row(decoding, OURS, ours[decoding], ours[decoding], texts_of, references))
                for engine, translate in others.items():
                    if isinstance(translate, Exception):
                        rows.append({"decoding": decoding, "engine": engine, "error": str(translate)})
                        continue
                    batches = js_batches if engine.startswith("transformers.js") else all_batches
                    ids = translate(batches, generation_config)
                    if ids is not None:
                        rows.append(_row(decoding, engine, ids, ours[decoding], texts_of, references))
    finally:
        torch.set_num_threads(torch_threads)
    return rows


def format_table(rows: list[dict]) -> str:
    """A Markdown table of `parity_table`'s rows, with each export's bar and whether it meets it."""
    lines = [
        "| decoding | engine | sentences | token-identical to ours | BLEU | vs ours | bar | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['decoding']} | {row['engine']} | | not run: {row['error']} | | | | |")
        else:
            met = {True: "yes", False: "**no**", None: ""}[row.get("met")]
            lines.append(
                f"| {row['decoding']} | {row['engine']} | {row['sentences']} | {100 * row['identical']:.1f}% | "
                f"{row['bleu']:.2f} | {row['bleu_difference']:+.2f} | {bar(row['engine']) if met else ''} | {met} |"
            )
    return "\n".join(lines)


__all__ = ["BARS", "ENGINES", "check_comparable", "format_table", "misses", "parity_table"]
