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
