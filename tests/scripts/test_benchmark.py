"""The building blocks of `python -m scripts.benchmark` on the "tiny" size, and the CLI end to end. Behaviour only, no
timings."""

import importlib.util
import json
import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers.trainer_pt_utils import LabelSmoother

from hf_vanilla_transformer.model.modeling_vanilla_transformer import shift_tokens_right
from scripts import benchmark
from tests.helpers import ROOT


pytestmark = pytest.mark.slow  # servers, browsers, whole command runs


HAS_CT2 = importlib.util.find_spec("ctranslate2") is not None
HAS_ONNXRUNTIME = importlib.util.find_spec("onnxruntime") is not None


def tiny_batch(index=0):
    workload = benchmark.make_workload(benchmark.SIZES["tiny"]["vocab_size"])
    return benchmark.training_batch(workload["train"][index], "cpu")


def randomize(model, seed=0):
    """Weights at scales that make greedy output depend on the source: at the default init these tiny models (tied
    embeddings, one layer) repeat one token whatever the source. Sinusoidal positions are left alone."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:
                continue
            if p.dim() == 2:  # the shared embedding ~ 1/sqrt(d_model), other weights ~ 2/sqrt(fan_in)
                p.copy_(
                    torch.randn(p.shape, generator=g)
                    / p.shape[1] ** 0.5
                    * (1 if "embed" in name or "shared" in name else 2)
                )
            else:  # biases around 0, LayerNorm gains around 1
                p.copy_(0.1 * torch.randn(p.shape, generator=g) + ("norm" in name and name.endswith("weight")))
        if hasattr(model, "final_logits_bias"):  # MarianMTModel's (a buffer)
            model.final_logits_bias.copy_(0.1 * torch.randn(model.final_logits_bias.shape, generator=g))


def test_workload_is_the_documented_workload_and_marks_padding():
    workload = benchmark.make_workload(8000)
    assert workload == benchmark.make_workload(8000)  # every process rebuilds the same data
    pairs = [pair for batch in workload["train"] for pair in batch]
    assert len(workload["train"][0]) == 32 and len(workload["sources"]) == 64
    assert all(10 <= len(s) <= 40 and 10 <= len(t) <= 40 and s[-1] == t[-1] == 2 for s, t in pairs)
    assert all(20 <= len(s) <= 30 and s[-1] == 2 for s in workload["sources"])
    assert len({len(t) for _, t in pairs}) > 5  # real padding
    batch = tiny_batch()
    assert torch.equal(batch["decoder_attention_mask"].bool(), batch["labels"] != -100)
    assert torch.equal(batch["attention_mask"].bool(), batch["input_ids"] != 0)
    assert torch.equal(batch["decoder_input_ids"], shift_tokens_right(batch["labels"], 0, 1))


@pytest.mark.parametrize("system", sorted(set(benchmark.TORCH_SYSTEMS) - benchmark.GENERATION_PATHS))
def test_every_torch_system_trains_on_the_same_batch(system):
    model = benchmark.build_model(system, "tiny").train()
    loss = benchmark.training_loss(model, system, tiny_batch())
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_the_three_losses_are_the_same_label_smoothed_cross_entropy():
    """Marian's LabelSmoother, nn.Transformer's F.cross_entropy and our model's loss agree on the same logits."""
    batch = tiny_batch()
    model = benchmark.build_model("ours-sdpa", "tiny").eval()  # eval: logits at every position
    out = model(**batch)  # the benchmark's models smooth by 0.1
    cross_entropy = torch.nn.functional.cross_entropy(
        out.logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100, label_smoothing=0.1
    )
    torch.testing.assert_close(out.loss, cross_entropy)
    torch.testing.assert_close(LabelSmoother(epsilon=0.1)(out, batch["labels"]), cross_entropy)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_nn_transformer_greedy_is_the_argmax_of_its_forward_and_ignores_padding():
    model = benchmark.build_model("nn-transformer", "tiny").eval()
    batch = tiny_batch()
    ids, mask = batch["input_ids"][:4], batch["attention_mask"][:4]
    randomize(model)
    with torch.no_grad():
        model.transformer.decoder.norm.weight.normal_(0, 1)  # nn.Transformer's extra final LayerNorm, ditto
        out = model.greedy(ids, mask, 6)
        assert out.shape == (4, 6) and not (out == benchmark.EOS).any()
        decoder_input_ids = torch.cat([torch.full((4, 1), benchmark.BOS), out[:, :-1]], dim=1)
        logits = model(ids, mask, decoder_input_ids, torch.ones_like(decoder_input_ids))
        logits[..., benchmark.EOS] = -torch.inf
        assert torch.equal(logits.argmax(-1), out)
        alone = model.greedy(ids[1:2, : int(mask[1].sum())], mask[1:2, : int(mask[1].sum())], 6)
        assert torch.equal(alone, out[1:2])
        assert len(set(map(tuple, out.tolist()))) > 1  # the output depends on the source


