"""How exactly the exports reproduce the model: token-identical outputs and BLEU per engine on a test split.

`parity_table(model_dir)` translates the bundled test split (or `test_file`) with the model itself and with every
export, greedy and with the model's own beam search (its `generation_config`), and compares each export's output
token by token with the model's. CTranslate2 runs in the same process as torch here: fine for outputs, not for timing
(scripts/benchmark.py times it alone).
"""

import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoTokenizer, GenerationConfig, MarianMTModel

from .convert_marian import export_marian
from .data import BUNDLED_CORPUS, load_parallel_corpus
from .modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from .training import corpus_scores


def _strip(ids: list[int], config) -> list[int]:
    """Generated ids without the decoder start token, and cut before the end token (padding follows it)."""
    ids = ids[1:]
    eos = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
    end = next((i for i, token in enumerate(ids) if token in eos or token == config.pad_token_id), len(ids))
    return ids[:end]


def generate_ids(model, tokenizer, sources: list[str], generation_config: GenerationConfig, batch_size: int):
    """`model.generate` (ours or a MarianMTModel) on right-padded batches, in order."""
    outputs = []
    for start in range(0, len(sources), batch_size):
        batch = tokenizer(sources[start : start + batch_size], return_tensors="pt", padding=True, truncation=True)
        with torch.no_grad():
            generated = model.generate(**batch, generation_config=generation_config)
        outputs += [_strip(row, model.config) for row in generated.tolist()]
    return outputs


def ctranslate2_ids(model_dir, tokenizer, sources, generation_config, batch_size, compute_type="default", threads=1):
    """A CTranslate2 folder's translations as token ids, decoded with `translate_options(generation_config)`."""
    import ctranslate2

    from .export_ctranslate2 import translate_options

    translator = ctranslate2.Translator(str(model_dir), device="cpu", compute_type=compute_type, intra_threads=threads)
    tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(sources, truncation=True).input_ids]
    results = translator.translate_batch(tokens, max_batch_size=batch_size, **translate_options(generation_config))
    return [tokenizer.convert_tokens_to_ids(result.hypotheses[0]) for result in results]


def _engines(model, model_dir: Path, work_dir: Path, threads: int) -> dict[str, Callable]:
    """Engine name -> fn(tokenizer, sources, generation_config, batch_size) -> ids. An export that refuses the model
    becomes a function raising that error."""
    engines = {"this package (PyTorch)": lambda *args: generate_ids(model, *args)}
    try:
        marian = MarianMTModel.from_pretrained(export_marian(model_dir, work_dir / "marian")).eval()
        engines["MarianMTModel (export_marian)"] = lambda *args: generate_ids(marian, *args)
    except ValueError as error:
        engines["MarianMTModel (export_marian)"] = error
    try:
        from .export_ctranslate2 import export_ctranslate2

        for quantization in ("float32", "int8"):
            folder = export_ctranslate2(model_dir, work_dir / f"ct2-{quantization}", quantization=quantization)
            engines[f"CTranslate2 {quantization}"] = lambda *args, folder=folder, q=quantization: ctranslate2_ids(
                folder, *args, compute_type=q, threads=threads
            )
    except (ImportError, ValueError) as error:
        engines["CTranslate2"] = error
    return engines


def parity_table(
    model_dir: str | Path,
    test_file: str | Path | None = None,
    source_lang: str = "de",
    target_lang: str = "en",
    limit: int | None = None,
    batch_size: int = 32,
    threads: int = 1,
) -> list[dict]:
    """One row per (decoding, engine): the share of sentences whose output is token-identical to the model's, and
    corpus BLEU (sacrebleu, as in training) with its difference to the model's.

    `threads` per engine (torch and CTranslate2 share this process; their OpenMP pools oversubscribe a busy machine).
    """
    model_dir = Path(model_dir)
    test_file = test_file or BUNDLED_CORPUS / "test.jsonl"
    pairs = load_parallel_corpus(source_lang, target_lang, test_file=str(test_file))["test"]["translation"]
    pairs = pairs[:limit] if limit else pairs
    sources, references = [p[source_lang] for p in pairs], [p[target_lang] for p in pairs]
    model = VanillaTransformerForConditionalGeneration.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    beam = GenerationConfig.from_dict(model.generation_config.to_dict())
    if beam.max_length is None and beam.max_new_tokens is None:
        # One length budget for every engine: generate()'s default (source length + 50) has no equivalent elsewhere.
        beam.max_new_tokens = model.config.max_position_embeddings - 1
    greedy = {"num_beams": 1, "length_penalty": 1.0, "early_stopping": False}  # beam-only settings at their defaults
    decodings = {"greedy": GenerationConfig.from_dict({**beam.to_dict(), **greedy})}
    decodings[f"beam {beam.num_beams}, length penalty {beam.length_penalty}"] = beam

    rows, torch_threads = [], torch.get_num_threads()
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as work_dir:
        engines = _engines(model, model_dir, Path(work_dir), threads)
        for decoding, generation_config in decodings.items():
            ours = None  # the first engine is the model itself
            for engine, translate in engines.items():
                row = {"decoding": decoding, "engine": engine, "sentences": len(sources)}
                if isinstance(translate, Exception):
                    rows.append({**row, "error": str(translate)})
                    continue
                ids = translate(tokenizer, sources, generation_config, batch_size)
                texts = [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]
                row["bleu"] = corpus_scores(texts, references)["bleu"]
                ours = ours or {"ids": ids, "bleu": row["bleu"]}
                row["identical"] = sum(a == b for a, b in zip(ids, ours["ids"])) / len(ids)
                row["bleu_difference"] = row["bleu"] - ours["bleu"]
                rows.append(row)
    torch.set_num_threads(torch_threads)
    return rows


def format_table(rows: list[dict]) -> str:
    """A Markdown table of `parity_table`'s rows."""
    lines = [
        f"| decoding | engine | token-identical to ours ({rows[0]['sentences']} sentences) | BLEU | vs ours |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['decoding']} | {row['engine']} | refused: {row['error']} | | |")
        else:
            lines.append(
                f"| {row['decoding']} | {row['engine']} | {100 * row['identical']:.1f}% | {row['bleu']:.2f} | "
                f"{row['bleu_difference']:+.2f} |"
            )
    return "\n".join(lines)


__all__ = ["ctranslate2_ids", "format_table", "generate_ids", "parity_table"]
