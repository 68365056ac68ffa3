#!/usr/bin/env python
"""Speed benchmark: our model against transformers' MarianMTModel, torch.nn.Transformer and CTranslate2.

    python -m scripts.benchmark --sizes small base --bf16     # CPU: float32 rows (the result) + bf16-autocast rows
    python -m scripts.benchmark --sizes small base --device cuda   # GPU: the torch systems in bf16 autocast

Every system has the same architecture and size, is randomly initialised (seeded) and gets the same workload:
- training: forward + backward + AdamW step with label smoothing 0.1, batches of 32 pairs with random source and target
  lengths 10-40 (right-padded, a few batches cycled), in non-padding target tokens per second;
- generation: 64 sources of 20-30 tokens in batches of 16, exactly 30 new tokens (EOS disabled), greedy and beam-4, in
  generated tokens per second (CTranslate2 generates only; nn.Transformer has no beam search); and the first 16
  sources one at a time (batch 1, torch systems only).
"ours, torch.compile" trains our model compiled by `torch.compile` (inductor), as Trainer's `--torch_compile` does,
and "ours, regional torch.compile" with each of its layers (and other leaf modules) compiled on its own, as
`--torch_compile` does with accelerate's regional compilation (their warm-up pass over every batch shape compiles them;
they do not generate).
CTranslate2 runs the MarianMTModel converted by its own converter, and our model exported by `export_ctranslate2`
("this package via CTranslate2"), same size and workload. "this package via ONNX Runtime" is our model exported by
`export_onnx` (float32 and dynamic int8 graphs) decoded greedily by `onnx_runtime.OnnxSeq2SeqLM`.
Every measurement runs in a fresh process, after an untimed warm-up step or batch: peak training memory is that
process's VmHWM (on a GPU: torch.cuda.max_memory_allocated), and CTranslate2 never shares a process with torch. The
torch systems generate in one process per repeat, their passes over each task alternating, GENERATION_TIMINGS passes
each, and a system's fastest pass counts: on a shared machine the systems then meet the same disturbances, which moved
single measurements in separate processes by up to 1.7x. CTranslate2 and ONNX Runtime also count their fastest of
GENERATION_TIMINGS passes. Measurements alternate within each repeat (the order rotates between repeats); medians of
the repeats are reported. Ratios to MarianMTModel (sdpa) at the same precision are the result: absolute numbers move
from run to run on a shared machine.

Achieved FLOP/s are counted analytically on the real (non-padding) tokens, the same for every system, and reported as
a fraction of a 2048x2048 matmul measured in the same run, so "% of peak" compares useful work.
"""

import argparse
import importlib.metadata
import importlib.util
import json
import math
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
import transformers
from accelerate.utils import compile_regions
from tokenizers import Tokenizer, models
from torch import nn
from transformers import MarianConfig, MarianMTModel, PreTrainedTokenizerFast
from transformers.trainer_pt_utils import LabelSmoother

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.recipes.common import expand_sizes, model_config_for
from hf_vanilla_transformer.training.loss import chunked_token_cross_entropy
from hf_vanilla_transformer.training.report import cpu_model
from hf_vanilla_transformer.translate.decoding import decode

from .benchmark_ctranslate2 import BOS, EOS, PAD, SPECIAL_TOKENS, UNK, convert_marian, vocabulary


SIZES = {
    "tiny": dict(d_model=32, heads=2, ffn=64, layers=1, vocab_size=100),  # for tests and smoke runs
    "small": dict(d_model=256, heads=4, ffn=1024, layers=3, vocab_size=8000),
    "base": dict(d_model=512, heads=8, ffn=2048, layers=6, vocab_size=37000),  # the paper's base model
    "big": dict(d_model=1024, heads=16, ffn=4096, layers=6, vocab_size=37000),  # the paper's big model (GPU runs)
}
SEED = 0
TRAIN_BATCH, TRAIN_LENGTHS, TRAIN_BATCHES = 32, (10, 40), 4  # one measurement = a warm-up pass + timed passes
TRAIN_PASSES = {
    "tiny": 1,
    "small": 3,
    "base": 1,
    "big": 1,
}  # timed passes: a small-model pass is too short to time alone
SOURCES, SOURCE_LENGTHS, GENERATION_BATCH, NEW_TOKENS = 64, (20, 30), 16, 30
SINGLE_SOURCES = 16  # the batch-1 tasks translate the first 16 sources one at a time
GENERATION_TIMINGS = 5  # passes over each generation task per system and repeat; the fastest counts
TASKS = {"train": None, "greedy": 1, "beam4": 4, "greedy_b1": 1, "beam4_b1": 4}  # task -> num_beams; _b1: batch 1
LABEL_SMOOTHING = 0.1
MATMUL_SIZE = 2048
TORCH_SYSTEMS = {
    "ours-sdpa": "ours (sdpa)",
    "ours-eager": "ours (eager)",
    "ours-labels": "ours, labels only",
    "ours-logits": "ours, loss from logits",
    "ours-compiled": "ours, torch.compile",
    "ours-cudagraphs": "ours, torch.compile with CUDA graphs",
    "ours-regional": "ours, regional torch.compile",
    "ours-translate": "ours, translate's engine",
    "marian-sdpa": "MarianMTModel (sdpa)",
    "marian-eager": "MarianMTModel (eager)",
    "nn-transformer": "nn.Transformer (no KV cache)",
}
OURS, REFERENCE = "ours-sdpa", "marian-sdpa"  # the targets compare these two (and CTranslate2)
COMPILED = "ours-compiled"  # ours-sdpa under torch.compile (inductor), as Trainer's --torch_compile runs it
# COMPILED with CUDA graphs (`mode="reduce-overhead"`, as `--torch_compile_mode reduce-overhead` runs it): on a GPU the
# host launches each graph at once instead of its kernels one by one; on a CPU it is COMPILED.
CUDA_GRAPHS = "ours-cudagraphs"
# Regional compilation (accelerate's `compile_regions`, dynamic shapes), as `--torch_compile` runs with
# ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=true: the stacks pack their real tokens eagerly and the compiled layers
# compute those rows alone.
REGIONAL = "ours-regional"
COMPILED_SYSTEMS = (COMPILED, CUDA_GRAPHS, REGIONAL)
# The three other ways of training our model (sdpa): they differ from ours-sdpa in training only, so they do not
# generate; and the engine of `translate` (its own search over the same model), which differs in generation only.
TRAINING_CALL_PATHS = {"ours-labels", "ours-logits", *COMPILED_SYSTEMS}
GENERATION_PATHS = {"ours-translate"}
RATIO_METRICS = [f"{task}_tokens_per_s" for task in TASKS] + ["train_peak_mb"]
CT2_SCRIPT = Path(__file__).with_name("benchmark_ctranslate2.py")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


