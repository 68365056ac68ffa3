"""`python -m scripts.before_after`: an earlier commit's model room loaded beside today's, same weights and outputs."""

import subprocess

import pytest

from scripts import before_after
from tests.helpers import ROOT


def is_git_checkout() -> bool:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not is_git_checkout(), reason="needs the git history: run from a git clone")
def test_the_committed_model_room_gives_todays_outputs(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert before_after.main(["--before", "HEAD", "--size", "tiny", "--repeats", "1", "--threads", "1"])
    output = capsys.readouterr().out
    assert "beam-4 outputs identical: True" in output
    assert {line.split()[0] for line in output.splitlines()[2:]} == {"train", "greedy", "beam4"}
