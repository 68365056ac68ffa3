"""`python -m scripts.benchmark_translate` end to end on a tiny model and a few lines: its report, not its timings."""

import json

import pytest

from scripts import benchmark_translate
from tests.helpers import tiny_translator_dir


pytestmark = pytest.mark.slow  # a process per system


def test_the_static_cache_system_reports_its_first_pass_and_the_lines_identical_to_translate(tmp_path, capsys):
    output = tmp_path / "translate.json"
    arguments = ["--model", str(tiny_translator_dir()), "--lines", "40", "--threads", "1"]
    arguments += ["--systems", "translate", "translate-static", "--output_json", str(output)]
    results = benchmark_translate.main(arguments)
    assert json.loads(output.read_text()) == json.loads(json.dumps(results))
    static = results["rows"]["translate-static"]
    assert static["identical_to_translate"] == 40 and static["bleu_change"] == 0
    assert static["first_pass_wall_seconds"] > 0 and "compile_seconds" in static
    assert results["device"] == "cpu" and "compile_seconds" not in results["rows"]["translate"]
    out = capsys.readouterr().out
    assert "translate --compile always: " in out and json.loads(out.splitlines()[-1]) == json.loads(
        json.dumps(results)
    )


def test_cpu_systems_are_refused_on_a_gpu():
    with pytest.raises(SystemExit):
        benchmark_translate.main(["--model", "m", "--device", "cuda", "--systems", "translate", "translate-int8"])


def test_a_measured_systems_own_process_on_a_gpu_runs_it(monkeypatch, capsys):
    """The process that `measure` starts names one system (`--run`), not `--systems`: the check is the parent's."""
    ran = []
    monkeypatch.setattr(benchmark_translate, "run_system", lambda *args: ran.append(args) or {"wall": 1.0, "cpu": 1.0})
    benchmark_translate.main(
        ["--model", "m", "--run", "translate", "--device", "cuda", "--source", "s", "--output", "o"]
    )
    assert [args[0] for args in ran] == ["translate"] and json.loads(capsys.readouterr().out) == {
        "wall": 1.0,
        "cpu": 1.0,
    }
