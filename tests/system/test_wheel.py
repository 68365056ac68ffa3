"""The package releases: `python -m build` (offline, without build isolation) gives a wheel and an sdist that
`twine check` accepts, and the wheel, installed into a fresh virtual environment, runs every command without the
source tree on the path."""

import os
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile

import pytest

from hf_vanilla_transformer.interop.onnx_runtime import transformers_js_folder
from tests.helpers import ROOT


pytestmark = pytest.mark.slow  # servers, browsers, whole command runs


RUN_TIME_FILES = {  # what the package reads at run time, beside its modules
    "hf_vanilla_transformer/hub/model_card_template.md",
    "hf_vanilla_transformer/training/sacrebleu_scores/sacrebleu_scores.py",
    "hf_vanilla_transformer/interop/translate.mjs",
    "hf_vanilla_transformer/demo/web/index.html",
    "hf_vanilla_transformer/demo/web/app.mjs",
    "hf_vanilla_transformer/recipes/accelerate/ddp.yaml",
    *(
        f"hf_vanilla_transformer/data/tatoeba-de-en/{name}"
        for name in ("train.jsonl", "validation.jsonl", "test.jsonl", "README.md", "SOURCE_ABOUT.txt")
    ),
}
TINY = ["--d_model", 32, "--ffn_dim", 64, "--attention_heads", 2, "--encoder_layers", 1, "--decoder_layers", 1]
SINGLE_STACK = ["--d_model", 32, "--ffn_dim", 64, "--heads", 2, "--layers", 1, "--vocab_size", 200]
SHORT = ["--max_steps", 2, "--max_train_minutes", 0, "--bf16", "False", "--report_to", "none"]
WHERE_FROM = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import hf_vanilla_transformer
    from hf_vanilla_transformer.data.corpus import BUNDLED_CORPUS

    assert Path(hf_vanilla_transformer.__file__).is_relative_to(sys.prefix), hf_vanilla_transformer.__file__
    assert "CC BY 2.0 FR" in (BUNDLED_CORPUS / "README.md").read_text()
    assert (BUNDLED_CORPUS / "SOURCE_ABOUT.txt").is_file()
    """
)


def run(*command, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(list(map(str, command)), capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_the_wheel_holds_every_file_the_package_reads_and_works_in_a_fresh_environment(tmp_path):
    source = tmp_path / "source"  # a copy: building writes build/ and *.egg-info next to the sources
    junk = (".git", ".venv*", "__pycache__", "build", "dist", "*.egg-info", ".pytest_cache", ".hypothesis", "outputs")
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*junk, "runs"))
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", tmp_path, source)  # the sdist, its wheel
    (wheel,) = tmp_path.glob("hf_vanilla_transformer-*.whl")
    (sdist,) = tmp_path.glob("hf_vanilla_transformer-*.tar.gz")
    assert "PASSED" in run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist).stdout
    names = set(zipfile.ZipFile(wheel).namelist())
    assert RUN_TIME_FILES <= names, RUN_TIME_FILES - names
    assert {f"hf_vanilla_transformer/{path.name}" for path in (ROOT / "hf_vanilla_transformer").glob("*.py")} <= names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)

    # A fresh environment that installs nothing but the wheel: the dependencies come from this one's site-packages
    # (as plain paths, so that this checkout's editable install stays out).
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    (new_site,) = (venv / "lib").glob("python*/site-packages")
    (new_site / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # a checkout on it would count as the package installed, and pip would skip the wheel
    install = ["install", "--no-deps", "--no-index", "--ignore-installed", "-q", wheel]
    run(sys.executable, "-m", "pip", "--python", python, *install, env=env)

    work = tmp_path / "work"  # neither the source tree nor this checkout on the path
    work.mkdir()
    run(python, "-c", WHERE_FROM, cwd=work, env=env)
    command = venv / "bin" / "hf-vanilla-transformer"

    def hvt(*argv):
        return run(command, *argv, cwd=work, env=env).stdout

    assert "verify-export" in hvt("--help")
    demo = ["--output_dir", "demo", *TINY, "--vocab_size", 200, *SHORT, "--save_steps", 1, "--save_total_limit", 2]
    demo += ["--max_train_samples", 64, "--max_eval_samples", 8, "--max_test_samples", 8, "--eval_strategy", "no"]
    assert "Trained 2 steps" in hvt("train", "translation", *demo)
    (work / "in.de").write_text("Wo ist der Bahnhof?\nIch habe Hunger.\n", encoding="utf-8")
    hvt("translate", "--model", "demo", "in.de", "--output", "out.en", "--max_len_b", 3, "--quiet")
    assert len((work / "out.en").read_text(encoding="utf-8").splitlines()) == 2
    for engine in ("ctranslate2", "marian", "onnx"):
        assert "Wrote" in hvt("export", engine, "--model", "demo", "--output_dir", f"export-{engine}")
    # A model of 2 steps writes one output for every line: verify-export runs, and says that this proves nothing.
    verify = ["verify-export", "--model", "demo", "--limit", 4, "--engines", "marian", "ctranslate2", "onnx"]
    refused = subprocess.run([str(command), *map(str, verify)], capture_output=True, text=True, cwd=work, env=env)
    assert refused.returncode == 2 and "proves nothing" in refused.stderr, refused.stderr[-3000:]
    assert "Averaged 2 checkpoints" in hvt("average", "--run_dir", "demo", "--last", 2, "--output_dir", "averaged")
    publish = ["publish", "--model", "demo", "--repo_id", "org/demo", "--dry_run", "--output_dir", "staged"]
    assert "Wrote the folder" in hvt(*publish, "--allow_low_bleu")
    assert "Wrote a Gradio Space" in hvt("demo", "--model", "demo", "--write_space", "--output_dir", "space")
    assert "Wrote" in hvt("plot", "attention", "--model", "demo", "--text", "Wo ist Tom?", "--output_dir", "maps")
    assert "Wrote" in hvt("plot", "positional-encoding", "--output", "pe.png")
    if transformers_js_folder():  # installed by `bash scripts/setup.sh --dev`; the web-page tests say so if not
        assert "Wrote the page" in hvt("web-page", "--model", "demo", "--output_dir", "page")
    lm = ["--output_dir", "lm", *SINGLE_STACK, *SHORT, "--eval_strategy", "no", "--prompts", "Tom"]
    assert "Perplexity" in hvt("train", "language-modeling", *lm)
    classifier = ["--output_dir", "classifier", *SINGLE_STACK, *SHORT, "--eval_strategy", "no"]
    assert "accuracy" in hvt("train", "classification", *classifier, "--examples", "Wo ist Tom")