# ---------------------------------------------------------------------------------------------------- the systems


class TorchTransformerSeq2Seq(nn.Module):
    """A plain `torch.nn.Transformer` translation model: one embedding matrix for source, target and the (tied) output
    projection, embeddings x sqrt(d_model) + sinusoidal positions, greedy decoding that re-runs the decoder on the
    whole prefix (nn.Transformer has no key/value cache). It is the stock module, so it also has a final LayerNorm
    per stack and dropout on attention weights and after the FFN activation."""

    def __init__(self, vocab_size: int, d_model: int, heads: int, ffn: int, layers: int, dropout: float = 0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        self.transformer = nn.Transformer(d_model, heads, layers, layers, ffn, dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        angles = torch.arange(128.0)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)  # (positions, d/2)
        self.register_buffer("positions", torch.stack([angles.sin(), angles.cos()], -1).flatten(1), persistent=False)

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.embed(ids) * self.embed.embedding_dim**0.5 + self.positions[: ids.shape[1]])

    def forward(self, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask) -> torch.Tensor:
        """Logits (b, t, v). Masks are transformers-style (1 = token); nn.Transformer's are True = padding."""
        hidden = self.transformer(
            self.embed_tokens(input_ids),
            self.embed_tokens(decoder_input_ids),
            tgt_mask=causal_mask(decoder_input_ids.shape[1], input_ids.device),
            src_key_padding_mask=attention_mask == 0,
            tgt_key_padding_mask=decoder_attention_mask == 0,
            memory_key_padding_mask=attention_mask == 0,
            tgt_is_causal=True,
        )
        return nn.functional.linear(hidden, self.embed.weight)

    @torch.no_grad()
    def greedy(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, new_tokens: int) -> torch.Tensor:
        """Exactly `new_tokens` greedy tokens per source (EOS masked, as `min_new_tokens` does in transformers)."""
        source_padding = attention_mask == 0
        memory = self.transformer.encoder(self.embed_tokens(input_ids), src_key_padding_mask=source_padding)
        ids = input_ids.new_full((input_ids.shape[0], 1), BOS)
        for _ in range(new_tokens):
            hidden = self.transformer.decoder(
                self.embed_tokens(ids),
                memory,
                tgt_mask=causal_mask(ids.shape[1], ids.device),
                tgt_is_causal=True,
                memory_key_padding_mask=source_padding,
            )
            logits = nn.functional.linear(hidden[:, -1], self.embed.weight)  # (b, v)
            logits[:, EOS] = -math.inf
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
        return ids[:, 1:]


def causal_mask(length: int, device) -> torch.Tensor:
    return torch.ones(length, length, dtype=torch.bool, device=device).triu(1)  # True = may not attend


def marian_config(size: str) -> MarianConfig:
    """MarianMTModel with our architecture (`model_config_for("marian")`), at the benchmark's size."""
    return model_config_for("marian", **size_fields(size), max_position_embeddings=256, dropout=0.1)


def size_fields(size: str) -> dict:
    """Sizes, vocabulary and special tokens of the benchmark's models."""
    s = SIZES[size]
    return dict(
        **expand_sizes(s["d_model"], s["layers"], s["heads"], s["ffn"]),
        vocab_size=s["vocab_size"],
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
        decoder_start_token_id=BOS,
    )


