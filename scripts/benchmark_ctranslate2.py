"""CTranslate2 side of `scripts/benchmark.py`: convert a MarianMTModel with CTranslate2's own converter, and time
fixed-length greedy / beam-search generation in a process without torch.

Only the standard library is imported at module level, so importing this module loads neither torch nor ctranslate2.
CTranslate2 brings its own OpenMP runtime: sharing a process with torch slowed both down by up to 2x, so the timing
runs in a fresh process of its own:

    echo '{"model_dir": ..., "sources": [[5, 9, 2], ...], ...}' | python scripts/benchmark_ctranslate2.py

reads the keyword arguments of `time_generation` as JSON on stdin and prints its result as JSON.
"""

import json
import sys
import time


PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]


def vocabulary(vocab_size: int) -> list[str]:
    """Token strings standing in for ids: <pad> <s> </s> <unk> t4 t5 ... (CTranslate2 decodes strings)."""
    return SPECIAL_TOKENS + [f"t{i}" for i in range(len(SPECIAL_TOKENS), vocab_size)]


def _tokens(ids: list[int]) -> list[str]:
    return [SPECIAL_TOKENS[i] if i < len(SPECIAL_TOKENS) else f"t{i}" for i in ids]


def _token_ids(tokens: list[str]) -> list[int]:
    return [int(t[1:]) if t[0] == "t" else SPECIAL_TOKENS.index(t) for t in tokens]


def convert_marian(model_dir: str, output_dir: str) -> str:
    """Convert a MarianMTModel folder (`save_pretrained`, pad 0, decoder start <s> = 1) to CTranslate2 in float32.

    Imports torch and ctranslate2 together: call it in a process that times nothing.

    The stock MarianMTLoader assumes the OPUS-MT layout (<pad> is the *last* id and the decoder starts from <pad>'s
    zero embedding): it drops the last embedding row and sets start_from_zero_embedding. Our models have pad 0 and
    start the decoder from <s>, so this uses the generic BART loader (which keeps every row and starts from
    decoder_start_token_id's embedding) with Marian's post-norm / no-embedding-LayerNorm settings. It needs no
    tokenizer files: the vocabulary is the synthetic one above.
    """
    from ctranslate2.converters import Converter
    from ctranslate2.converters.transformers import BartLoader

    class Vocab:  # the few things BartLoader asks the tokenizer for
        bos_token, eos_token, unk_token = SPECIAL_TOKENS[BOS], SPECIAL_TOKENS[EOS], SPECIAL_TOKENS[UNK]

        def __init__(self, size):
            self.tokens = vocabulary(size)

        def get_vocab(self):
            return {t: i for i, t in enumerate(self.tokens)}

        def convert_ids_to_tokens(self, i):
            return self.tokens[i]

    class MarianLoader(BartLoader):
        def get_model_spec(self, model):
            model.config.normalize_before = False  # post-norm
            model.config.normalize_embedding = False  # no LayerNorm after the embeddings
            return super().get_model_spec(model)

    class MarianConverter(Converter):
        def _load(self):
            import torch
            from transformers import MarianMTModel

            with torch.no_grad():
                model = MarianMTModel.from_pretrained(model_dir, dtype=torch.float32)
                assert (model.config.pad_token_id, model.config.decoder_start_token_id) == (PAD, BOS)
                return MarianLoader()(model, Vocab(model.config.vocab_size))

    return MarianConverter().convert(output_dir, force=True)


def generate(
    translator, sources: list[list[int]], batch_size: int, num_beams: int, new_tokens: int
) -> list[list[int]]:
    """Exactly `new_tokens` ids per sentence, batches taken in order (as the transformers side does)."""
    out = []
    for i in range(0, len(sources), batch_size):
        # min_decoding_length masks EOS until new_tokens tokens exist, max_decoding_length stops there.
        results = translator.translate_batch(
            [_tokens(s) for s in sources[i : i + batch_size]],
            beam_size=num_beams,
            min_decoding_length=new_tokens,
            max_decoding_length=new_tokens,
        )
        out += [_token_ids(r.hypotheses[0]) for r in results]
    return out


def time_generation(
    model_dir: str,
    sources: list[list[int]],
    batch_size: int,
    beams: list[int],
    new_tokens: int,
    threads: int,
    compute_type: str,
    device: str = "cpu",
    timings: int = 1,
) -> dict:
    """Seconds to decode all of `sources` per beam size, the fastest of `timings` passes after a one-batch warm-up,
    and the ids decoded."""
    import ctranslate2

    translator = ctranslate2.Translator(
        model_dir, device=device, compute_type=compute_type, intra_threads=threads, inter_threads=1
    )
    runs = []
    for num_beams in beams:
        generate(translator, sources[:batch_size], batch_size, num_beams, new_tokens)  # warm-up
        seconds = []
        for _ in range(timings):
            start = time.perf_counter()
            outputs = generate(translator, sources, batch_size, num_beams, new_tokens)
            seconds.append(time.perf_counter() - start)
        runs.append({"num_beams": num_beams, "seconds": min(seconds), "outputs": outputs})
        if any(len(o) != new_tokens for o in outputs):
            raise RuntimeError(f"CTranslate2 did not generate exactly {new_tokens} tokens per sentence")
    return {"runs": runs, "compute_type": translator.compute_type, "torch_in_process": "torch" in sys.modules}


if __name__ == "__main__":
    print(json.dumps(time_generation(**json.load(sys.stdin))))
