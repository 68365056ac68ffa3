"""A tiny shared BPE tokenizer, trained in a fraction of a second, built like the project's (hf-integration.md §7)."""

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast


SENTENCES = [
    "Wer hat dir das gegeben?", "Who gave this to you?",
    "Ich habe Hunger.", "I am hungry.",
    "Tom ist nicht hier.", "Tom is not here.",
    "Das Wetter ist heute schön.", "The weather is nice today.",
    "Wo ist der Bahnhof?", "Where is the train station?",
    "Kannst du mir helfen?", "Can you help me?",
]  # fmt: skip


def tiny_tokenizer(vocab_size: int = 120, model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """Special tokens <pad>=0, <s>=1, </s>=2, <unk>=3 (the model's defaults); every encoding ends with </s>."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    tok.train_from_iterator(SENTENCES, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
        model_max_length=model_max_length,
    )  # fmt: skip
