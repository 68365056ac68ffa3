# Copyright 2026 The hf_vanilla_transformer authors.
# SPDX-License-Identifier: Apache-2.0
"""`pipeline("translation")` for transformers 5, which removed the built-in one, for any `AutoModelForSeq2SeqLM`.

This file imports only torch and transformers: it ships as remote code next to the model code, and saved folders name
it in `config.custom_pipelines` (`CUSTOM_PIPELINES`).
"""

import re

import torch
from transformers import Pipeline
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER
from transformers.utils import logging

from .configuration_vanilla_transformer import MAX_LEN_A, MAX_LEN_B, max_new_tokens_for, target_positions


logger = logging.get_logger(__name__)

TASK_PATTERN = re.compile(r"translation_(\w+?)_to_(\w+)")
# `config.custom_pipelines` of a saved folder: `pipeline("translation", model=folder, trust_remote_code=True)` then
# loads this file from the folder. The module is named as remote code names it, by its file.
CUSTOM_PIPELINES = {
    "translation": {
        "impl": f"{__name__.rsplit('.', 1)[-1]}.TranslationPipeline",
        "pt": ["AutoModelForSeq2SeqLM"],
        "type": "text",
    }
}


class TranslationPipeline(Pipeline):
    """
    Translates text with a sequence-to-sequence model, like the `TranslationPipeline` of transformers 4.

    A string gives `[{"translation_text": ...}]`; a list gives one such dict per input (one list per input when
    `num_return_sequences > 1`). Generation arguments (`num_beams`, `max_new_tokens`, ...) go to `generate()`, on top
    of the model's generation config. Inputs longer than the model accepts are truncated with a warning, or raise a
    `ValueError` with `truncation=False`. Blank inputs translate to `""` without depending on the model.

    Unless the call sets `max_new_tokens` or `max_length` (or the model's generation config a fixed `max_new_tokens`),
    the length limit follows the source: `max_len_a` x source tokens + `max_len_b` new tokens (default: the paper's
    source length + 50), per batch, within the model's positions and its generation config's `max_length`.
    Translations that reach the limit without ending are counted in a warning: they may be cut short.

    The task may name the languages, `"translation_de_to_en"`; they are kept as `src_lang` / `tgt_lang`. The model
    decides the direction: a model trained for one language pair translates in that direction whatever the task says.

    Each input is translated as one sequence, as transformers' pipelines do: a paragraph given whole is far longer than
    the sentences a model learns from, and comes back garbled or cut. To translate text of several sentences, split
    it first, e.g. `hf_vanilla_transformer.translate.sentences.split_sentences(text, "de")`, and join the
    translations; `hf-vanilla-transformer translate` (or `translate_lines`) does that, in length-sorted batches.
    """

    _pipeline_calls_generate = True
    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.tokenizer is None:
            raise ValueError("The translation pipeline needs a tokenizer: pass `tokenizer=`.")
        check_tokenizer_fits_model(self.tokenizer, self.model.config)
        match = TASK_PATTERN.fullmatch(self.task or "")
        self.src_lang, self.tgt_lang = match.groups() if match else (None, None)
        self.max_input_length = max_source_length(self.tokenizer, self.model.config)

    def __call__(self, inputs: str | list[str], **kwargs) -> list[dict] | list[list[dict]]:
        """Translate `inputs`; `batch_size=`, `truncation=`, `return_tensors=` and generation
        arguments are accepted."""
        if isinstance(inputs, list) and not inputs:
            return []
        result = super().__call__(inputs, **kwargs)
        if isinstance(inputs, list) and all(len(records) == 1 for records in result):
            return [records[0] for records in result]
        return result

    def _sanitize_parameters(
        self,
        truncation=None,
        return_tensors=None,
        clean_up_tokenization_spaces=None,
        max_len_a=None,
        max_len_b=None,
        **generate_kwargs,
    ):
        # Arguments left at None keep their defaults, or the values given at construction.
        preprocess_params, postprocess_params = {}, {}
        forward_params = {"generate_kwargs": generate_kwargs}
        for name, value in (("max_len_a", max_len_a), ("max_len_b", max_len_b)):
            if value is not None:
                forward_params[name] = value
        if truncation is not None:
            preprocess_params["truncation"] = truncation
        if return_tensors is not None:
            postprocess_params["return_tensors"] = return_tensors
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess_params, forward_params, postprocess_params

    def preprocess(self, text: str, truncation: bool = True) -> dict[str, torch.Tensor]:
        if not isinstance(text, str):
            raise TypeError(f"The translation pipeline translates strings, got {type(text).__name__}: {text!r}.")
        if not text.strip():
            # Encoded as one token so that batches stay rectangular; postprocess returns "" for it.
            token = next((t for t in (self.tokenizer.eos_token_id, self.tokenizer.pad_token_id) if t is not None), 0)
            ids = torch.tensor([[token]])
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "is_blank": torch.tensor([True])}
        inputs = self.tokenizer(text, return_tensors="pt", return_token_type_ids=False)
        length, limit = inputs["input_ids"].shape[-1], self.max_input_length
        if limit is not None and length > limit:
            if not truncation:
                raise ValueError(
                    f"The input has {length} tokens but the model accepts at most {limit}: shorten it, or pass "
                    "`truncation=True` to cut it."
                )
            logger.warning(f"Truncating an input of {length} tokens to the model's maximum of {limit}.")
            inputs = self.tokenizer(
                text, return_tensors="pt", return_token_type_ids=False, truncation=True, max_length=limit
            )
        return {**inputs, "is_blank": torch.tensor([False])}

    def _forward(
        self,
        model_inputs: dict[str, torch.Tensor],
        generate_kwargs: dict | None = None,
        max_len_a: float = MAX_LEN_A,
        max_len_b: int = MAX_LEN_B,
    ) -> dict[str, torch.Tensor]:
        is_blank = model_inputs.pop("is_blank")
        generate_kwargs = generate_kwargs or {}
        given = {**self._generate_kwargs, **generate_kwargs}
        given.update(given["generation_config"].to_diff_dict() if given.get("generation_config") else {})
        set_params = self._get_set_generation_params(given)
        # Limits go to generate() as max_length, which counts the decoder start token and replaces the generation
        # config's own; max_new_tokens beside that would draw generate()'s warning that both are set.
        limit = {}
        if not {"max_new_tokens", "max_length"} & given.keys() and set_params.get("max_new_tokens") is None:
            source_length = model_inputs["input_ids"].shape[1]
            positions = target_positions(self.model.config, self.model.generation_config)
            limit["max_length"] = 1 + max_new_tokens_for(source_length, positions, max_len_a, max_len_b)
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs, **limit)
        if generate_kwargs.get("max_new_tokens") is not None and generate_kwargs.get("max_length") is None:
            generate_kwargs = {**generate_kwargs, "max_length": 1 + generate_kwargs["max_new_tokens"]}
            del generate_kwargs["max_new_tokens"]
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)
        batch_size = model_inputs["input_ids"].shape[0]
        self._warn_about_unfinished(output_ids, is_blank, generate_kwargs, set_params)
        # (b * num_return_sequences, t) -> (b, num_return_sequences, t): the pipeline unbatches along the first axis.
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1]), "is_blank": is_blank}

    def _warn_about_unfinished(self, output_ids, is_blank, generate_kwargs, set_params):
        """Count the translations that stopped at the length limit rather than with an end-of-sequence token."""
        eos = generate_kwargs.get("eos_token_id", set_params.get("eos_token_id"))
        if eos is None:
            return
        ended = torch.isin(output_ids[:, 1:], torch.tensor(eos, device=output_ids.device).flatten()).any(-1)
        unfinished = (~ended & ~is_blank.to(ended.device).repeat_interleave(len(ended) // len(is_blank))).sum()
        if unfinished:
            params = {**set_params, **generate_kwargs}
            name = "max_new_tokens" if params.get("max_new_tokens") is not None else "max_length"
            logger.warning(
                f"{int(unfinished)} of {len(ended)} translations reached the length limit ({name}={params.get(name)}) "
                "without ending and may be cut short: pass a larger `max_new_tokens`, or `max_len_a` / `max_len_b`."
            )

    def postprocess(self, model_outputs, return_tensors: bool = False, clean_up_tokenization_spaces: bool = False):
        is_blank = bool(model_outputs["is_blank"][0])
        records = []
        for ids in model_outputs["output_ids"][0]:
            if return_tensors:
                records.append({"translation_token_ids": ids[:0] if is_blank else ids})
            else:
                text = self.tokenizer.decode(
                    ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
                records.append({"translation_text": "" if is_blank else text})
        return records


def max_source_length(tokenizer, config) -> int | None:
    """The longest source, in tokens, that the tokenizer and the model both accept (None: no limit)."""
    limits = (tokenizer.model_max_length, getattr(config, "max_position_embeddings", None))
    return min((n for n in limits if n and n < VERY_LARGE_INTEGER), default=None)


def check_tokenizer_fits_model(tokenizer, config):
    """A tokenizer from another model would translate into nonsense, or fail deep inside the embedding lookup."""
    vocab_size = getattr(config, "vocab_size", None)
    if vocab_size is not None and len(tokenizer) > vocab_size:
        raise ValueError(
            f"The tokenizer has {len(tokenizer)} tokens but the model's vocabulary has {vocab_size}: they do not "
            "belong together. Load the tokenizer saved with the model."
        )
    for name in ("pad_token_id", "eos_token_id"):
        ours, theirs = getattr(tokenizer, name, None), getattr(config, name, None)
        if isinstance(ours, int) and isinstance(theirs, int) and ours != theirs:
            raise ValueError(f"tokenizer.{name} is {ours} but the model's config.{name} is {theirs}: they must agree.")


__all__ = ["CUSTOM_PIPELINES", "TranslationPipeline", "check_tokenizer_fits_model", "max_source_length"]
