"""The translate command: order and batching, scores and n-best formats, length limits, long lines, bounded memory,
resume after a kill, input and model errors, int8, MarianMT and CTranslate2, two processes, the entry point."""

import copy
import dataclasses
import importlib.util
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    AutoTokenizer,
    GenerationConfig,
    MarianConfig,
    MarianMTModel,
    PreTrainedTokenizerFast,
    pipeline,
)

from hf_vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration, cli
from hf_vanilla_transformer.data.folders import resolve_model
from hf_vanilla_transformer.translate.backends import Backend, Hypothesis
from hf_vanilla_transformer.translate.io import (
    InputError,
    LineTranslation,
    TextHypothesis,
    format_translation,
    make_batches,
)
from hf_vanilla_transformer.translate.options import DecodeOptions
from hf_vanilla_transformer.translate.translator import Translator, load_translator, translate_file, translate_lines
from tests.helpers import ROOT, SENTENCES, free_port, tiny_tokenizer


GERMAN, ENGLISH = SENTENCES[0::2], SENTENCES[1::2]
# The translator's warnings are asserted at its logger's level: a level that an earlier test in this process left
# raised or cached would otherwise hide them from caplog.
TRANSLATOR_LOG = "hf_vanilla_transformer.translate.translator"
# Training sentences, new combinations of their words, and blank lines.
LINES = [*GERMAN, "", "Tom hat Hunger.", "Wo ist Tom?", "   ", "Das ist schön.", "Wer ist hier?", "Ich", "Hunger"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny model trained to translate the six German sentences (80 Adam steps, ~1 s), decoding with the paper's
    beam 4 and length penalty 0.6: its outputs end with EOS and differ between inputs."""
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        dropout=0.0,
    )
    model = VanillaTransformerForConditionalGeneration(config)
    batch = tokenizer(GERMAN, text_target=ENGLISH, padding=True, return_tensors="pt")
    labels = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(80):
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.generation_config = config.paper_generation_config(max_length=24)
    path = tmp_path_factory.mktemp("trained")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def translator(model_dir):
    return load_translator(str(model_dir), device="cpu")


@pytest.fixture(scope="module")
def model_and_tokenizer(model_dir):
    return VanillaTransformerForConditionalGeneration.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(
        model_dir
    )


def texts(translations) -> list[str]:
    return [t.hypotheses[0].text if t.hypotheses else "" for t in translations]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def test_the_model_learned_its_sentences(translator):
    assert texts(translate_lines(GERMAN, translator)) == ENGLISH


def test_output_equals_the_pipeline_in_input_order_whatever_the_batching(translator, model_dir):
    translate = pipeline("translation", model=str(model_dir), device="cpu")
    expected = [r["translation_text"] for r in translate(LINES, batch_size=32)]
    assert expected[len(GERMAN)] == "" and len(set(expected)) > 6
    for batching, buffer_size in [(dict(max_tokens=20), 5), (dict(batch_size=1), None), (dict(max_tokens=10_000), 3)]:
        window = {"buffer_size": buffer_size} if buffer_size else {}
        translated = translate_lines(LINES, translator, DecodeOptions(**batching), **window)
        assert texts(translated) == expected, batching


def test_batches_are_longest_first_within_the_token_budget_and_the_size():
    lengths = [3, 9, 1, 9, 4, 4, 2, 12]
    batches = make_batches(lengths, max_tokens=20, batch_size=None)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert [[lengths[i] for i in b] for b in batches] == [[12], [9, 9], [4, 4, 3, 2, 1]]
    assert all(len(b) * lengths[b[0]] <= 20 for b in batches)
    assert [len(b) for b in make_batches(lengths, max_tokens=None, batch_size=3)] == [3, 3, 2]
    assert make_batches([50], max_tokens=10, batch_size=None) == [[0]]  # too long for the budget: alone


def test_scores_are_those_beam_search_and_greedy_search_used(translator, model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    for num_beams, nbest in [(4, 3), (1, 1)]:
        options = DecodeOptions(nbest=nbest, num_beams=num_beams)
        for line, translation in zip(LINES[:8], translate_lines(LINES[:8], translator, options)):
            if not line.strip():
                assert translation.hypotheses == [] and translation.parts == 0
                continue
            inputs = tokenizer(line, return_tensors="pt")
            out = model.generate(
                **inputs,
                num_beams=num_beams,
                num_return_sequences=nbest,
                output_scores=True,
                return_dict_in_generate=True,
            )
            steps = model.compute_transition_scores(out.sequences, out.scores, out.get("beam_indices"), num_beams == 1)
            assert [h.text for h in translation.hypotheses] == tokenizer.batch_decode(
                out.sequences, skip_special_tokens=True
            )
            for row, h in enumerate(translation.hypotheses):
                n = len(h.token_scores)
                assert h.tokens == tokenizer.convert_ids_to_tokens(out.sequences[row, 1 : n + 1])
                torch.testing.assert_close(torch.tensor(h.token_scores), steps[row, :n], atol=1e-4, rtol=0)
                if num_beams > 1:
                    assert h.score == pytest.approx(out.sequences_scores[row].item(), abs=1e-4)


def test_jsonl_and_fairseq_formats_carry_the_n_best_with_scores(translator, tmp_path):
    source, options = write_lines(tmp_path / "in.de", LINES[:8]), DecodeOptions(nbest=2)
    for output_format, name in [("jsonl", "out.jsonl"), ("fairseq", "out.txt")]:
        translate_file(
            [str(source)], str(tmp_path / name), translator, options, output_format=output_format, quiet=True
        )
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == list(range(8)) and [r["source"] for r in records] == LINES[:8]
    assert records[6]["hypotheses"] == []  # the blank line
    expected = []
    for r in records:
        expected.append(f"S-{r['id']}\t{r['source']}")
        for h in r["hypotheses"]:
            assert set(h) == {"text", "score", "tokens", "token_scores", "reached_length_limit"}
            assert len(h["tokens"]) == len(h["token_scores"]) and h["tokens"][-1] == "</s>"
            assert h["score"] == pytest.approx(sum(h["token_scores"]) / len(h["tokens"]) ** 0.6, abs=1e-3)
            expected += [f"H-{r['id']}\t", f"D-{r['id']}\t", f"P-{r['id']}\t"]
        if r["hypotheses"]:
            assert len(r["hypotheses"]) == 2 and r["hypotheses"][0]["score"] >= r["hypotheses"][1]["score"]
    fairseq = (tmp_path / "out.txt").read_text().splitlines()
    assert [line if line.startswith("S-") else line[: line.index("\t") + 1] for line in fairseq] == expected
    h_line, d_line, p_line = (line.split("\t") for line in fairseq[1:4])
    best = records[0]["hypotheses"][0]
    assert float(h_line[1]) == float(d_line[1]) == pytest.approx(best["score"] / math.log(2), abs=1e-3)
    assert h_line[2] == " ".join(best["tokens"]) and d_line[2] == best["text"]
    assert [float(x) for x in p_line[1].split()] == pytest.approx(
        [s / math.log(2) for s in best["token_scores"]], abs=1e-3
    )


def test_each_sentence_gets_its_own_length_limit_and_hitting_it_is_reported(
    model_dir, model_and_tokenizer, tmp_path, caplog, capsys
):
    model, tokenizer = model_and_tokenizer
    translator = load_translator(str(model_dir), device="cpu")
    options = DecodeOptions(max_len_a=0.8, max_len_b=1, max_tokens=1000)
    lines = [line for line in LINES if line.strip()]
    translations = list(translate_lines(lines, translator, options))
    limited = 0
    for line, translation in zip(lines, translations):
        source_length = len(tokenizer(line)["input_ids"])  # EOS included, as fairseq counts
        limit = int(0.8 * source_length + 1)
        alone = model.generate(**tokenizer(line, return_tensors="pt"), max_new_tokens=limit)[0, 1:]
        (h,) = translation.hypotheses
        assert h.tokens == tokenizer.convert_ids_to_tokens(alone[alone != tokenizer.pad_token_id])
        assert len(h.tokens) <= limit
        assert h.reached_length_limit == (h.tokens[-1] != "</s>")
        limited += h.reached_length_limit
    assert 0 < limited < len(lines)
    source = write_lines(tmp_path / "in.de", lines)
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger=TRANSLATOR_LOG):
        stats = translate_file([str(source)], str(tmp_path / "out.en"), translator, options, quiet=True)
    assert stats.reached_length_limit == limited and stats.lines == len(lines)
    assert f"{limited} hypothesis(es) stopped at the length limit" in caplog.text
    assert capsys.readouterr().err == ""  # quiet: no progress bar
    none = translator.decoding(DecodeOptions(max_len_a=0.0, max_len_b=0))
    with pytest.raises(ValueError, match="at least 1"):
        translator.limit(5, none)
    with pytest.raises(ValueError, match="at least 1"):
        translator.translate(["Hallo."], DecodeOptions(max_len_a=0.0, max_len_b=0))
    given = translator.decoding(options)
    assert (given.max_len_a, given.max_len_b) == (0.8, 1)
    model_limit = translator.decoding()  # the model's generation config caps at max_length=24
    assert (model_limit.max_len_a, model_limit.max_len_b) == (1.0, 50)
    assert translator.limit(4, model_limit) == 23
    assert translator.decoding(DecodeOptions(max_len_b=5)).max_len_a == 0.0


def test_a_model_without_a_length_limit_gets_the_source_length_plus_50_as_the_pipeline(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    unlimited = copy.deepcopy(model)
    unlimited.generation_config.max_length = None
    translator = load_translator(unlimited, tokenizer=tokenizer, device="cpu")
    default = translator.decoding()
    assert (default.max_len_a, default.max_len_b) == (1.0, 50)
    assert translator.limit(4, default) == 54
    assert translator.limit(80, default) == unlimited.config.max_position_embeddings - 1


def test_lines_are_translated_sentence_by_sentence_and_joined_with_their_spacing(model_dir, translator, tmp_path):
    sentences = [GERMAN[0], GERMAN[3], GERMAN[4]]
    line = f"{sentences[0]}  {sentences[1]}\t{sentences[2]}"
    alone = texts(translate_lines(sentences, translator))
    (translation,) = translate_lines([line], translator)
    assert translation.parts == 3 and translation.hypotheses[0].text == f"{alone[0]}  {alone[1]}\t{alone[2]}"
    (as_one,) = translate_lines(
        [line], translator, DecodeOptions(split_sentences=False)
    )  # as the pipeline translates it: one sequence
    expected = pipeline("translation", model=str(model_dir), device="cpu")(line)[0]["translation_text"]
    assert as_one.parts == 1 and as_one.hypotheses[0].text == expected == alone[0]  # the rest is lost
    source = write_lines(tmp_path / "in.de", [line, GERMAN[0]])
    translate_file([str(source)], str(tmp_path / "out.jsonl"), translator, output_format="jsonl", quiet=True)
    records = [json.loads(r) for r in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert records[0]["parts"] == 3 and "parts" not in records[1]


def test_sentences_longer_than_the_limit_are_split_at_clauses_and_counted(model_and_tokenizer, model_dir, tmp_path):
    model, _ = model_and_tokenizer
    short = AutoTokenizer.from_pretrained(model_dir, model_max_length=14)
    translator = load_translator(model, tokenizer=short, device="cpu")
    reference = load_translator(str(model_dir), device="cpu")
    clauses = [GERMAN[1][:-1], GERMAN[3][:-1], GERMAN[5]]  # 10, 10 and 11 tokens: no two fit together in 14
    line = ", ".join(clauses)
    assert translator.max_source_tokens == 14 and 14 >= max(len(short(c)["input_ids"]) for c in clauses)
    (translation,) = translate_lines([line], translator)
    assert translation.parts == 3
    pieces = [clauses[0] + ",", clauses[1] + ",", clauses[2]]
    assert translation.hypotheses[0].text == " ".join(texts(translate_lines(pieces, reference)))
    source = write_lines(tmp_path / "in.de", [line, GERMAN[0], line])
    stats = translate_file([str(source)], str(tmp_path / "out.en"), translator, quiet=True)
    assert stats.split_sentences == 2


class EchoBackend(Backend):
    """Returns each source reversed, instantly: the streaming machinery without a model."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer, GenerationConfig(eos_token_id=tokenizer.eos_token_id, max_new_tokens=64), None)
        self.max_position_embeddings = None

    def generate(self, sources, limit, decoding, scores=True, seed=0):
        return [[Hypothesis(s[-2::-1] + s[-1:], [-0.5] * len(s), False)] for s in sources]


def test_memory_stays_bounded_by_the_window_whatever_the_file_size(tmp_path):
    translator = Translator(EchoBackend(tiny_tokenizer()))
    peaks = {}
    for lines in (2_000, 8_000):
        source = write_lines(tmp_path / f"{lines}.de", [LINES[i % len(LINES)] + f" {i}" for i in range(lines)])
        tracemalloc.start()
        translate_file([str(source)], str(tmp_path / "out.en"), translator, quiet=True, buffer_size=200)
        peaks[lines] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len((tmp_path / "out.en").read_text().splitlines()) == lines
    # Holding the lines or their results would make the peak grow with the file (4x here).
    assert peaks[8_000] < 1.3 * peaks[2_000], peaks


def run_module(*args, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(
        [sys.executable, "-m", "hf_vanilla_transformer", "translate", *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )


@pytest.mark.slow
def test_a_killed_run_resumes_without_losing_or_repeating_a_line(translator, model_dir, tmp_path):
    lines = [LINES[i % len(LINES)] for i in range(200)]
    source = write_lines(tmp_path / "in.de", lines)
    output, progress = tmp_path / "out.jsonl", tmp_path / "out.jsonl.progress"
    args = ["--model", model_dir, source, "--output", output, "--format", "jsonl", "--buffer_size", "10", "--quiet"]
    process = run_module(*args)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if progress.exists() and json.loads(progress.read_text())["lines"] >= 20:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    state = json.loads(progress.read_text())
    assert 20 <= state["lines"] < len(lines), "the run must be killed mid-way"
    with open(output, "ab") as f:
        f.write(b'{"id": 9999, "half a window')  # as if killed while writing the next window
    with pytest.raises(ValueError, match="--resume"):
        translate_file([str(source)], str(output), translator, output_format="jsonl", quiet=True, buffer_size=10)
    stats = translate_file(
        [str(source)], str(output), translator, output_format="jsonl", resume=True, quiet=True, buffer_size=10
    )
    assert stats.lines == len(lines) and not progress.exists()
    whole = tmp_path / "whole.jsonl"
    translate_file([str(source)], str(whole), translator, output_format="jsonl", quiet=True, buffer_size=10)
    assert output.read_bytes() == whole.read_bytes()


def test_resume_refuses_what_would_mix_outputs(model_dir, translator, tmp_path):
    source = write_lines(tmp_path / "in.de", LINES)
    output = tmp_path / "out.jsonl"
    (tmp_path / "out.jsonl.progress").write_text(
        json.dumps({"lines": 2, "bytes": 0, "settings": {**translator.settings(), "nbest": 2}})
    )
    output.write_text("")
    with pytest.raises(ValueError, match="nbest differ"):
        translate_file([str(source)], str(output), translator, resume=True, quiet=True)
    (tmp_path / "out.jsonl.progress").unlink()
    output.write_text("done\n")
    with pytest.raises(ValueError, match="Nothing to resume"):
        translate_file([str(source)], str(output), translator, resume=True, quiet=True)
    with pytest.raises(ValueError, match="needs --output"):
        translate_file([str(source)], None, translator, resume=True, quiet=True)
    with pytest.raises(ValueError, match="is also an input"):
        translate_file([str(source)], str(source), translator, quiet=True)
    with pytest.raises(ValueError, match="--format jsonl or fairseq"):
        translate_file([str(source)], None, translator, DecodeOptions(nbest=2), quiet=True)


def test_invalid_utf8_names_file_and_line_and_keeps_what_was_translated(translator, tmp_path):
    first = write_lines(tmp_path / "a.de", GERMAN[:2])
    second = tmp_path / "b.de"
    second.write_bytes(b"Ich habe Hunger.\nTom ist nicht hier.\nWo ist der Bahn\xfchof?\nKannst du mir helfen?\n")
    output = tmp_path / "out.en"
    with pytest.raises(InputError, match=r"b\.de:3: invalid UTF-8 \(byte 0xfc at byte 16 of the line\).*4 lines"):
        translate_file([str(first), str(second)], str(output), translator, quiet=True, buffer_size=3)
    assert output.read_text().splitlines() == [ENGLISH[0], ENGLISH[1], ENGLISH[1], ENGLISH[2]]
    second.write_bytes(second.read_bytes().replace(b"\xfc", b""))
    translate_file([str(first), str(second)], str(output), translator, quiet=True, buffer_size=3, resume=True)
    assert output.read_text().splitlines()[4:] == [ENGLISH[4], ENGLISH[5]]


def test_unreadable_inputs_and_missing_models_fail_at_once_naming_them(tmp_path, translator, monkeypatch):
    with pytest.raises(InputError, match=f"{tmp_path / 'none.de'}: no such input file"):
        translate_file([str(tmp_path / "none.de")], None, translator, quiet=True)
    with pytest.raises(InputError, match=f"{tmp_path}: not a file"):
        translate_file([str(tmp_path)], None, translator, quiet=True)
    (tmp_path / "models").mkdir()
    (tmp_path / "weights.bin").write_bytes(b"")
    start = time.monotonic()
    os.chdir(tmp_path)
    try:
        for missing in ["./demo-de-en", str(tmp_path / "demo-de-en"), "models/demo-de-en", "a/b/c", "~/no-such-model"]:
            with pytest.raises(InputError, match=f"--model {missing}: no such model folder"):
                load_translator(missing)
        with pytest.raises(InputError, match="--model models: the folder holds no model"):
            load_translator("models")
        with pytest.raises(InputError, match="weights.bin is a file"):
            load_translator("weights.bin")
    finally:
        os.chdir(ROOT)
    assert time.monotonic() - start < 5  # no Hub requests, no retries
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda repo_id, filename: "config.json")
    assert resolve_model("Helsinki-NLP/opus-mt-de-en") == "Helsinki-NLP/opus-mt-de-en"  # a Hub id (cached) stays one


def test_settings_that_cannot_work_are_refused_before_anything_runs(model_dir, translator, tmp_path):
    for kwargs, message in [
        (dict(dtype="float16", device="cpu"), "float16 needs a GPU"),
        (dict(int8=True, device="cuda"), "--int8 is PyTorch's dynamic quantization for CPUs"),
        (dict(backend="onnx"), "--backend must be"),
    ]:
        with pytest.raises(ValueError, match=message):
            load_translator(str(model_dir), **kwargs)
    source = write_lines(tmp_path / "in.de", LINES)
    for kwargs, message in [
        (dict(nbest=3, num_beams=2), "--nbest 3 needs --num_beams 3"),
        (dict(max_len_a=-1.0), ">= 0"),
        (dict(nbest=0), "at least 1"),
        (dict(length_penalty=math.nan), "--length_penalty must be a finite number, got nan"),
        (dict(temperature=math.inf, do_sample=True), "--temperature must be a finite number"),
        (dict(temperature=0.0, do_sample=True), "--temperature must be above 0, got 0.0"),
        (dict(temperature=-1.0, do_sample=True), "--temperature must be above 0"),
        (dict(top_p=1.5, do_sample=True), r"--top_p must be a probability in \(0, 1\]"),
        (dict(nbest=3, do_sample=True), "--nbest 3 needs beam search: sampling draws one translation per line"),
    ]:
        with pytest.raises(ValueError, match=message):
            translate_file([str(source)], str(tmp_path / "out.jsonl"), translator, DecodeOptions(**kwargs))
        assert not (tmp_path / "out.jsonl").exists()  # refused before anything is written


def test_the_engine_api_refuses_a_string_for_lines_and_takes_a_dict_for_options(translator):
    with pytest.raises(TypeError, match="lines: expected a list of lines, got one string"):
        translator.translate("Wo ist der Bahnhof?")

    def texts(options):
        return [[h.text for h in t.hypotheses] for t in translator.translate(LINES, options)]

    assert texts({"num_beams": 1, "nbest": 1}) == texts(DecodeOptions(num_beams=1))
    with pytest.raises(TypeError, match="options: expected DecodeOptions or a dict of its fields, got list"):
        translator.translate(LINES, [1])


def test_what_a_translator_keeps_per_decoding_stays_at_its_bound(translator):
    from hf_vanilla_transformer.translate.backends import KEPT_DECODINGS

    for i in range(KEPT_DECODINGS + 20):  # as many distinct options as a service's clients may send
        translator.decoding(DecodeOptions(length_penalty=0.5 + i / 100))
    assert len(translator._decodings) == KEPT_DECODINGS
    recent = DecodeOptions(length_penalty=0.5 + (KEPT_DECODINGS + 19) / 100)
    assert translator.decoding(recent) is translator._decodings[recent]


def test_sampling_is_reproducible_from_the_seed(translator):
    def sampled(seed):
        options = DecodeOptions(do_sample=True, top_k=5, seed=seed)
        return [[h.text for h in t.hypotheses] for t in translate_lines(LINES, translator, options)]

    first = sampled(3)
    assert first == sampled(3)
    assert first != sampled(4)


def test_more_threads_than_cores_are_capped_with_a_warning(model_dir, caplog):
    threads, available = torch.get_num_threads(), len(os.sched_getaffinity(0))
    try:
        with caplog.at_level(logging.WARNING, logger=TRANSLATOR_LOG):
            translator = load_translator(str(model_dir), device="cpu", threads=available + 62)
        assert torch.get_num_threads() == available and translator.engine.threads == available
        message = f"--threads {available + 62}: this machine has {available} cores; the engine runs {available}."
        assert message in caplog.text
    finally:
        torch.set_num_threads(threads)


def test_int8_quantizes_every_linear_layer_and_still_translates(model_dir, translator):
    quantized = load_translator(str(model_dir), device="cpu", int8=True)
    model = quantized.backend.model
    assert type(model.lm_head).__name__ == "Linear" and "quantized" in type(model.lm_head).__module__
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert model.model.shared.weight.dtype == torch.float32  # embeddings stay float
    assert texts(translate_lines(GERMAN, quantized)) == texts(translate_lines(GERMAN, translator))


def test_bfloat16_runs_on_the_cpu(model_dir, translator):
    half = load_translator(str(model_dir), device="cpu", dtype="bfloat16")
    assert half.backend.model.dtype == torch.bfloat16
    assert texts(translate_lines(GERMAN, half)) == ENGLISH


def opus_style_marian(path: Path) -> Path:
    """A MarianMTModel laid out like the OPUS-MT models: word vocabulary with <pad> last, the decoder starting
    from <pad>; untrained with large weights, so that outputs differ between inputs."""
    words = sorted({w for s in SENTENCES for w in s.replace("?", " ?").replace(".", " .").split()})
    vocab = {t: i for i, t in enumerate(["</s>", "<unk>", *words, "<pad>"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 0)])
    backend.decoder = decoders.WordPiece()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="</s>", unk_token="<unk>", pad_token="<pad>", model_max_length=64
    )
    torch.manual_seed(0)
    config = MarianConfig(
        vocab_size=len(vocab),
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        pad_token_id=len(vocab) - 1,
        eos_token_id=0,
        decoder_start_token_id=len(vocab) - 1,
        forced_eos_token_id=None,
        init_std=1.0,
    )
    model = MarianMTModel(config).eval()
    model.generation_config.bad_words_ids = [[config.pad_token_id]]
    model.generation_config.max_length = 12
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    return opus_style_marian(tmp_path_factory.mktemp("marian"))


def test_marian_translates_like_its_generate(marian_dir):
    model, tokenizer = MarianMTModel.from_pretrained(marian_dir).eval(), AutoTokenizer.from_pretrained(marian_dir)
    translator = load_translator(str(marian_dir), device="cpu")
    expected = []
    for line in LINES:
        ids = model.generate(**tokenizer(line, return_tensors="pt"), num_beams=2, max_new_tokens=8)
        expected.append(tokenizer.decode(ids[0], skip_special_tokens=True) if line.strip() else "")
    assert (
        texts(translate_lines(LINES, translator, DecodeOptions(num_beams=2, max_len_b=8, max_tokens=16))) == expected
    )
    assert len(set(expected)) > 4
    (translation,) = translate_lines(LINES[:1], translator)  # its generation config leaves num_beams unset: greedy
    assert len(translation.hypotheses[0].token_scores) == len(translation.hypotheses[0].tokens) == 11


def test_ctranslate2_backend_converts_marian_and_agrees_with_pytorch(marian_dir, tmp_path, monkeypatch):
    pytest.importorskip("ctranslate2")
    monkeypatch.setenv("HF_VANILLA_TRANSFORMER_CACHE", str(tmp_path))
    options = DecodeOptions(nbest=2, num_beams=2, early_stopping=True, max_len_b=8)
    torch_translations = list(translate_lines(LINES, load_translator(str(marian_dir), device="cpu"), options))
    ct2 = load_translator(str(marian_dir), backend="ctranslate2", device="cpu")
    (converted,) = (tmp_path / "ctranslate2").iterdir()
    one_by_one = dataclasses.replace(options, batch_size=1)
    for translations in (translate_lines(LINES, ct2, options), translate_lines(LINES, ct2, one_by_one)):
        for ours, theirs in zip(torch_translations, translations):
            assert [h.tokens for h in theirs.hypotheses] == [h.tokens for h in ours.hypotheses]
            assert [h.reached_length_limit for h in theirs.hypotheses] == [
                h.reached_length_limit for h in ours.hypotheses
            ]
            for a, b in zip(ours.hypotheses, theirs.hypotheses):
                assert b.token_scores == pytest.approx(a.token_scores, abs=1e-3)
    # An already converted folder works too, with the tokenizer files beside model.bin.
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(marian_dir / name, converted / name)
    direct = load_translator(str(converted), backend="ctranslate2", device="cpu")
    assert texts(translate_lines(LINES, direct, options)) == texts(torch_translations)


def test_ctranslate2_backend_exports_our_model_once_and_agrees_with_pytorch(
    model_dir, translator, tmp_path, monkeypatch
):
    pytest.importorskip("ctranslate2")
    monkeypatch.setenv("HF_VANILLA_TRANSFORMER_CACHE", str(tmp_path))
    ct2 = load_translator(str(model_dir), backend="ctranslate2", device="cpu")
    ours = list(translate_lines(LINES, translator))
    for theirs, reference in zip(translate_lines(LINES, ct2), ours):
        assert [h.tokens for h in theirs.hypotheses] == [h.tokens for h in reference.hypotheses]
        for a, b in zip(reference.hypotheses, theirs.hypotheses):
            assert b.token_scores == pytest.approx(a.token_scores, abs=1e-3)
            assert b.score == pytest.approx(a.score, abs=1e-3)
    (converted,) = (tmp_path / "ctranslate2").iterdir()
    load_translator(str(model_dir), backend="ctranslate2", device="cpu")  # reuses the converted folder
    assert list((tmp_path / "ctranslate2").iterdir()) == [converted]
    with pytest.raises(ValueError, match="do_sample"):
        load_translator(str(converted), backend="ctranslate2").translate(LINES, DecodeOptions(do_sample=True))


def test_one_loaded_model_decodes_with_any_options_per_call(model_dir, translator, tmp_path, monkeypatch):
    """Loaded once, as CTranslate2's Translator: other beams, n-best, length rules or batching per call decode on the
    same weights, and give what a translator loaded for those options alone gives."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    monkeypatch.setenv("HF_VANILLA_TRANSFORMER_CACHE", str(tmp_path))
    loads = []
    monkeypatch.setattr(ctranslate2, "Translator", lambda *a, **k: loads.append(a) or ctranslate2_translator(*a, **k))
    ct2 = load_translator(str(model_dir), backend="ctranslate2", device="cpu")
    calls = [
        DecodeOptions(),
        DecodeOptions(num_beams=1),
        DecodeOptions(num_beams=3, nbest=3),
        DecodeOptions(num_beams=5, nbest=2, length_penalty=1.0),
        DecodeOptions(num_beams=2, max_len_b=4, batch_size=2),
    ]
    for options in calls:
        for engine in (translator, ct2):
            ours = [[h.tokens for h in t.hypotheses] for t in engine.translate(LINES, options)]
            fresh = load_translator(str(model_dir), backend=engine.engine.backend, device="cpu")
            assert ours == [[h.tokens for h in t.hypotheses] for t in fresh.translate(LINES, options)], options
    assert len(loads) == 1 + len(calls)  # the translator's own load, then only the fresh ones


ctranslate2_translator = None
if importlib.util.find_spec("ctranslate2"):
    import ctranslate2 as _ctranslate2

    ctranslate2_translator = _ctranslate2.Translator


@pytest.mark.parametrize(
    "generation, nbest",
    [
        ({"num_beams": 1}, 1),
        ({"num_beams": 3, "length_penalty": 0.6}, 2),
        ({"num_beams": 3, "length_penalty": 0.0}, 1),
    ],
)
def test_ctranslate2_decodes_a_batch_of_many_limits_as_each_sentence_alone(
    model_dir, tmp_path, monkeypatch, generation, nbest
):
    """CTranslate2 takes one limit per call: a batch whose sentences have different limits gives each sentence what
    it gets alone with its own limit, whether its search ends first or runs into its limit."""
    pytest.importorskip("ctranslate2")
    monkeypatch.setenv("HF_VANILLA_TRANSFORMER_CACHE", str(tmp_path))
    translator = load_translator(str(model_dir), backend="ctranslate2", device="cpu")
    decoding = translator.decoding(DecodeOptions(**generation, nbest=nbest))
    sources = [ids for line in translator.encode(GERMAN) for ids in line.ids]
    assert len({len(s) % 4 for s in sources}) > 2

    def limit(source_length: int) -> int:
        return 2 + 3 * (source_length % 4)  # 2, 5, 8 and 11 new tokens

    batched = translator.backend.generate(sources, limit, decoding)
    alone = [translator.backend.generate([s], limit, decoding)[0] for s in sources]
    assert [[(h.token_ids, h.reached_limit) for h in hs] for hs in batched] == [
        [(h.token_ids, h.reached_limit) for h in hs] for hs in alone
    ]
    for hs, theirs in zip(batched, alone):
        assert [h.token_scores for h in hs] == [pytest.approx(h.token_scores, abs=1e-5) for h in theirs]
    reached = [hs[0].reached_limit for hs in batched]
    assert any(reached) and not all(reached)  # both kinds of sentence are in the batch


@pytest.mark.slow
def test_two_processes_write_the_same_bytes_as_one(model_dir, translator, tmp_path):
    source = write_lines(tmp_path / "in.de", [LINES[i % len(LINES)] for i in range(45)])
    args = [source, "--model", model_dir, "--format", "jsonl", "--nbest", "2", "--buffer_size", "20", "--quiet"]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    launch += ["--main_process_port", str(free_port()), "-m", "hf_vanilla_transformer", "translate"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [*launch, *map(str, args), "--output", str(tmp_path / "two.jsonl")], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    one = tmp_path / "one.jsonl"
    options = DecodeOptions(nbest=2)
    translate_file([str(source)], str(one), translator, options, output_format="jsonl", quiet=True, buffer_size=20)
    assert (tmp_path / "two.jsonl").read_bytes() == one.read_bytes()


@pytest.mark.slow
def test_the_console_command_reads_stdin_writes_stdout_and_shows_progress(model_dir, translator, capsys):
    command = shutil.which("hf-vanilla-transformer", path=str(Path(sys.executable).parent))
    run = subprocess.run(
        [command, "translate", "--model", str(model_dir)],
        input="\n".join(LINES) + "\n",
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == texts(translate_lines(LINES, translator))
    assert "sent/s" in run.stderr and "tok/s" in run.stderr
    assert cli.main(["translate", "--model", "./no-such-model", "--quiet"]) == 2
    expected = "hf-vanilla-transformer translate: error: --model ./no-such-model: no such model folder.\n"
    assert capsys.readouterr().err == expected


def test_format_translation_keeps_one_line_per_input_line():
    translation = LineTranslation("a\tb", [TextHypothesis("x\ny", ["x", "y"], [-1.0, -2.0], -1.5, False)], 1)
    assert format_translation(0, translation, "text") == "x y\n"
    assert format_translation(7, LineTranslation("", [], 0), "text") == "\n"
    assert json.loads(format_translation(7, translation, "jsonl"))["hypotheses"][0]["text"] == "x\ny"
