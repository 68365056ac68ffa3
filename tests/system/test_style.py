"""The code is formatted and linted with ruff (configured in pyproject.toml), as `.ci/run` checks on every landing."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT


def ruff(*args: str) -> subprocess.CompletedProcess:
    executable = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if executable is None:
        pytest.skip("ruff is not installed (it is in the `dev` extra: pip install -e '.[dev]')")
    return subprocess.run([executable, *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_passes():
    result = ruff("check", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_leaves_every_file_unchanged():
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


# The files every user reads: the remote-code files a model folder ships, and the package's front.
LINE_BUDGETS = {
    "hf_vanilla_transformer/model/modeling_vanilla_transformer.py": 750,
    "hf_vanilla_transformer/model/configuration_vanilla_transformer.py": 180,
    "hf_vanilla_transformer/__init__.py": 60,
}


@pytest.mark.parametrize("path", LINE_BUDGETS)
def test_the_files_users_read_stay_within_their_line_budgets(path):
    lines = len((ROOT / path).read_text(encoding="utf-8").splitlines())
    assert lines <= LINE_BUDGETS[path], f"{path}: {lines} lines, budget {LINE_BUDGETS[path]}"
