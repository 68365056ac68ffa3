"""The package installs as a wheel: built offline, installed into a fresh virtual environment, it runs the demo's data
loading, a training step and the pipeline without the source tree on the path."""

import os
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
RUN_TIME_FILES = {  # what the package reads at run time, beside its modules
    "hf_vanilla_transformer/model_card_template.md",
    *(
        f"hf_vanilla_transformer/corpora/tatoeba-de-en/{name}"
        for name in ("train.jsonl", "validation.jsonl", "test.jsonl", "README.md", "SOURCE_ABOUT.txt")
    ),
}
TINY = ["--d_model", 32, "--ffn_dim", 64, "--attention_heads", 2, "--encoder_layers", 1, "--decoder_layers", 1]
# In the fresh environment: where the package comes from, the demo script on the bundled corpus (its data loading and
# two training steps), then the pipeline and a model card from the folder it saved.
IN_THE_FRESH_ENVIRONMENT = textwrap.dedent(
    """
    import runpy, sys
    from pathlib import Path
    import hf_vanilla_transformer
    from hf_vanilla_transformer.data import BUNDLED_CORPUS
    from hf_vanilla_transformer.model_card import make_model_card
    from transformers import pipeline

    assert Path(hf_vanilla_transformer.__file__).is_relative_to(sys.prefix), hf_vanilla_transformer.__file__
    assert "CC BY 2.0 FR" in (BUNDLED_CORPUS / "README.md").read_text() and (BUNDLED_CORPUS / "SOURCE_ABOUT.txt").is_file()
    script, output_dir = sys.argv[1], sys.argv[sys.argv.index("--output_dir") + 1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")
    translate = pipeline("translation", model=output_dir)
    print(type(translate).__module__, translate(["Wo ist der Bahnhof?"], max_new_tokens=3))
    assert "Tatoeba" in make_model_card(output_dir, "org/name").text
    """
)


def run(*command, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(list(map(str, command)), capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_the_wheel_holds_every_file_the_package_reads_and_works_in_a_fresh_environment(tmp_path):
    source = tmp_path / "source"  # a copy: building writes build/ and *.egg-info next to the sources
    junk = (".git", ".venv", "__pycache__", "build", "dist", "*.egg-info", ".pytest_cache", ".hypothesis", "outputs")
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*junk, "runs"))
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-q",
        "-w",
        tmp_path,
        source,
    )
    (wheel,) = tmp_path.glob("hf_vanilla_transformer-*.whl")
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
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel)

    work = tmp_path / "work"  # neither the source tree nor this checkout on the path
    work.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    demo = [ROOT / "scripts" / "train_translation.py", "--output_dir", work / "demo", *TINY, "--vocab_size", 200]
    demo += ["--max_steps", 2, "--max_train_samples", 64, "--max_eval_samples", 8, "--max_test_samples", 8]
    demo += ["--eval_strategy", "no", "--save_strategy", "no", "--bf16", "False"]
    result = run(python, "-c", IN_THE_FRESH_ENVIRONMENT, *demo, cwd=work, env=env)
    assert "Trained 2 steps" in result.stdout
    assert "hf_vanilla_transformer.pipeline_translation [{'translation_text'" in result.stdout