def build_model(system: str, size: str, seed: int = SEED) -> nn.Module:
    torch.manual_seed(seed)
    s = SIZES[size]
    if system == "nn-transformer":
        return TorchTransformerSeq2Seq(s["vocab_size"], s["d_model"], s["heads"], s["ffn"], s["layers"])
    family, attn_implementation = system.split("-")
    attn_implementation = "sdpa" if system in TRAINING_CALL_PATHS | GENERATION_PATHS else attn_implementation
    if family == "marian":
        return MarianMTModel._from_config(marian_config(size), attn_implementation=attn_implementation)
    config = model_config_for("vanilla", **size_fields(size), dropout=0.1, label_smoothing=LABEL_SMOOTHING)
    model = VanillaTransformerForConditionalGeneration._from_config(config, attn_implementation=attn_implementation)
    if system == REGIONAL:
        return compile_regions(model, dynamic=True)
    if system in (COMPILED, CUDA_GRAPHS):
        return torch.compile(model, mode="reduce-overhead" if system == CUDA_GRAPHS else None)
    return model


def training_loss(model: nn.Module, system: str, batch: dict) -> torch.Tensor:
    """The loss each system's usual trainer computes, label smoothing 0.1 over the non-padding targets.

    Our model three ways: as our TranslationTrainer computes it (the collator's decoder mask, the model's logits and
    the trainer's chunked loss); as plain `Seq2SeqTrainer` and `run_translation.py` do (labels only); and as a custom
    loop that takes logits for given decoder inputs and computes the loss itself (the model sees neither labels nor
    target padding).
    """
    if system == "ours-labels":
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss
    if system in ("ours-sdpa", "ours-eager", *COMPILED_SYSTEMS):
        logits = model(**{name: value for name, value in batch.items() if name != "labels"}, use_cache=False).logits
        return chunked_token_cross_entropy(logits, batch["labels"], None, LABEL_SMOOTHING)
    inputs = {name: value for name, value in batch.items() if name not in ("labels", "decoder_attention_mask")}
    if system == "ours-logits":
        logits = model(**inputs).logits
        return nn.functional.cross_entropy(
            logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100, label_smoothing=LABEL_SMOOTHING
        )
    inputs["decoder_attention_mask"] = batch["decoder_attention_mask"]
    if system.startswith("marian"):  # what Seq2SeqTrainer(label_smoothing_factor=0.1) does
        return LabelSmoother(epsilon=LABEL_SMOOTHING)(model(**inputs), batch["labels"])
    logits = model(**inputs)
    return nn.functional.cross_entropy(
        logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100, label_smoothing=LABEL_SMOOTHING
    )


def generate(model: nn.Module, system: str, input_ids, attention_mask, num_beams: int) -> torch.Tensor:
    """(b, NEW_TOKENS) generated ids, decoder start token excluded."""
    if system == "nn-transformer":
        return model.greedy(input_ids, attention_mask, NEW_TOKENS)
    if system in GENERATION_PATHS:
        config = model.config.paper_generation_config(num_beams=num_beams, min_new_tokens=NEW_TOKENS, max_length=None)
        hypotheses = decode(model, input_ids, attention_mask, [NEW_TOKENS] * len(input_ids), config, 1)
        return torch.tensor([ids for ((ids, _),) in hypotheses], device=input_ids.device)
    return model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        num_beams=num_beams,
        do_sample=False,
        min_new_tokens=NEW_TOKENS,
        max_new_tokens=NEW_TOKENS,
    )[:, 1:]


# ---------------------------------------------------------------------------------------------------- the workload


def make_workload(vocab_size: int, seed: int = SEED, train_batch: int = TRAIN_BATCH) -> dict:
    """Training pairs (`train_batch` per batch) and generation sources as lists of ids (ids 4.. are ordinary tokens;
    each sentence ends in EOS)."""
    rng = random.Random(seed)

    def sentence(shortest, longest):
        return [rng.randrange(4, vocab_size) for _ in range(rng.randint(shortest, longest) - 1)] + [EOS]

    return {
        "train": [
            [(sentence(*TRAIN_LENGTHS), sentence(*TRAIN_LENGTHS)) for _ in range(train_batch)]
            for _ in range(TRAIN_BATCHES)
        ],
        "sources": [sentence(*SOURCE_LENGTHS) for _ in range(SOURCES)],
    }


def pad(rows: list[list[int]], value: int, device) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([row + [value] * (width - len(row)) for row in rows], device=device)


def training_batch(pairs, device) -> dict:
    """What TranslationDataCollator produces: right padding, labels -100 on padding, padding marked in both masks."""
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    return {
        "input_ids": pad(sources, PAD, device),
        "attention_mask": pad([[1] * len(s) for s in sources], 0, device),
        "decoder_input_ids": pad([[BOS] + t for t in targets], PAD, device)[:, :-1],  # labels shifted right
        "decoder_attention_mask": pad([[1] * len(t) for t in targets], 0, device),
        "labels": pad(targets, -100, device),
    }


def forward_flops(size: str, source_length: int, target_length: int, num_beams: int = 1) -> int:
    """FLOPs of the matmuls (2 per multiply-add) needed for one sentence pair, counting real tokens only.

    Decoding `target_length` tokens one by one with a cache needs exactly the matmuls of one teacher-forced pass, so
    this also counts generation (`num_beams` hypotheses through the decoder; the encoder and the cross-attention
    keys/values once). Causal self-attention counts only the keys each query sees; embeddings, LayerNorms, softmax,
    biases and the optimizer are left out. Training is 3x (backward = 2x forward).
    """
    d, f, layers, v = (SIZES[size][k] for k in ("d_model", "ffn", "layers", "vocab_size"))
    return pair_flops(d, f, layers, v, source_length, target_length, num_beams)


