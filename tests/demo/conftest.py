"""The demos' shared fixtures: the trained tiny translator both pages serve, and that model loaded apart from the
pages to compute what they must answer."""

import pytest
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from tests.helpers import tiny_translator_dir


@pytest.fixture(scope="module")
def model_dir():
    return tiny_translator_dir()


@pytest.fixture(scope="module")
def reference(model_dir):
    return AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)
