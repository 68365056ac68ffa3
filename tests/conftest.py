"""Settings for every test: offline (tests never reach the Hugging Face Hub), and a fixed seed per test.

Shared helpers live in `tests/helpers.py`; nothing imports this file.
"""

import os


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