def pair_flops(d: int, f: int, layers: int, v: int, s, t, num_beams: int = 1):
    """[`forward_flops`] of a model of width d, FFN f, `layers` + `layers` layers and vocabulary v, for source and
    target lengths s and t: ints, or tensors of many pairs' lengths (the GPU training probe counts them on the
    device)."""
    encoder = layers * (8 * s * d * d + 4 * s * s * d + 4 * s * d * f)  # Q,K,V,O projections; QK^T and AV; FFN
    cross_keys_values = layers * 4 * s * d * d
    decoder = (
        layers
        * (
            8 * t * d * d
            + 2 * t * (t + 1) * d  # self-attention: projections; causal QK^T and AV
            + 4 * t * d * d
            + 4 * t * s * d  # cross-attention: Q and O projections; QK^T and AV
            + 4 * t * d * f  # FFN
        )
        + 2 * t * d * v
    )  # output projection
    return encoder + cross_keys_values + num_beams * decoder


def workload_counts(size: str, workload: dict) -> dict:
    """Per task: tokens (non-padding targets for training, generated tokens otherwise) and FLOPs of one measurement."""
    pairs = [pair for batch in workload["train"] for pair in batch]
    counts = {"train": (sum(len(t) for _, t in pairs), 3 * sum(forward_flops(size, len(s), len(t)) for s, t in pairs))}
    for task, num_beams in TASKS.items():
        if num_beams:
            sources = task_sources(task, workload["sources"])
            flops = sum(forward_flops(size, len(s), NEW_TOKENS, num_beams) for s in sources)
            counts[task] = (len(sources) * NEW_TOKENS, flops)
    return counts


def is_batch_1(task: str) -> bool:
    return task.endswith("_b1")


def task_sources(task: str, sources: list) -> list:
    return sources[:SINGLE_SOURCES] if is_batch_1(task) else sources


def generation_batches(task: str, sources: list, device: str) -> list:
    """(input_ids, attention_mask) per batch of the generation task."""
    sources, size = task_sources(task, sources), 1 if is_batch_1(task) else GENERATION_BATCH
    batches = [sources[i : i + size] for i in range(0, len(sources), size)]
    return [(pad(s, PAD, device), pad([[1] * len(x) for x in s], 0, device)) for s in batches]


# ---------------------------------------------------------------------------------------------------- measurements


def in_fresh_process(fn, *args):
    """fn(*args) in a new spawned process: no memory, threads or peak-memory record shared with this one."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def quiet():
    """No progress bars or advisory warnings from the measurement processes."""
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")  # nn.Transformer's fast path


def peak_memory_mb(device: str) -> float:
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    # VmHWM rather than ru_maxrss, which a spawned child inherits from its parent across fork + exec.
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


def timed(fn, device: str) -> tuple[float, object]:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, result


def precision_context(precision: str, device: str):
    """The autocast of `precision` (bf16 autocast, or nothing for fp32)."""
    if precision == "bf16" and device == "cpu":
        # nn.Transformer's inference fast path misses CPU autocast (its check, torch.is_autocast_enabled(), looks at
        # CUDA only) and fails on the mixed dtypes; only that model uses the fast path.
        torch.backends.mha.set_fastpath_enabled(False)
    return torch.autocast(device, torch.bfloat16, enabled=precision == "bf16")


def measure_torch(
    system: str, size: str, precision: str, device: str, threads: int, workload: dict, generation: bool = True
) -> dict:
    """Seconds of one training pass and the peak memory of training (in MB); with `generation`, also the seconds of
    each generation task."""
    torch.set_num_threads(threads)
    quiet()
    model = build_model(system, size).to(device).train()
    autocast = precision_context(precision, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [training_batch(pairs, device) for pairs in workload["train"]]
    result = {}

    def train(batches):
        for batch in batches:
            with autocast:
                loss = training_loss(model, system, batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    if system not in GENERATION_PATHS:
        # warm-up: every batch shape once (compiling them), except the slow size's uncompiled systems
        train(batches if size not in ("base", "big") or system in COMPILED_SYSTEMS else batches[:1])
        passes = TRAIN_PASSES[size]
        seconds = timed(lambda: [train(batches) for _ in range(passes)], device)[0]
        result = {"train": seconds / passes, "train_peak_mb": peak_memory_mb(device)}
    if generation:
        optimizer.state.clear()  # free the Adam moments before generation
        result.update(time_generation({system: model.eval()}, precision, device, workload)[system])
    return result


def measure_generation(systems: list[str], size: str, precision: str, device: str, threads: int, workload: dict):
    """{system: seconds of each generation task}, every system's models in this one process."""
    torch.set_num_threads(threads)
    quiet()
    models = {s: build_model(s, size).to(device).eval() for s in systems if generates(s, 1)}
    return time_generation(models, precision, device, workload)


def generates(system: str, num_beams: int) -> bool:
    return system not in TRAINING_CALL_PATHS and (system != "nn-transformer" or num_beams == 1)


