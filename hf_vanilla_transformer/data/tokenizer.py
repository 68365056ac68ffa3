"""A BPE vocabulary shared by source and target language (section 5.1), as a transformers fast tokenizer.

It is saved as a plain `tokenizer.json`, so `AutoTokenizer.from_pretrained` loads it anywhere without remote code.
"""

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast


PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"  # ids 0, 1, 2, 3, the config's defaults


def train_shared_bpe_tokenizer(
    texts: Iterable[str], vocab_size: int = 8000, model_max_length: int = 256, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Learn byte-pair merges on `texts` (both languages mixed) and wrap the result for transformers.

    Every encoded sequence ends with `</s>`; decoding starts from `<s>` (the model's `decoder_start_token_id`).
    """
    if vocab_size < 100:
        raise ValueError(f"`vocab_size` must be at least 100 for a usable BPE vocabulary, got {vocab_size}.")
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.NFKC()
    # Punctuation gets its own pieces, so "gegeben?" does not spend merges on "ben?"; apostrophes and hyphens stay
    # inside words ("don't", "Tom's" are frequent whole pieces).
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
            pre_tokenizers.Split(Regex(r"[^\w\s'’▁-]"), behavior="isolated"),
        ]
    )
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[PAD, BOS, EOS, UNK], show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    eos_id = tokenizer.token_to_id(EOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}", special_tokens=[(EOS, eos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        model_max_length=model_max_length,
    )
