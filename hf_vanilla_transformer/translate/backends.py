"""Translation engines behind `hf_vanilla_transformer.translate.translator`: PyTorch with this package's search
(`decoding.py`; float32, bf16/fp16 on GPUs, dynamic int8 on CPUs) and CTranslate2.

Both load once and decode with any generation settings per call (`generation_config(overrides, nbest)`): they cut
the pieces of a call into batches (`batches`) and decode a batch of source token ids with a new-token limit per
sentence, returning per sentence the best hypotheses as token ids with the log-probability of every token. Texts,
sentences and files are `translator.py`'s.
"""

import copy
import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, CompileConfig, GenerationConfig
from transformers.utils import logging

from ..data.folders import cache_root, check_translation_folder, load_tokenizer, load_translation_model, resolve_model
from ..data.trained_on import token_ids, trained_on
from ..data.vocabulary_map import VMAP_NAME, VocabularyMap
from ..errors import InputError, import_extra
from ..model.configuration_vanilla_transformer import (
    MAX_LEN_A,
    MAX_LEN_B,
    VanillaTransformerConfig,
    target_positions,
)
from ..model.pipeline_translation import check_tokenizer_fits_model, max_source_length
from .constrained import decode_constrained, holds
from .decoding import candidate_ids, check_settings, decode, static_cache
from .io import make_batches


logger = logging.get_logger(__name__)