def test_flop_count_by_hand():
    # tiny: d 32, ffn 64, 1+1 layers, vocab 100; one pair with 2 source tokens and 1 target token.
    encoder = 8 * 2 * 32 * 32 + 4 * 2 * 2 * 32 + 4 * 2 * 32 * 64  # projections, attention, FFN = 33280
    cross_keys_values = 4 * 2 * 32 * 32  # 8192
    decoder = 8 * 32 * 32 + 4 * 32 + 4 * 32 * 32 + 4 * 2 * 32 + 4 * 32 * 64 + 2 * 32 * 100  # 27264
    assert benchmark.forward_flops("tiny", 2, 1) == encoder + cross_keys_values + decoder == 68736
    assert benchmark.forward_flops("tiny", 2, 1, num_beams=4) == encoder + cross_keys_values + 4 * decoder
    # The same count over many pairs' lengths at once, as the GPU training probe makes it on the device.
    sources, targets = torch.tensor([2.0, 7.0, 30.0]), torch.tensor([1.0, 9.0, 25.0])
    expected = sum(benchmark.forward_flops("tiny", int(s), int(t)) for s, t in zip(sources, targets))
    assert float(benchmark.pair_flops(32, 64, 1, 100, sources, targets).sum()) == expected


@pytest.mark.parametrize("target_length", [1, 5])
def test_flop_count_matches_torch_flop_counter(target_length):
    """torch's FlopCounterMode on MarianMT (eager, no padding) for a training step: forward + backward = 3x forward.
    It counts the full t x t decoder self-attention, where ours counts only the causal half."""
    model = benchmark.build_model("marian-eager", "tiny").train()
    model.config.dropout = 0.0
    source = torch.tensor([[5, 6, 7, 2]])
    target = torch.arange(4, 4 + target_length)[None]
    with FlopCounterMode(display=False) as counter:
        model(input_ids=source, decoder_input_ids=target).logits.sum().backward()
    d, t = benchmark.SIZES["tiny"]["d_model"], target_length
    non_causal = benchmark.SIZES["tiny"]["layers"] * 2 * t * (t - 1) * d  # keys after each query
    assert counter.get_total_flops() == 3 * (benchmark.forward_flops("tiny", 4, t) + non_causal)


def test_workload_counts():
    workload = benchmark.make_workload(100)
    counts = benchmark.workload_counts("tiny", workload)
    assert counts["train"][0] == sum(len(t) for batch in workload["train"] for _, t in batch)
    assert counts["greedy"][0] == counts["beam4"][0] == 64 * 30
    assert counts["greedy"][1] < counts["beam4"][1] < 4 * counts["greedy"][1]


@pytest.mark.skipif(not HAS_CT2, reason="ctranslate2 is not installed")
def test_ctranslate2_conversion_decodes_like_transformers(tmp_path):
    """Greedy and beam-4 ids of the converted model equal MarianMTModel.generate's, on weights whose output depends
    on the source. Conversion and decoding run in their own processes: ctranslate2 never loads next to torch here."""
    model = benchmark.build_model("marian-sdpa", "tiny").eval()
    randomize(model)
    model.save_pretrained(tmp_path / "marian")
    convert = (
        "from scripts import benchmark_ctranslate2 as c; "
        f"c.convert_marian({str(tmp_path / 'marian')!r}, {str(tmp_path / 'ct2')!r})"
    )
    subprocess.run([sys.executable, "-c", convert], cwd=ROOT, check=True, capture_output=True)
    sources = benchmark.make_workload(100)["sources"][:16]
    task = dict(
        model_dir=str(tmp_path / "ct2"),
        sources=sources,
        batch_size=16,
        beams=[1, 4],
        new_tokens=30,
        threads=1,
        compute_type="float32",
    )
    proc = subprocess.run(
        [sys.executable, benchmark.CT2_SCRIPT], input=json.dumps(task), capture_output=True, text=True
    )
    result = json.loads(proc.stdout)
    assert not result["torch_in_process"]
    ids, mask = benchmark.pad(sources, 0, "cpu"), benchmark.pad([[1] * len(s) for s in sources], 0, "cpu")
    for run in result["runs"]:
        with torch.no_grad():
            expected = benchmark.generate(model, "marian-sdpa", ids, mask, run["num_beams"])
        assert len({tuple(o) for o in run["outputs"]}) > 1
        assert run["outputs"] == expected.tolist()