def time_generation(models: dict, precision: str, device: str, workload: dict) -> dict:
    """Each task's passes alternate between the systems (in a rotating order), GENERATION_TIMINGS passes each after
    a warm-up batch; a system's time for a task is its fastest pass."""
    autocast, result = precision_context(precision, device), {system: {} for system in models}
    for task, num_beams in TASKS.items():
        systems = [system for system in models if num_beams and generates(system, num_beams)]
        if not systems:
            continue
        sources = generation_batches(task, workload["sources"], device)
        with torch.no_grad(), autocast:
            for system in systems:
                generate(models[system], system, *sources[0], num_beams)  # warm-up
            for timing in range(GENERATION_TIMINGS):
                for system in systems[timing % len(systems) :] + systems[: timing % len(systems)]:
                    seconds, outputs = timed(
                        lambda m=models[system], system=system, n=num_beams, batches=sources: [
                            generate(m, system, *batch, n) for batch in batches
                        ],
                        device,
                    )
                    result[system][task] = min(seconds, result[system].get(task, seconds))
                    assert all(o.shape[1] == NEW_TOKENS for o in outputs), f"{system}: not {NEW_TOKENS} new tokens"
    return result


def measure_matmul_peak(device: str, precisions: list[str], threads: int) -> dict:
    """FLOP/s of a 2048x2048 matmul per precision: median of 5 timings after a warm-up."""
    torch.set_num_threads(threads)
    calls = 1 if device == "cpu" else 50  # enough work per timing on a GPU
    peaks = {}
    for precision in precisions:
        a, b = (torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=device, dtype=DTYPES[precision]) for _ in range(2))
        times = [timed(lambda a=a, b=b: [a @ b for _ in range(calls)], device)[0] for _ in range(6)][1:]
        peaks[precision] = calls * 2 * MATMUL_SIZE**3 / statistics.median(times)
    return peaks


def convert_for_ct2(size: str, output_dir: str) -> str:
    """The MarianMTModel of the benchmark (same seed, same weights), converted by CTranslate2's converter."""
    quiet()
    with tempfile.TemporaryDirectory() as marian_dir:
        build_model("marian-sdpa", size).save_pretrained(marian_dir)
        return convert_marian(marian_dir, output_dir)


def export_ours_for_ct2(size: str, output_dir: str) -> str:
    """Our model of the benchmark (same seed, same weights), exported by `export_ctranslate2` with a word-level
    tokenizer over benchmark_ctranslate2's synthetic vocabulary (the token strings its timing script decodes)."""
    from hf_vanilla_transformer.interop.ctranslate2 import export_ctranslate2

    quiet()
    tokens = vocabulary(SIZES[size]["vocab_size"])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, SPECIAL_TOKENS[UNK])),
        **dict(zip(("pad_token", "bos_token", "eos_token", "unk_token"), SPECIAL_TOKENS)),
    )
    with tempfile.TemporaryDirectory() as model_dir:
        build_model("ours-sdpa", size).save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        return str(export_ctranslate2(model_dir, output_dir))


def measure_ct2(model_dir: str, compute_type: str, device: str, threads: int, workload: dict) -> dict:
    """Seconds of each generation task, timed by benchmark_ctranslate2.py in a fresh process without torch."""
    beams = {task: num_beams for task, num_beams in TASKS.items() if num_beams and not is_batch_1(task)}
    task = dict(
        model_dir=model_dir,
        sources=workload["sources"],
        batch_size=GENERATION_BATCH,
        beams=list(beams.values()),
        new_tokens=NEW_TOKENS,
        threads=threads,
        compute_type=compute_type,
        device=device,
        timings=GENERATION_TIMINGS,
    )
    proc = subprocess.run([sys.executable, str(CT2_SCRIPT)], input=json.dumps(task), capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"benchmark_ctranslate2.py failed:\n{proc.stderr}")
    out = json.loads(proc.stdout)
    assert not out["torch_in_process"]
    return {name: run["seconds"] for name, run in zip(beams, out["runs"])}


def ct2_systems(device: str) -> dict:
    """CTranslate2 system -> compute type; none when ctranslate2 is missing or (on a GPU) lacks CUDA."""
    if importlib.util.find_spec("ctranslate2") is None:
        print("ctranslate2 is not installed: skipping the CTranslate2 rows (pip install -e .[export]).")
        return {}
    if device == "cpu":
        return {f"ct2{ours}-{t}": t for ours in ("", "-ours") for t in ("float32", "int8")}
    probe = [sys.executable, "-c", "import ctranslate2; print(ctranslate2.get_cuda_device_count())"]
    if int(subprocess.run(probe, capture_output=True, text=True).stdout.strip() or 0) == 0:
        print("This ctranslate2 build has no CUDA support: skipping the CTranslate2 rows.")
        return {}
    return {
        f"ct2{ours}-{name}": t
        for ours in ("", "-ours")
        for name, t in (("bfloat16", "bfloat16"), ("int8", "int8_bfloat16"))
    }


