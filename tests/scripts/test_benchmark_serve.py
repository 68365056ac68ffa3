"""`python -m scripts.benchmark_serve` end to end on a tiny model with tiny bounds: its report, not its timings."""

import json

import pytest

from scripts import benchmark_serve, serve_memory
from tests.helpers import serving_model_dir


pytestmark = pytest.mark.slow  # two servers


def test_the_benchmark_drives_each_server_and_reports_levels_soak_and_targets(tmp_path, capsys):
    output = tmp_path / "serve.json"
    arguments = ["--model", str(serving_model_dir()), "--systems", "serve", "naive", "--clients", "1", "32"]
    arguments += ["--seconds", "1", "--max_requests", "40", "--soak_minutes", "0.05", "--output_json", str(output)]
    results = benchmark_serve.main(arguments)
    assert json.loads(output.read_text()) == json.loads(json.dumps(results))
    for system in ("serve", "naive"):
        for clients in ("1", "32"):
            level = results["systems"][system][clients]
            assert level["failed"] == 0 and 0 < level["requests"] <= 40 + int(clients)
            assert level["sentences_per_s"] > 0 and level["p50_s"] <= level["p95_s"] <= level["p99_s"]
    assert results["soak"]["failed"] == 0 and results["soak"]["samples"] >= 1
    assert set(results["targets"]) == {
        "32 clients >= 4x one client",
        "32 clients >= 3x the naive server",
        "p99 at 32 clients < 1.5 s",
        "RSS growth over the soak < 5%",
        "failed requests of this server = 0",
    }
    assert results["targets"]["failed requests of this server = 0"]["met"]
    assert "| target | measured | met |" in capsys.readouterr().out


def test_the_memory_benchmark_sends_requests_of_distinct_options_and_samples_the_servers_memory(tmp_path, capsys):
    output = tmp_path / "memory.json"
    arguments = ["--model", str(serving_model_dir()), "--requests", "40", "--baseline", "10", "--every", "20"]
    results = serve_memory.main([*arguments, "--output_json", str(output), "--log", str(tmp_path / "serve.log")])
    assert json.loads(output.read_text()) == json.loads(json.dumps(results))
    assert results["failed"] == 0 and set(results["rss_mb"]) == {10, 20, 40}
    assert results["growth_mb"] == round(results["rss_mb"][40] - results["rss_mb"][10], 1)
    assert "RSS" in capsys.readouterr().out
