"""A tiny German->English model trained for a few dozen steps on the bundled corpus, for the demo and browser tests.

It does not translate well, but it has learnt enough to produce short, varied English rather than the repetitions of
an untrained model, which is what the pages need to show. Built once per test session (about 10 s on 2 CPU cores).
"""

import contextlib
import functools
import json
import tempfile
from pathlib import Path

import torch

from hf_vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.data import BUNDLED_CORPUS
from hf_vanilla_transformer.tokenization import train_shared_bpe_tokenizer


SENTENCES = ["Wo ist der Bahnhof?", "Ich habe heute keine Zeit.", "Das Wetter ist schön.", "Tom ist müde."]
_FOLDER = tempfile.TemporaryDirectory(prefix="tiny-translator-")  # removed when the test process exits


@contextlib.contextmanager
def one_thread():
    """Run torch on one thread: tiny models gain nothing from more, and on a busy machine extra threads spin idle."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def short_pairs(limit: int = 2000, max_words: int = 6) -> list[tuple[str, str]]:
    pairs = []
    with open(BUNDLED_CORPUS / "train.jsonl", encoding="utf-8") as f:
        for line in f:
            pair = json.loads(line)["translation"]
            if len(pair["de"].split()) <= max_words:
                pairs.append((pair["de"], pair["en"]))
            if len(pairs) == limit:
                break
    return pairs


@functools.cache
def tiny_translator_dir(steps: int = 60) -> Path:
    """A saved model folder (weights, config, tokenizer) trained with Adam for `steps` batches of 32 short pairs."""
    with one_thread():
        return _train(steps)


def _train(steps: int) -> Path:
    torch.manual_seed(0)
    pairs = short_pairs()
    tokenizer = train_shared_bpe_tokenizer((text for pair in pairs for text in pair), vocab_size=400)
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer),
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_position_embeddings=128,
        dropout=0.0,
    )
    model = VanillaTransformerForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    model.train()
    for step in range(steps):
        batch = [pairs[(step * 32 + i) % len(pairs)] for i in range(32)]
        inputs = tokenizer([de for de, _ in batch], padding=True, return_tensors="pt", return_token_type_ids=False)
        labels = tokenizer(text_target=[en for _, en in batch], padding=True, return_tensors="pt")["input_ids"]
        labels[labels == tokenizer.pad_token_id] = -100
        loss = model(**inputs, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    model.generation_config.max_new_tokens = 24  # keeps an undertrained model from rambling for 127 tokens
    folder = Path(_FOLDER.name) / f"steps-{steps}"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
