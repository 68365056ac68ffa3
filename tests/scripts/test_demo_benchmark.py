"""scripts/demo_benchmark.py: the demo's BLEU beside the recorded figures, exit 1 when far below (the run faked)."""

import json

from hf_vanilla_transformer.recipes.translation import DEMO_BLEU
from scripts import demo_benchmark


def fake_demo(bleu):
    def run(command, **kwargs):
        output_dir = command[command.index("--output_dir") + 1]
        test = dict(bleu=bleu, chrf=51.8, num_samples=1000, num_beams=4, length_penalty=0.6)
        report = {"test": test, "training": {"steps": 2300, "hardware": "a CPU"}}
        (demo_benchmark.Path(output_dir) / "metrics.json").write_text(json.dumps(report))

    return run


def test_the_benchmark_prints_the_bleu_beside_the_recorded_figure(tmp_path, monkeypatch, capsys):
    assert demo_benchmark.readme_bleu() is not None
    monkeypatch.setattr(demo_benchmark.subprocess, "run", fake_demo(DEMO_BLEU + 0.1))
    assert demo_benchmark.main(["--output_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"test BLEU {DEMO_BLEU + 0.1:.2f}, chrF 51.80" in out and f"recorded {DEMO_BLEU:.2f}" in out
    monkeypatch.setattr(demo_benchmark.subprocess, "run", fake_demo(29.4))
    assert demo_benchmark.main(["--output_dir", str(tmp_path)]) == 1


def test_the_readme_and_the_recipe_state_the_figure_of_the_recorded_run():
    """One measured run behind the demo's figure: the README's BLEU is DEMO_BLEU, which its result file records."""
    from hf_vanilla_transformer.recipes.translation import DEMO_RESULT

    assert demo_benchmark.readme_bleu() == DEMO_BLEU
    assert f"BLEU {DEMO_BLEU:.2f}" in (demo_benchmark.README.parent / DEMO_RESULT).read_text(encoding="utf-8")
