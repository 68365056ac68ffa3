"""`python -m scripts.terminology_benchmark`'s test set: a glossary from the training split's lexical table, and test
lines whose references use every term that applies to them (or to which none applies)."""

import re

import pytest

from scripts import terminology_benchmark as benchmark


pytestmark = pytest.mark.slow  # an IBM Model 1 table of the training split


def test_the_test_set_has_300_lines_whose_references_use_their_terms_and_lines_without_any():
    glossary = benchmark.build_glossary(benchmark.read_pairs("train"), 0.5, 5, 150)
    with_terms, without = benchmark.split_test(glossary, benchmark.read_pairs("test"))
    assert len(with_terms) >= 300 and len(without) >= 300
    for source, reference, targets in with_terms:
        assert targets == glossary.targets(source)
        assert all(re.search(rf"(?<!\w){re.escape(t)}(?!\w)", reference) for t in targets)
    assert not any(glossary.targets(source) for source, _, _ in without)
    sources = {source.lower() for source, _ in glossary.terms}
    assert len(sources) == len(glossary) and not {"der", "die", "das", "ist", "nicht"} & sources  # no function words