def export_ours_for_onnx(size: str, output_dir: str) -> str:
    """Our model of the benchmark (same seed, same weights), exported by `export_onnx` with its int8 graphs."""
    from hf_vanilla_transformer.interop.onnx import export_onnx

    quiet()
    with tempfile.TemporaryDirectory() as model_dir:
        build_model("ours-sdpa", size).save_pretrained(model_dir)
        return str(export_onnx(model_dir, output_dir, quantize=True, model_type="vanilla_transformer"))


def measure_onnx(onnx_dir: str, quantized: bool, threads: int, workload: dict) -> dict:
    """Seconds of greedy generation by the package's ONNX Runtime loop (`OnnxSeq2SeqLM`; it has no beam search)."""
    from hf_vanilla_transformer.interop.onnx_runtime import OnnxSeq2SeqLM

    model = OnnxSeq2SeqLM(onnx_dir, quantized, num_threads=threads)
    batches = [(ids.numpy(), mask.numpy()) for ids, mask in generation_batches("greedy", workload["sources"], "cpu")]

    def greedy(batch):
        return model.generate(*batch, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)

    greedy(batches[0])  # warm-up
    timings = [timed(lambda: [greedy(batch) for batch in batches], "cpu") for _ in range(GENERATION_TIMINGS)]
    seconds, outputs = min(timings, key=lambda timing: timing[0])
    assert all(o.shape[1] == 1 + NEW_TOKENS for o in outputs), f"ONNX Runtime did not generate {NEW_TOKENS} tokens"
    return {"greedy": seconds}


def onnx_systems(device: str) -> dict:
    """ONNX Runtime system -> whether it runs the int8 graphs; none when onnxruntime is missing or on a GPU."""
    if device != "cpu" or importlib.util.find_spec("onnxruntime") is None:
        print("Skipping the ONNX Runtime rows (CPU only; pip install -e .[export]).")
        return {}
    return {"onnx-float32": False, "onnx-int8": True}


# ---------------------------------------------------------------------------------------------------- the run


def run(
    sizes: list[str], precisions: list[str], device: str, threads: int, repeats: int, systems: list[str] | None = None
) -> dict:
    """Every measurement of every size, systems alternating within each repeat (order rotated between repeats)."""
    ct2, onnx = ct2_systems(device), onnx_systems(device)
    if systems is not None:  # a subset (--systems): MarianMTModel always, as every ratio's reference
        keep = {*systems, REFERENCE}
        ct2, onnx = {s: v for s, v in ct2.items() if s in keep}, {s: v for s, v in onnx.items() if s in keep}
    torch_systems = [system for system in TORCH_SYSTEMS if systems is None or system in {*systems, REFERENCE}]
    samples, peaks = {}, {}
    for size in sizes:
        workload = make_workload(SIZES[size]["vocab_size"])
        with tempfile.TemporaryDirectory() as tmp:
            ct2_dirs = (
                {  # system prefix -> model folder
                    "ct2-ours": in_fresh_process(export_ours_for_ct2, size, os.path.join(tmp, "ct2-ours")),
                    "ct2": in_fresh_process(convert_for_ct2, size, os.path.join(tmp, "ct2")),
                }
                if ct2
                else {}
            )
            onnx_dir = in_fresh_process(export_ours_for_onnx, size, os.path.join(tmp, "onnx")) if onnx else None
            trained = [system for system in torch_systems if system not in GENERATION_PATHS]
            jobs = [("matmul", None)] + [(system, p) for p in precisions for system in [*trained, "generation"]]
            jobs += [(system, precisions[0]) for system in [*ct2, *onnx]]
            for r in range(repeats):
                for job, precision in jobs[r % len(jobs) :] + jobs[: r % len(jobs)]:
                    start = time.perf_counter()
                    if job == "matmul":
                        for p, flops in in_fresh_process(measure_matmul_peak, device, precisions, threads).items():
                            peaks.setdefault(size, {}).setdefault(p, []).append(flops)
                        continue
                    if job == "generation":  # every torch system in one process, their passes alternating
                        args = torch_systems, size, precision, device, threads, workload
                        results = in_fresh_process(measure_generation, *args)
                    elif job in ct2:
                        model_dir = ct2_dirs["ct2-ours" if job.startswith("ct2-ours") else "ct2"]
                        results = {job: measure_ct2(model_dir, ct2[job], device, threads, workload)}
                    elif job in onnx:
                        results = {job: in_fresh_process(measure_onnx, onnx_dir, onnx[job], threads, workload)}
                    else:
                        args = job, size, precision, device, threads, workload, False
                        results = {job: in_fresh_process(measure_torch, *args)}
                    for system, result in results.items():
                        for metric, value in result.items():
                            samples.setdefault((size, precision, system), {}).setdefault(metric, []).append(value)
                    print(
                        f"[{size} {r + 1}/{repeats}] {job} {precision}: "
                        + "; ".join(
                            f"{system} " + ", ".join(f"{k} {v:.3g}" for k, v in result.items())
                            for system, result in results.items()
                        )
                        + f" ({time.perf_counter() - start:.0f} s)",
                        flush=True,
                    )
    return {"samples": samples, "peaks": peaks, "ct2": ct2}


