"""Settings for every test: offline (tests never reach the Hugging Face Hub), one torch thread, and a fixed seed per
test.

Shared helpers live in `tests/helpers.py`; nothing imports this file.
"""

import logging
import os


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402


PACKAGE = "hf_vanilla_transformer"


# One torch thread in the test process (commands run in new processes keep torch's default): the suite's models are
# tiny, so a second thread gains nothing, and on a CPU shared with other work each operation's idle threads spin (a
# training test of one second took 80 seconds beside another busy process).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    torch.manual_seed(0)
    yield
    torch.set_num_threads(1)  # a test that set more threads (translate's --threads) leaves the next one on one


def _package_logging() -> tuple:
    loggers = [lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    states = {
        lg.name: (lg.disabled, lg.propagate, lg.level, lg.filters, lg.isEnabledFor(logging.WARNING))
        for lg in loggers
        if lg.name.startswith(PACKAGE)
    }
    changed = {name: state for name, state in states.items() if state != (False, True, logging.NOTSET, [], True)}
    return logging.root.level, logging.root.manager.disable, changed


@pytest.fixture(autouse=True)
def _logging_left_as_found():
    """The package's log records reach pytest's caplog only while no test has silenced them: one that left a logger
    disabled, detached or raised would fail every later caplog assertion in its process, far from the cause."""
    before = _package_logging()
    yield
    assert _package_logging() == before, "this test (or a module it imported first) changed logging for later tests"