@pytest.mark.skipif(not HAS_CT2, reason="ctranslate2 is not installed")
def test_our_ctranslate2_export_decodes_like_generate(tmp_path, monkeypatch):
    """The "this package via CTranslate2" rows time `export_ctranslate2`'s output for the benchmark's own model: its
    fixed-length greedy ids equal our generate()'s. (Beam search is compared in test_export_ctranslate2.py: with EOS
    banned, as here, transformers masks it after the log-softmax and CTranslate2 before, so beam scores differ.)"""
    model = benchmark.build_model("ours-sdpa", "tiny").eval()
    randomize(model)
    monkeypatch.setattr(benchmark, "build_model", lambda system, size: model)
    benchmark.export_ours_for_ct2("tiny", str(tmp_path / "ct2"))
    sources = benchmark.make_workload(100)["sources"][:16]
    task = dict(model_dir=str(tmp_path / "ct2"), sources=sources, batch_size=16, beams=[1, 4], new_tokens=30)
    proc = subprocess.run(
        [sys.executable, benchmark.CT2_SCRIPT],
        input=json.dumps({**task, "threads": 1, "compute_type": "float32"}),
        capture_output=True,
        text=True,
    )
    greedy, beam = json.loads(proc.stdout)["runs"]
    ids, mask = benchmark.pad(sources, 0, "cpu"), benchmark.pad([[1] * len(s) for s in sources], 0, "cpu")
    with torch.no_grad():
        expected = benchmark.generate(model, "ours-sdpa", ids, mask, num_beams=1)
    assert len({tuple(o) for o in greedy["outputs"]}) > 1
    assert greedy["outputs"] == expected.tolist()
    assert all(len(o) == 30 for o in beam["outputs"])


@pytest.mark.slow
def test_cli_end_to_end(tmp_path):
    summary = benchmark.main(
        [
            "--sizes",
            "tiny",
            "--repeats",
            "1",
            "--threads",
            "1",
            "--json",
            str(tmp_path / "r.json"),
            "--plot",
            str(tmp_path / "r.png"),
        ]
    )
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(summary))
    assert (tmp_path / "r.png").stat().st_size > 0
    rows = {row["system"]: row for row in summary["rows"]}
    ct2 = {"ct2-float32", "ct2-int8", "ct2-ours-float32", "ct2-ours-int8"}
    onnx = {"onnx-float32", "onnx-int8"}
    expected = set(benchmark.TORCH_SYSTEMS) | (ct2 if HAS_CT2 else set()) | (onnx if HAS_ONNXRUNTIME else set())
    assert set(rows) == expected
    for system, row in rows.items():
        if system in benchmark.TRAINING_CALL_PATHS:
            assert set(row) >= {"train_tokens_per_s", "train_peak_mb"} and "greedy_tokens_per_s" not in row
            continue
        assert row["greedy_tokens_per_s"] > 0
        assert ("beam4_tokens_per_s" in row) == (system not in {"nn-transformer", *onnx})
        trains = system.startswith(("ours", "marian", "nn")) and system not in benchmark.GENERATION_PATHS
        assert ("train_tokens_per_s" in row) == trains
    assert rows["marian-sdpa"]["vs_marian"]["train_tokens_per_s"] == 1.0
    assert 0 < rows["ours-sdpa"]["train_peak_fraction"] < 1 and rows["ours-sdpa"]["train_peak_mb"] > 100
    assert {t["target"] for t in summary["targets"]} >= {
        "training >= 1.3x MarianMTModel (sdpa)",
        "peak training memory <= MarianMTModel (sdpa)",
        "greedy, batch 1: generate() >= 0.95x MarianMTModel (sdpa)'s",
        "beam-4, batch 16: ours, translate's engine >= 1.3x MarianMTModel (sdpa)'s generate()",
    }


def test_the_engine_of_translate_generates_what_generate_does():
    model = benchmark.build_model("ours-translate", "tiny").eval()
    workload = benchmark.make_workload(benchmark.SIZES["tiny"]["vocab_size"])
    ids, mask = benchmark.generation_batches("beam4", workload["sources"], "cpu")[0]
    with torch.no_grad():
        for beams in (1, 4):
            engine = benchmark.generate(model, "ours-translate", ids, mask, beams)
            assert torch.equal(engine, benchmark.generate(model, "ours-sdpa", ids, mask, beams))


@pytest.mark.slow
def test_memory_scaling_grows_with_the_batch(tmp_path):
    from scripts import memory_scaling

    memory_scaling.main(
        ["--modes", "forward", "--batch_sizes", "1", "64", "--lengths", "64", "--json", str(tmp_path / "m.json")]
    )
    rows = json.loads((tmp_path / "m.json").read_text())["rows"]
    assert [(r["batch_size"], r["length"]) for r in rows] == [(1, 64), (64, 64)]
    assert rows[1]["peak_mb"] > rows[0]["peak_mb"] + 100  # 64x64 positions of 8000 logits alone take 125 MB
    with pytest.raises(SystemExit):
        memory_scaling.main(["--lengths", "257"])
