"""Settings for every test: offline (tests never reach the Hugging Face Hub), one torch thread, and a fixed seed per
test.

Shared helpers live in `tests/helpers.py`; nothing imports this file.
"""

import os


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402


# One torch thread in the test process (commands run in new processes keep torch's default): the suite's models are
# tiny, so a second thread gains nothing, and on a CPU shared with other work each operation's idle threads spin (a
# training test of one second took 80 seconds beside another busy process).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    torch.manual_seed(0)
    yield
    torch.set_num_threads(1)  # a test that set more threads (translate's --threads) leaves the next one on one
