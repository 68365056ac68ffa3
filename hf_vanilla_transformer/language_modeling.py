"""GPT-style language modelling with the decoder stack alone: tokenizer, data, model and sampling.

A decoder-only model is a [`VanillaTransformerForCausalLM`] built from a config with `is_encoder_decoder=False`; this
module supplies what trains it with `Trainer` and what samples from it.
"""

from collections.abc import Iterable

import torch
from datasets import Dataset, DatasetDict
from tokenizers import decoders, processors
from transformers import GenerationConfig, PreTrainedTokenizerFast

from .configuration_vanilla_transformer import VanillaTransformerConfig
from .tokenization import BOS, train_shared_bpe_tokenizer


def train_language_model_tokenizer(
    texts: Iterable[str], vocab_size: int = 4000, model_max_length: int = 128
) -> PreTrainedTokenizerFast:
    """The BPE of [`train_shared_bpe_tokenizer`], set up for a language model.

    - Encodings start with `<s>` and do not end with `</s>`: a prompt is continued, not closed. [`tokenize_texts`]
      appends `</s>` to training texts, so that the model learns where a sentence ends and `generate()` stops there.
    - Decoding keeps the space before a first word: `pipeline("text-generation")` decodes the new tokens on their own
      and appends them to the prompt.
    - Padding goes on the left, where batched generation needs it.
    """
    shared = train_shared_bpe_tokenizer(texts, vocab_size, model_max_length)
    backend = shared.backend_tokenizer
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, shared.bos_token_id)]
    )
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        model_max_length=model_max_length,
        padding_side="left",
        **shared.special_tokens_map,
    )


def monolingual(corpus: DatasetDict, language: str) -> DatasetDict:
    """The `language` side of a parallel corpus (a `translation` column, as from `load_parallel_corpus`) as `text`
    rows, split by split."""
    return DatasetDict(
        {
            split: dataset.map(
                lambda batch: {"text": [pair[language] for pair in batch["translation"]]},
                batched=True,
                remove_columns=dataset.column_names,
            )
            for split, dataset in corpus.items()
        }
    )


def tokenize_texts(dataset: Dataset, tokenizer, max_length: int = 128, text_column: str = "text") -> Dataset:
    """`input_ids` = `<s>` text `</s>` (no `</s>` after a text cut at `max_length`: it did not end there) and `labels`,
    the same ids with `<s>` as -100: it is the given start, never a prediction (with left padding it would otherwise
    be "predicted" from the padding before it). Pad batches with `DataCollatorForSeq2Seq`, which pads labels with
    -100 on the tokenizer's side."""
    if text_column not in dataset.column_names:
        raise ValueError(f"The dataset has no column {text_column!r}; its columns are {dataset.column_names}.")

    def tokenize(batch):
        rows = tokenizer(batch[text_column], truncation=True, max_length=max_length)["input_ids"]
        rows = [row + [tokenizer.eos_token_id] if len(row) < max_length else row for row in rows]
        labels = [[-100 if token == tokenizer.bos_token_id else token for token in row] for row in rows]
        return {"input_ids": rows, "attention_mask": [[1] * len(row) for row in rows], "labels": labels}

    return dataset.map(tokenize, batched=True, remove_columns=dataset.column_names, desc="tokenizing")


def single_stack_config(
    tokenizer,
    d_model: int = 256,
    layers: int = 4,
    heads: int = 4,
    ffn_dim: int = 1024,
    max_position_embeddings: int = 128,
    **kwargs,
) -> VanillaTransformerConfig:
    """A config that fits `tokenizer` for a model of one stack: pass `is_encoder_decoder=False` for
    [`VanillaTransformerForCausalLM`]; [`VanillaTransformerForSequenceClassification`] takes either. `kwargs` go to the
    config. Both stacks' fields get the same sizes: the unused stack's would otherwise still be validated (its heads
    must divide `d_model`) and read by generic code (`num_hidden_layers` names the encoder's)."""
    return VanillaTransformerConfig(
        vocab_size=len(tokenizer),
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn_dim,
        decoder_ffn_dim=ffn_dim,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
        **kwargs,
    )


def sampling_generation_config(
    config: VanillaTransformerConfig, temperature: float = 0.8, top_k: int = 50, top_p: float = 0.95, **kwargs
) -> GenerationConfig:
    """Sampling defaults for a trained language model: varied text, where greedy decoding gives every prompt its one
    most likely continuation."""
    return GenerationConfig(
        do_sample=True,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        **kwargs,
    )


@torch.no_grad()
def complete(model, tokenizer, prompts: list[str], **generate_kwargs) -> list[str]:
    """Each prompt continued by `model.generate(**generate_kwargs)`, as text (prompt included)."""
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left").to(model.device)
    generated = model.generate(**batch, **generate_kwargs)
    return [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]


__all__ = [
    "complete",
    "monolingual",
    "sampling_generation_config",
    "single_stack_config",
    "tokenize_texts",
    "train_language_model_tokenizer",
]