BEAM_ONLY = ("early_stopping", "length_penalty")
SAMPLING_ONLY = ("temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# --compile auto: the input a `translate` run needs to repay compiling the decoding step, once per batch shape (17 s
# for one shape on an H100, against some 1.5 ms gained per sentence; docs/translate.md).
COMPILE_MIN_LINES = 50_000
# The models whose output layer the PyTorch engine computes for a vocabulary map's rows (`decoding._output_layer`):
# logits = lm_head(decoder states) [+ final_logits_bias].
VMAP_MODEL_TYPES = ("vanilla_transformer", "marian", "bart")


@dataclass
class Hypothesis:
    """One translation: generated ids (EOS included when the model ended it) and their log-probabilities."""

    token_ids: list[int]
    token_scores: list[float]
    reached_limit: bool  # stopped by the length limit before the model produced EOS


GLOSSARY_NEEDS_TORCH = (
    "--glossary needs the PyTorch engine (--backend torch), whose search places the terms: CTranslate2 has no "
    "constrained search."
)
# What a translator keeps per distinct decoding (resolved options, CTranslate2's call options, static caches), the most
# recently used: a service makes them from each request's fields, so a client could otherwise grow the process.
KEPT_DECODINGS = 64


def kept(cache: dict, key, make: Callable, bound: int = KEPT_DECODINGS):
    """`cache[key]`, made by `make()` where missing; beyond `bound` entries, the least recently used is dropped."""
    if key in cache:
        cache[key] = cache.pop(key)  # the most recently used last
    else:
        cache[key] = make()
        if len(cache) > bound:
            del cache[next(iter(cache))]
    return cache[key]


def sequence_score(token_scores: list[float], length_penalty: float) -> float:
    """Beam search's ranking score: the summed log-probabilities over length ** length_penalty."""
    return sum(token_scores) / max(len(token_scores), 1) ** length_penalty


def default_length_rule(generation_config: GenerationConfig) -> tuple[float, int]:
    """(a, b) of the default limit a x source tokens + b new tokens: the model's own fixed limit where its generation
    config sets `max_new_tokens` (a = 0), else the paper's source length + 50, as the translation pipeline. The
    config's `max_length` caps either (`target_positions`)."""
    if generation_config.max_new_tokens is not None:
        return 0.0, generation_config.max_new_tokens
    return float(MAX_LEN_A), MAX_LEN_B


def uses_static_cache(compile: str, device: torch.device, lines: int | None) -> bool:
    """`--compile`'s rule: whether the PyTorch engine decodes through a static cache (compiled on a GPU). `always`
    and `never` decide; `auto` takes it on a GPU for a process known to translate at least `COMPILE_MIN_LINES` lines
    (a `translate` input, a translate-corpus worker's share). Not for `lines=None`, a service or a library call: the
    first request of every batch shape would wait for its compilation."""
    if compile != "auto":
        return compile == "always"
    return device.type == "cuda" and lines is not None and lines >= COMPILE_MIN_LINES


class Backend:
    """What both engines share: the model's generation config with a call's settings on top, and token-budget
    batches."""

    def __init__(self, tokenizer, generation_config: GenerationConfig, input_limit: int | None):
        self.tokenizer, self.base_generation_config, self.input_limit = tokenizer, generation_config, input_limit
        self.trained_on = trained_on(generation_config)
        self.max_source_tokens = self.trained_on.source_limit(input_limit)
        self.default_length_rule = default_length_rule(generation_config)

    def generation_config(self, overrides: dict, nbest: int) -> GenerationConfig:
        """The model's generation config with `overrides` on top, for `nbest` hypotheses per sentence, checked."""
        return generation_settings(self.base_generation_config, overrides, nbest)

    def batches(self, lengths: list[int], max_tokens: int, batch_size: int | None) -> list[list[int]]:
        """The sources (by their token counts) cut into length-sorted batches of at most `max_tokens` padded tokens
        and `batch_size` sentences."""
        return make_batches(lengths, max_tokens, batch_size)

    def check_vmap(self) -> None:
        """Refuse `--use_vmap` where this engine has no vocabulary map, before any input is read."""
        check_vmap_file(self.vmap_file)

    def check_glossary(self) -> None:
        """Refuse a glossary where this engine cannot search under its terms (CTranslate2 has no constrained search;
        its `target_prefix` forces a prefix only)."""
        raise InputError(GLOSSARY_NEEDS_TORCH)


class TorchBackend(Backend):
    """A model with its tokenizer on this package's search (`decoding.py`): one new-token limit per sentence, the
    token log-probabilities of the hypotheses. With `static_cache` it decodes batches of bounded shapes
    (`static_shape`) through a static cache whose step transformers compiles on a GPU, as `generate()` does
    (`compile_config`; on a CPU the static cache runs uncompiled)."""

    def __init__(
        self,
        model,
        tokenizer,
        generation_config: GenerationConfig,
        static_cache: bool = False,
        vmap_file: str | None = None,
    ):
        super().__init__(tokenizer, generation_config, max_source_length(tokenizer, model.config))
        self.model = model
        # Read at the first call with --use_vmap: a folder's map stands in no way of decoding without it.
        self.vmap_file, self.vmap = vmap_file, None
        self.device = next(model.parameters()).device
        self.static_cache = static_cache
        self.compile_config = CompileConfig(fullgraph=True) if static_cache and self.device.type == "cuda" else None
        self.static_caches = {}  # by batch shape and search, reused: the compiled step reads them in place
        self.eos_ids = set(token_ids(generation_config.eos_token_id))
        self.max_position_embeddings = target_positions(model.config, generation_config)
        self.generation_config({}, 1)  # the model's own settings, checked now

    def check_glossary(self) -> None:
        pass

    def check_vmap(self) -> None:
        super().check_vmap()
        check_vmap_model_type(self.model.config.model_type)
        if self.vmap is None:
            self.vmap = VocabularyMap.read(self.vmap_file, self.tokenizer, candidate_ids(self.base_generation_config))

    def generation_config(self, overrides: dict, nbest: int) -> GenerationConfig:
        config = super().generation_config(overrides, nbest)
        config.max_length = config.max_new_tokens = None  # set per batch
        check_settings(self.model, config)
        return config

    def batches(self, lengths: list[int], max_tokens: int, batch_size: int | None) -> list[list[int]]:
        # A static cache decodes each batch at its `static_length`: batches are cut at the rounded lengths.
        return super().batches(
            list(map(self.static_length, lengths)) if self.static_cache else lengths, max_tokens, batch_size
        )

    def static_length(self, source_length: int) -> int:
        """The source length a static cache pads a sentence to: the next power of two from 16, within the longest
        sentence the translator passes on."""
        length = max(16, 1 << (source_length - 1).bit_length())
        return min(length, self.max_source_tokens or length)

    def static_shape(self, sources: list[list[int]], limit: Callable[[int], int], max_tokens: int, batch_size):
        """The (rows, source length, target positions) a static cache decodes a batch in: its longest sentence's
        `static_length`, as many rows as `max_tokens` and `batch_size` allow at that length (batches are cut at it),
        and that length's limit, which bounds every sentence's (the limit grows with the length). One shape per
        source length, a handful per process, so that the step is compiled that many times."""
        length = self.static_length(max(map(len, sources)))
        rows = max(1, max_tokens // length, len(sources))
        rows = min(rows, batch_size or rows)
        return rows, length, limit(length)

    @torch.inference_mode()
    def generate(
        self,
        sources: list[list[int]],
        limit: Callable[[int], int],
        decoding,
        scores: bool = True,
        seed: int = 0,
        terms: list[list[list[int]]] | None = None,
    ) -> list[list[Hypothesis]]:
        """The `decoding.nbest` best hypotheses of each source (token ids with EOS) under `decoding`'s search, at most
        `limit(len(source))` new tokens each. A static cache decodes the batch in its `static_shape`, filled up with
        copies of the first source. `terms`: per source, the token ids of the target terms each of its hypotheses
        must hold: the sources whose hypotheses lack one are decoded again by the constrained search
        (`constrained.py`), the others keep their results, exactly as without terms."""
        limits = [limit(len(s)) for s in sources]
        candidates = None
        if decoding.options.use_vmap:
            candidates = self.vmap.candidates([self.tokenizer.convert_ids_to_tokens(s) for s in sources])
        pad, count = self.tokenizer.pad_token_id, len(sources)
        length, cache = max(map(len, sources)), None
        if self.static_cache:
            options = decoding.options
            shape = self.static_shape(sources, limit, options.max_tokens, options.batch_size)
            rows, length, positions = shape
            sources = sources + [sources[0]] * (rows - count)
            key = (*shape, decoding.num_beams, decoding.nbest)  # the cache holds rows x beams (or x samples) rows
            cache = kept(self.static_caches, key, lambda: static_cache(self.model.config, positions, length))
            cache.reset()
        input_ids = torch.tensor([s + [pad] * (length - len(s)) for s in sources], device=self.device)
        attention_mask = torch.tensor([[1] * len(s) + [0] * (length - len(s)) for s in sources], device=self.device)
        decoded = decode(
            self.model,
            input_ids,
            attention_mask,
            limits,
            decoding.generation_config,
            decoding.nbest,
            seed,
            static_cache=cache,
            compile_config=self.compile_config,
            candidates=candidates,
        )
        redo = [
            i
            for i, wanted in enumerate(terms or ())
            if wanted and not all(holds(ids, term) for ids, _ in decoded[i] for term in wanted)
        ]
        if redo:
            again = decode_constrained(
                self.model,
                input_ids[redo],
                attention_mask[redo],
                [limits[i] for i in redo],
                decoding.generation_config,
                decoding.nbest,
                [terms[i] for i in redo],
                candidates=candidates,
            )
            for i, hypotheses in zip(redo, again):
                decoded[i] = hypotheses
        return [
            [
                Hypothesis(ids, token_scores if scores else [], not ids or ids[-1] not in self.eos_ids)
                for ids, token_scores in hypotheses
            ]
            for hypotheses in decoded
        ]


def load_torch_backend(
    model,
    device: str | None = None,
    dtype: str = "float32",
    int8: bool = False,
    trust_remote_code: bool = False,
    tokenizer=None,
    compile: str = "never",
    lines: int | None = None,
    vmap: str | None = None,
) -> TorchBackend:
    """Any `AutoModelForSeq2SeqLM`, a folder or Hub id loaded with its tokenizer, or a model object with `tokenizer`
    (moved to `device` and `dtype`, in eval mode). `compile` and `lines`: `uses_static_cache`. `vmap`: a vocabulary
    map's file (default: the model folder's `vmap.txt`, where it has one)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dtype not in DTYPES:
        raise InputError(f"--dtype must be one of {sorted(DTYPES)}, got {dtype!r}.")
    if dtype == "float16" and device.type == "cpu":
        # bfloat16 is allowed: CPUs with AMX or AVX512-BF16 run it fast (on others it is slower than float32).
        raise InputError("--dtype float16 needs a GPU (--device cuda): CPUs compute float16 slowly, if at all.")
    if int8 and (device.type != "cpu" or dtype != "float32"):
        raise InputError("--int8 is PyTorch's dynamic quantization for CPUs: use it with --device cpu and float32.")
    if isinstance(model, str):
        name, model = model, load_translation_model(model, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code)
        tokenizer = tokenizer or load_tokenizer(name, trust_remote_code=trust_remote_code)
    elif tokenizer is None:
        raise ValueError("A model object needs its `tokenizer`.")
    check_tokenizer_fits_model(tokenizer, model.config)
    vmap = vmap_file(model.name_or_path or None, vmap)  # a model object may have no folder
    model = model.to(device, DTYPES[dtype]).eval()
    if int8:
        # A copy with every nn.Linear (the tied lm_head too, as its own int8 copy) holding int8 weights and
        # quantizing its input on the fly; embeddings, LayerNorms and the attention products stay float32. torch
        # deprecates torch.ao.quantization in favour of torchao, whose CPU int8 path is not faster without compiling;
        # quantize_dynamic still works (tests/model/test_transformers_contract.py says the day it is gone), so its
        # warnings are acknowledged here, once.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*quantized tensor creation functions", category=UserWarning)
            warnings.filterwarnings(
                "ignore", message="torch.ao.quantization is deprecated", category=DeprecationWarning
            )
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    static = uses_static_cache(compile, device, lines)
    return TorchBackend(model, tokenizer, model.generation_config, static, vmap)


def vmap_file(folder: str | Path | None, vmap: str | None = None, ctranslate2: bool = False) -> str | None:
    """The vocabulary map an engine loads for `--use_vmap`: `vmap` (`--vmap FILE`, the PyTorch engine's), else the
    model folder's own where it has one."""
    if vmap is not None and ctranslate2:
        raise InputError(
            f"--vmap {vmap}: CTranslate2 reads the {VMAP_NAME} of its model folder; copy the file there instead."
        )
    if vmap is not None:
        if not Path(vmap).is_file():
            raise InputError(f"--vmap {vmap}: no such file.")
        return vmap
    if folder is not None and (Path(folder) / VMAP_NAME).is_file():
        return str(Path(folder) / VMAP_NAME)
    return None


def check_vmap_file(vmap: str | None) -> None:
    if not vmap:
        raise InputError(
            f"--use_vmap: no vocabulary map was loaded with the model (its folder has no {VMAP_NAME}; the PyTorch "
            "engine also takes --vmap FILE). `distill` writes one for its student; docs/translate.md says how."
        )


def check_vmap_model_type(model_type: str | None) -> None:
    """The PyTorch engine computes a map's rows of the output layer for these models only (`VMAP_MODEL_TYPES`)."""
    if model_type not in VMAP_MODEL_TYPES:
        raise InputError(
            f"--use_vmap: the PyTorch engine restricts the output layer of {', '.join(VMAP_MODEL_TYPES)} models, "
            f"not of {model_type} models; --backend ctranslate2 takes vocabulary maps."
        )


def check_before_loading(model: str, engine, decoding) -> None:
    """Refuse, from a model folder's small files (its generation config, tokenizer and vocabulary map), what loading
    it with `engine` (`EngineOptions`) and decoding with `decoding` (`DecodeOptions`) would refuse: for the commands
    whose model loads later or elsewhere (translate-corpus's workers, a service's start-up), so that they refuse before
    Ray or the server starts. A Hub id is checked where it loads."""
    folder = Path(resolve_model(model))
    if not folder.is_dir():
        return
    if (folder / "generation_config.json").is_file():
        base = GenerationConfig.from_pretrained(folder)
    else:  # as the engines read such a folder
        base = GenerationConfig()
    generation_settings(base, decoding.generation, decoding.nbest)
    if decoding.glossary is not None and engine.backend == "ctranslate2":
        raise InputError(GLOSSARY_NEEDS_TORCH)
    if not decoding.use_vmap:
        return
    vmap = vmap_file(folder, engine.vmap, engine.backend == "ctranslate2")
    check_vmap_file(vmap)
    if engine.backend == "torch":
        config = AutoConfig.from_pretrained(folder, trust_remote_code=engine.trust_remote_code)
        check_vmap_model_type(config.model_type)
    tokenizer = load_tokenizer(str(folder), trust_remote_code=engine.trust_remote_code)
    VocabularyMap.read(vmap, tokenizer, candidate_ids(base))


def generation_settings(base: GenerationConfig, overrides: dict, nbest: int) -> GenerationConfig:
    """The model's generation config with `overrides` on top, checked before any input is read."""
    config = copy.deepcopy(base)
    config.update(**overrides)
    # What the model's config sets for a strategy that the overrides turned off would be an error in validate().
    unused = (BEAM_ONLY if (config.num_beams or 1) == 1 else ()) + (() if config.do_sample else SAMPLING_ONLY)
    config.update(**{name: None for name in unused if name not in overrides})
    if nbest > 1 and not config.do_sample and (config.num_beams or 1) < nbest:
        raise InputError(
            f"--nbest {nbest} needs --num_beams {nbest} or more (beam search keeps num_beams hypotheses)."
        )
    config.num_return_sequences = nbest
    try:
        config.validate(strict=True)
    except ValueError as error:  # settings that contradict each other, named by transformers
        raise InputError(f"These decoding options do not go together: {error}") from None
    return config


class CTranslate2Backend(Backend):
    """A CTranslate2 `Translator` on the same interface. Token log-probabilities come from scoring the hypotheses
    (`score_batch`), the model's own, as beam search uses them.

    CTranslate2 takes one length limit per call, and the sentences of a batch each have their own. A batch is decoded
    in one call at its longest limit: a sentence's search reads its limit only at its last step, so a sentence whose
    search ended before its own last step got exactly what its own limit gives, and greedy search's result under a
    shorter limit is the longer one's, cut. The rest (beam searches that ran to their own limit) are decoded again
    with their limits. Calling per limit instead cost CTranslate2 more than half its speed on a server's batches,
    whose sentences come from many requests and have as many lengths."""

    def __init__(
        self,
        translator,
        tokenizer,
        generation_config: GenerationConfig,
        limit: int | None,
        vmap_file: str | None = None,
    ):
        super().__init__(tokenizer, generation_config, limit)
        self.translator, self.vmap_file = translator, vmap_file  # the model folder's vocabulary map, if any
        self.max_position_embeddings = min((n for n in (limit, generation_config.max_length) if n), default=None)
        self.options = {}  # translate_batch's options, by generation config

    def translate_options(self, generation_config: GenerationConfig, nbest: int, use_vmap: bool) -> dict:
        """`translate_batch`'s options for a call's settings. Long sentences are split before they get here
        (max_input_length=0: no truncation); EOS shows who ended; max_decoding_length is each sentence's own, set in
        `generate`."""
        from ..interop.ctranslate2 import translate_options

        return kept(
            self.options,
            (generation_config.to_json_string(), nbest, use_vmap),
            lambda: translate_options(
                generation_config,
                num_hypotheses=nbest,
                max_input_length=0,
                return_end_token=True,
                max_decoding_length=None,
                use_vmap=use_vmap,
            ),
        )

    def generate(
        self, sources: list[list[int]], limit: Callable[[int], int], decoding, scores: bool = True, seed: int = 0
    ) -> list[list[Hypothesis]]:
        eos = self.tokenizer.eos_token
        tokens = [self.tokenizer.convert_ids_to_tokens(s) for s in sources]
        options = self.translate_options(decoding.generation_config, decoding.nbest, decoding.options.use_vmap)
        results = self._decode(tokens, [limit(len(s)) for s in sources], options, decoding.nbest)
        hypotheses = [[(h[:-1], True) if h and h[-1] == eos else (h, False) for h in r] for r in results]
        flat = [(i, h) for i, hs in enumerate(hypotheses) for h in hs]
        log_probs = [[] for _ in flat]
        if scores and flat:
            scored = self.translator.score_batch([tokens[i] for i, _ in flat], [h for _, (h, _) in flat])
            log_probs = [s.log_probs if ended else s.log_probs[:-1] for s, (_, (_, ended)) in zip(scored, flat)]
        out = [[] for _ in sources]
        for (i, (h, ended)), token_scores in zip(flat, log_probs):
            ids = self.tokenizer.convert_tokens_to_ids(h + [eos] if ended else h)
            out[i].append(Hypothesis(ids, list(token_scores), not ended))
        return out

    def _decode(self, tokens: list[list[str]], limits: list[int], options: dict, nbest: int) -> list[list[list[str]]]:
        """Per sentence, CTranslate2's hypotheses under its own limit (see the class' docstring)."""
        beams, results = options["beam_size"], [None] * len(tokens)
        # With beam search, the `beams` best of the ended hypotheses include one that ended at the search's last step
        # (fewer than `beams` had ended before it), so their longest length tells that step. Without a length penalty
        # CTranslate2 stops once the best `num_hypotheses` have ended: asking for more would change the search.
        if beams == 1 or options["length_penalty"] != 0:
            longest = {**options, "num_hypotheses": beams, "max_decoding_length": max(limits)}
            for i, output in enumerate(self.translator.translate_batch(tokens, **longest)):
                hypotheses, limit = output.hypotheses, limits[i]
                if beams == 1:
                    results[i] = [h[:limit] for h in hypotheses]
                elif limit == longest["max_decoding_length"] or max(map(len, hypotheses), default=0) < limit:
                    results[i] = hypotheses[:nbest]
        pending = [i for i, result in enumerate(results) if result is None]
        for limit in sorted({limits[i] for i in pending}):
            group = [i for i in pending if limits[i] == limit]
            outputs = self.translator.translate_batch(
                [tokens[i] for i in group], **{**options, "max_decoding_length": limit}
            )
            for i, output in zip(group, outputs):
                results[i] = output.hypotheses
        return results


def load_ctranslate2_backend(
    model_name: str,
    device: str | None = None,
    compute_type: str = "default",
    trust_remote_code: bool = False,
    vmap: str | None = None,
) -> CTranslate2Backend:
    """A CTranslate2 model folder (`model.bin`) with its tokenizer files, or a transformers model folder converted on
    first use into a cache folder keyed by its weights. Decoding defaults come from `generation_config.json`."""
    ctranslate2 = import_extra("ctranslate2", "export", "--backend ctranslate2")
    vmap_file(None, vmap, ctranslate2=True)  # refused where given
    folder = Path(resolve_model(model_name))
    check_translation_folder(str(folder), ctranslate2=True)
    if not folder.is_dir():
        raise InputError(f"--backend ctranslate2 needs a local model folder, got the Hub id {model_name!r}.")
    source = folder
    if not (folder / "model.bin").is_file():
        folder = _converted(source, trust_remote_code)
    tokenizer = load_tokenizer(str(source), trust_remote_code=trust_remote_code)
    if (source / "generation_config.json").is_file():
        generation_config = GenerationConfig.from_pretrained(source)
    else:
        generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    device, _, index = (device or ("cuda" if ctranslate2.get_cuda_device_count() else "cpu")).partition(":")
    # As many threads as torch uses (OMP_NUM_THREADS, torch.set_num_threads); CTranslate2 would take 4.
    translator = ctranslate2.Translator(
        str(folder),
        device=device,
        device_index=int(index or 0),
        compute_type=compute_type,
        intra_threads=torch.get_num_threads(),
    )
    if generation_config.bad_words_ids and all(len(ids) == 1 for ids in generation_config.bad_words_ids):
        # OPUS-MT models ban <pad>, which CTranslate2's Marian conversion leaves out: only other bans need mapping.
        vocabulary = set(_target_vocabulary(folder))
        banned = [
            ids for ids in generation_config.bad_words_ids if tokenizer.convert_ids_to_tokens(ids[0]) in vocabulary
        ]
        generation_config.bad_words_ids = banned or None
    config = None if source == folder else AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    limit = max_source_length(tokenizer, config)
    backend = CTranslate2Backend(translator, tokenizer, generation_config, limit, vmap_file(folder))
    backend.generation_config({}, 1)  # the folder's own settings, checked now
    return backend


def _target_vocabulary(folder: Path) -> list[str]:
    for name in ("target_vocabulary.json", "shared_vocabulary.json"):
        if (folder / name).is_file():
            return json.loads((folder / name).read_text(encoding="utf-8"))
    return []


def _converted(model_dir: Path, trust_remote_code: bool) -> Path:
    """Convert a transformers folder once: this package's models with `export_ctranslate2`, others (MarianMT, ...)
    with CTranslate2's converter. Later runs reuse the cache folder, named by the weights' names, sizes and times."""
    digest = hashlib.sha256(str(model_dir.resolve()).encode())
    for path in sorted(model_dir.glob("*.safetensors")) + sorted(model_dir.glob("*.bin")) + [model_dir / VMAP_NAME]:
        if not path.is_file():
            continue
        digest.update(f"{path.name}:{path.stat().st_size}:{path.stat().st_mtime_ns}".encode())
    target = cache_root() / "ctranslate2" / f"{model_dir.resolve().name}-{digest.hexdigest()[:16]}"
    if (target / "model.bin").is_file():
        return target
    logger.warning(f"Converting {model_dir} to CTranslate2 in {target} (once; later runs reuse it).")
    # Into a folder of this process's own, renamed when complete: concurrent processes never see half a model.
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    config = AutoConfig.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
    if config.model_type == VanillaTransformerConfig.model_type:
        from ..interop.ctranslate2 import export_ctranslate2

        export_ctranslate2(model_dir, partial)
    else:
        from ctranslate2.converters import TransformersConverter

        TransformersConverter(str(model_dir), trust_remote_code=trust_remote_code).convert(str(partial), force=True)
    try:
        os.rename(partial, target)
    except OSError:  # another process finished first
        shutil.rmtree(partial, ignore_errors=True)
    return target