def summarize(measured: dict, sizes: list[str]) -> list[dict]:
    """One row per (size, precision, system): medians, tokens/s, fraction of the matmul peak, ratios to Marian."""
    counts = {size: workload_counts(size, make_workload(SIZES[size]["vocab_size"])) for size in sizes}
    rows = {}
    for (size, precision, system), metrics in measured["samples"].items():
        peak = statistics.median(measured["peaks"][size][precision])
        row = {"size": size, "precision": precision, "system": system, "label": label(system, measured["ct2"])}
        for task in TASKS:
            if task in metrics:
                tokens, flops = counts[size][task]
                seconds = statistics.median(metrics[task])
                row[f"{task}_tokens_per_s"] = tokens / seconds
                row[f"{task}_peak_fraction"] = flops / seconds / peak
        if "train_peak_mb" in metrics:
            row["train_peak_mb"] = statistics.median(metrics["train_peak_mb"])
        row["samples"] = metrics
        rows[size, precision, system] = row
    for (size, precision, _), row in rows.items():
        reference = rows.get((size, precision, REFERENCE), {})
        row["vs_marian"] = {m: row[m] / reference[m] for m in RATIO_METRICS if m in row and m in reference}
    return list(rows.values())


def label(system: str, ct2: dict) -> str:
    if system.startswith("ct2-ours"):
        return f"this package via CTranslate2 {ct2[system]}"
    if system.startswith("onnx-"):
        return f"this package via ONNX Runtime {system.removeprefix('onnx-')}"
    return TORCH_SYSTEMS.get(system) or f"CTranslate2 {ct2[system]}"


def check_targets(rows: list[dict], precision: str, ct2: dict) -> list[dict]:
    """The project's targets, from the ratios system / other system of this run at the result precision."""
    by_key = {(r["size"], r["system"]): r for r in rows if r["precision"] == precision}
    sizes = list(dict.fromkeys(size for size, _ in by_key))
    marian = TORCH_SYSTEMS[REFERENCE]
    specs = [  # description, metric, system, other system, ">=" or "<=", threshold on the ratio system/other, sizes
        (f"training >= 1.3x {marian}", "train_tokens_per_s", OURS, REFERENCE, ">=", 1.3, sizes),
        (f"peak training memory <= {marian}", "train_peak_mb", OURS, REFERENCE, "<=", 1.0, sizes),
        (
            f"training, {TORCH_SYSTEMS[COMPILED]} >= 1.2x {TORCH_SYSTEMS[OURS]}",
            "train_tokens_per_s",
            COMPILED,
            OURS,
            ">=",
            1.2,
            sizes,
        ),
    ]
    engine = TORCH_SYSTEMS["ours-translate"]
    for task, batch in (("greedy", 16), ("beam4", 16), ("greedy_b1", 1), ("beam4_b1", 1)):
        search = "greedy" if task.startswith("greedy") else "beam-4"
        name = f"{search}, batch {batch}: generate() >= 0.95x {marian}'s"
        specs.append((name, f"{task}_tokens_per_s", OURS, REFERENCE, ">=", 0.95, sizes))
        name = f"{search}, batch {batch}: {engine} >= 1.3x {marian}'s generate()"
        specs.append((name, f"{task}_tokens_per_s", "ours-translate", REFERENCE, ">=", 1.3, sizes))
    if ct2:
        ct2_float = next(iter(ct2))
        specs.append(
            (f"greedy >= {label(ct2_float, ct2)}", "greedy_tokens_per_s", OURS, ct2_float, ">=", 1.0, ["small"])
        )
        for theirs in (system for system in ct2 if not system.startswith("ct2-ours")):
            exported = theirs.replace("ct2-", "ct2-ours-")
            for task, metric in (("greedy", "greedy_tokens_per_s"), ("beam-4", "beam4_tokens_per_s")):
                name = f"{task}: {label(exported, ct2)} >= 0.95x {label(theirs, ct2)} (MarianMTModel converted)"
                specs.append((name, metric, exported, theirs, ">=", 0.95, sizes))
        name = f"greedy: {label('ct2-ours-int8', ct2)} >= 3x {TORCH_SYSTEMS[OURS]}"
        specs.append((name, "greedy_tokens_per_s", "ct2-ours-int8", OURS, ">=", 3.0, ["small"]))
    targets = []
    for name, metric, system, other, comparison, threshold, target_sizes in specs:
        for size in target_sizes:
            ours, theirs = by_key.get((size, system), {}), by_key.get((size, other), {})
            if metric in ours and metric in theirs:
                ratio = ours[metric] / theirs[metric]
                passed = ratio >= threshold if comparison == ">=" else ratio <= threshold
                targets.append({"target": name, "size": size, "ratio": ratio, "passed": passed})
    return targets


