"""`python -m scripts.loss_benchmark` and the `loss` measurement of `scripts.gpu_benchmark`, as far as a CPU runs
them: every variant computes the same loss, with and without the output projection."""

import json

import pytest

from scripts import gpu_benchmark, loss_benchmark


@pytest.mark.parametrize("d_model", [None, 16], ids=["logits", "with-projection"])
def test_the_reference_and_ours_measure_the_same_loss(d_model):
    measured = {
        variant: loss_benchmark.measure_loss(variant, 40, 30, "bf16", "cpu", d_model, repeats=1, chunk_rows=16)
        for variant in ("reference", "ours")
    }
    assert measured["ours"]["loss"] == pytest.approx(measured["reference"]["loss"], rel=1e-5)
    assert all(value["seconds"] > 0 and value["peak_mb"] >= 0 for value in measured.values())


def test_the_cpu_run_reports_both_dtypes(monkeypatch, capsys):
    monkeypatch.setattr(loss_benchmark, "in_fresh_process", lambda fn, *args: fn(*args))
    results = loss_benchmark.main(["--rows", "24", "--vocab", "50"])
    assert {"time_ratio", "peak_ratio", "reference", "ours"} <= results["fp32"].keys() <= results["bf16"].keys()
    assert "bf16 logits, 24 x 50: reference" in capsys.readouterr().out


def test_the_gpu_benchmarks_loss_measurement_runs_its_steps_on_the_cpu(tmp_path):
    gpu_benchmark.main(["--json", str(tmp_path / "out.json"), "--dry_run", "--measure", "loss"])
    data = json.loads((tmp_path / "out.json").read_text())
    assert set(data["loss"]) == {"reference", "ours"} | {
        f"ours, {n} rows per chunk" for n in gpu_benchmark.LOSS_CHUNKS
    }
    assert len({round(value["loss"], 5) for value in data["loss"].values()}) == 1
    assert data["loss"]["reference"]["time_vs_reference"] == 1.0
    assert {"loss liger", "loss reference-compiled"} <= data["skipped"].keys() and not data["errors"]
