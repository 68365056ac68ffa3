"""`python -m scripts.data_scaling` on a tiny size: the generated corpus, both runs through the training command's data
steps to the first optimizer step, and the second run taking everything from the cache. Behaviour only, no timings."""

import json

import pytest

from scripts import data_scaling


def test_the_generated_corpus_is_deterministic_aligned_and_made_of_bundled_pairs(tmp_path):
    first = data_scaling.generate_corpus(250, tmp_path / "a")
    again = data_scaling.generate_corpus(250, tmp_path / "b")
    other = data_scaling.generate_corpus(250, tmp_path / "c", seed=1)
    texts = [path.read_text(encoding="utf-8") for path in first]
    assert texts == [path.read_text(encoding="utf-8") for path in again]
    assert texts != [path.read_text(encoding="utf-8") for path in other]
    de, en = (text.splitlines() for text in texts)
    assert len(de) == len(en) == 250
    bundled = data_scaling.bundled_pairs()
    known = dict(zip(bundled["de"], bundled["en"]))

    def pieces(source: str, target: str) -> int:
        """How many bundled pairs, joined by spaces on both sides and in the same order, make the pair (0: none)."""
        if known.get(source) == target:
            return 1
        for cut in (i for i, c in enumerate(source) if c == " " and source[:i] in known):
            first = known[source[:cut]]
            if target.startswith(first + " ") and (rest := pieces(source[cut + 1 :], target[len(first) + 1 :])):
                return 1 + rest
        return 0

    counts = [pieces(source, target) for source, target in zip(de, en)]
    assert set(counts) == {1, 2, 3}
    (tsv,) = data_scaling.generate_corpus(250, tmp_path / "d", tsv=True)
    lines = tsv.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "de\ten" and lines[1:] == [f"{s}\t{t}" for s, t in zip(de, en)]


@pytest.mark.slow
def test_the_benchmark_runs_twice_and_the_second_run_reuses_every_cached_step(tmp_path):
    summary = data_scaling.main(["--sizes", "300", "--workdir", str(tmp_path), "--json", str(tmp_path / "out.json")])
    assert json.loads((tmp_path / "out.json").read_text()) == summary
    (row,) = summary["rows"]
    assert row["pairs"] == 300 and summary["cpu"]
    for run in ("first", "second"):
        assert list(row[run])[:5] == list(data_scaling.STAGES)
        assert 0 < row[run]["peak_pss_gb"] and 0 < row[run]["peak_main_rss_gb"]
    cache = tmp_path / "300" / "cache" / "hf_vanilla_transformer"
    files = [path.name for path in (cache / "corpora").glob("*.arrow")]
    assert len([name for name in files if not name.startswith("cache-")]) == 1  # read once
    assert len([name for name in files if name.startswith("cache-")]) == 1  # tokenized once
    assert len([path for path in (cache / "tokenizers").iterdir() if path.is_dir()]) == 1  # trained once