def format_report(rows: list[dict], peaks: dict, targets: list[dict], threads: int, device: str) -> str:
    columns = [
        ("train tok/s", "train_tokens_per_s"),
        ("% of peak", "train_peak_fraction"),
        ("train MB", "train_peak_mb"),
        ("greedy tok/s", "greedy_tokens_per_s"),
        ("beam-4 tok/s", "beam4_tokens_per_s"),
        ("greedy b1 tok/s", "greedy_b1_tokens_per_s"),
        ("beam-4 b1 tok/s", "beam4_b1_tokens_per_s"),
    ]
    lines = []
    for size, precision in dict.fromkeys((r["size"], r["precision"]) for r in rows):
        peak = statistics.median(peaks[size][precision])
        lines += [
            "",
            f"{size}, {precision} on {device} ({threads} threads; {MATMUL_SIZE}^2 matmul peak "
            f"{peak / 1e9:.0f} GFLOP/s). Values (x ratio to {TORCH_SYSTEMS[REFERENCE]})",
        ]
        lines.append(f"{'system':<30}" + "".join(f"{title:>20}" for title, _ in columns))
        for row in (r for r in rows if (r["size"], r["precision"]) == (size, precision)):
            cells = []
            for _, metric in columns:
                if metric not in row:
                    cells.append("-")
                elif metric.endswith("fraction"):
                    cells.append(f"{100 * row[metric]:.0f}%")
                else:
                    ratio = row["vs_marian"].get(metric)
                    cells.append(f"{row[metric]:.0f}" + (f" (x{ratio:.2f})" if ratio is not None else ""))
            lines.append(f"{row['label']:<30}" + "".join(f"{cell:>20}" for cell in cells))
    lines += ["", "Targets (ours = ours (sdpa), ratios of this run):"]
    lines += [f"  {'PASS' if t['passed'] else 'FAIL'}  {t['target']}, {t['size']}: x{t['ratio']:.2f}" for t in targets]
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    """Grouped bars: throughput ratio to MarianMTModel (sdpa) per task and system, one panel per size and precision."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["size"], r["precision"]) for r in rows))
    systems = list(dict.fromkeys(r["system"] for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(max(7, 5.5 * len(panels)), 6), squeeze=False)
    width = 0.8 / len(systems)
    for ax, (size, precision) in zip(axes[0], panels):
        for i, system in enumerate(systems):
            row = next(
                (r for r in rows if (r["size"], r["precision"], r["system"]) == (size, precision, system)), None
            )
            if row is None:
                continue
            ratios = [row["vs_marian"].get(f"{task}_tokens_per_s", math.nan) for task in TASKS]
            ax.bar(
                [t + (i - (len(systems) - 1) / 2) * width for t in range(len(TASKS))],
                ratios,
                width,
                label=row["label"],
                color=plt.cm.tab20(i % 20),  # the default cycle repeats after 10 systems
            )
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(TASKS)), ["training", "greedy", "beam-4", "greedy\nbatch 1", "beam-4\nbatch 1"])
        ax.set_title(f"{size}, {precision}")
        ax.set_ylabel(f"throughput / {TORCH_SYSTEMS[REFERENCE]}")
        ax.grid(axis="y", alpha=0.3)
    labels = {}  # every system once, CTranslate2 included (it is absent from the bf16 panels)
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            labels.setdefault(label, handle)
    columns = 2 if len(panels) == 1 else 4  # the legend fits under the panels
    rows = math.ceil(len(labels) / columns)
    fig.legend(labels.values(), labels.keys(), loc="lower center", ncol=columns, fontsize=8)
    fig.tight_layout(rect=(0, 0.035 * rows + 0.01, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=SIZES, default=["small", "base"])
    parser.add_argument("--repeats", type=int, default=3, help="measurements per system; medians are reported")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch and CTranslate2 threads")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: the torch systems in bf16")
    parser.add_argument("--bf16", action="store_true", help="on CPU, add bf16-autocast rows for the torch systems")
    parser.add_argument(
        "--systems",
        nargs="+",
        help=f"only these systems (default: all; {REFERENCE} always): {', '.join(TORCH_SYSTEMS)}, ...",
    )
    parser.add_argument("--json", default="benchmark_results.json")
    parser.add_argument("--plot", default="benchmark_results.png")
    args = parser.parse_args(argv)

    precisions = ["bf16"] if args.device == "cuda" else ["fp32"] + ["bf16"] * args.bf16
    measured = run(args.sizes, precisions, args.device, args.threads, args.repeats, args.systems)
    rows = summarize(measured, args.sizes)
    targets = check_targets(rows, precisions[0], measured["ct2"])
    print(format_report(rows, measured["peaks"], targets, args.threads, args.device))
    summary = {
        "settings": {
            "device": args.device,
            "cpu": cpu_model(),
            "threads": args.threads,
            "repeats": args.repeats,
            "seed": SEED,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "ctranslate2": importlib.metadata.version("ctranslate2") if measured["ct2"] else None,
        },
        "workload": {
            "train_batch": TRAIN_BATCH,
            "train_lengths": TRAIN_LENGTHS,
            "train_batches": TRAIN_BATCHES,
            "label_smoothing": LABEL_SMOOTHING,
            "sources": SOURCES,
            "source_lengths": SOURCE_LENGTHS,
            "generation_batch": GENERATION_BATCH,
            "single_sources": SINGLE_SOURCES,
            "new_tokens": NEW_TOKENS,
            "sizes": {s: SIZES[s] for s in args.sizes},
        },
        "matmul_peak_flops": {
            size: {p: statistics.median(v) for p, v in by_p.items()} for size, by_p in measured["peaks"].items()
        },
        "result_precision": precisions[0],
        "rows": rows,
        "targets": targets,
    }
    Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    plot(rows, args.plot)
    print(f"\nWrote {args.json} and {args.plot}.")
    return summary


if __name__ == "__main__":
    main()
