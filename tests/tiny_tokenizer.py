"""A tiny shared BPE tokenizer for tests, trained in a fraction of a second with the project's own recipe."""

from transformers import PreTrainedTokenizerFast

from hf_vanilla_transformer.tokenization import train_shared_bpe_tokenizer


SENTENCES = [
    "Wer hat dir das gegeben?",
    "Who gave this to you?",
    "Ich habe Hunger.",
    "I am hungry.",
    "Tom ist nicht hier.",
    "Tom is not here.",
    "Das Wetter ist heute schön.",
    "The weather is nice today.",
    "Wo ist der Bahnhof?",
    "Where is the train station?",
    "Kannst du mir helfen?",
    "Can you help me?",
]


def tiny_tokenizer(vocab_size: int = 120, model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """Special tokens <pad>=0, <s>=1, </s>=2, <unk>=3 (the model's defaults); every encoding ends with </s>."""
    return train_shared_bpe_tokenizer(SENTENCES, vocab_size, model_max_length, min_frequency=1)
