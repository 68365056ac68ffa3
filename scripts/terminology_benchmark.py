#!/usr/bin/env python
"""Glossaries measured: a terminology test set built from the bundled corpus as the WMT 2021 terminology task built
its own, and a model's translations of it with and without the glossary.

    python -m scripts.terminology_benchmark --model outputs/demo-de-en --output_json terminology.json

The test set. A lexical table of the training split (IBM Model 1 over words, `data.vocabulary_map`'s EM, lowercased)
gives each German word its most probable English word; the glossary holds the pairs whose probability is at least
--min_probability, both words seen at least --min_count times and outside each side's --skip_frequent most frequent
words, each written as the training split most often writes it. A line of the test split is a line with terms where
the glossary applies to it and its reference uses every target term the glossary calls for (whole words, case as
written); a line without terms where the glossary applies to nothing; the other lines (the glossary applies, the
reference says otherwise) are left out. The settings are fixed beforehand, not chosen on the test split.

The model translates both sets with its own decoding settings (beam 4 for the demo), each line one sentence, with
and without the glossary. Reported: term use (the share of (line, target term) pairs whose term appears in the
translation, case as written) with and without; BLEU and chrF on the lines with terms, with and without; the lines
without terms translated identically; sentences per second with the glossary against without, on each set (the
median of --repeats timings each, taken in turns, in one process, after a warm-up). Targets: term use 100% with
the glossary; BLEU and chrF higher with it; every line without terms identical; speed at least 0.5x on the lines with
terms and 0.95x on the others.
"""

import argparse
import collections
import json
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from hf_vanilla_transformer.data.corpus import BUNDLED_CORPUS
from hf_vanilla_transformer.data.glossary import Glossary
from hf_vanilla_transformer.data.vocabulary_map import lexical_probabilities
from hf_vanilla_transformer.training.metrics import corpus_scores
from hf_vanilla_transformer.training.report import cpu_model
from hf_vanilla_transformer.translate.options import DecodeOptions, EngineOptions, default_threads
from hf_vanilla_transformer.translate.translator import load_translator


WORD = re.compile(r"\w+")


def read_pairs(split: str) -> list[tuple[str, str]]:
    lines = (BUNDLED_CORPUS / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
    return [(pair["de"], pair["en"]) for pair in (json.loads(line)["translation"] for line in lines)]


def build_glossary(pairs, min_probability: float, min_count: int, skip_frequent: int) -> Glossary:
    """The word pairs of the lexical table that the module's docstring describes."""
    sides = [[WORD.findall(text) for text in texts] for texts in zip(*pairs)]
    counts = [collections.Counter(w.lower() for words in side for w in words) for side in sides]
    surface = [collections.Counter(w for words in side for w in words) for side in sides]
    # German and English words in one id space (a word of both languages twice); 0 is the empty source word.
    vocabulary = ["<null>", *sorted(counts[0]), *sorted(counts[1])]
    ids = [{w: 1 + i for i, w in enumerate(sorted(counts[0]))}]
    ids.append({w: 1 + len(ids[0]) + i for i, w in enumerate(sorted(counts[1]))})
    german, english = ([[ids[side][w.lower()] for w in words] for words in sides[side]] for side in (0, 1))
    sources, targets, probabilities = lexical_probabilities(german, english, 0, len(vocabulary))
    frequent = [{w for w, _ in c.most_common(skip_frequent)} for c in counts]
    best = {}
    for f, e, p in zip(sources.tolist(), targets.tolist(), probabilities.tolist()):
        if f and p > best.get(f, (0, 0.0))[1]:
            best[f] = (e, p)
    written = [{}, {}]  # the most frequent surface form of each lowercased word
    for side, forms in enumerate(surface):
        for form, _ in forms.most_common():
            written[side].setdefault(form.lower(), form)
    terms = []
    for f, (e, p) in sorted(best.items()):
        source, target = vocabulary[f], vocabulary[e]
        if p < min_probability or min(counts[0][source], counts[1][target]) < min_count:
            continue
        if source in frequent[0] or target in frequent[1] or len(source) < 4 or len(target) < 3:
            continue
        terms.append((written[0][source], written[1][target]))
    return Glossary.of_pairs(terms, name="terminology")


def whole_word(term: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", text) is not None


def split_test(glossary: Glossary, pairs) -> tuple[list, list]:
    with_terms, without = [], []
    for source, reference in pairs:
        targets = glossary.targets(source)
        if not targets:
            without.append((source, reference, []))
        elif all(whole_word(t, reference) for t in targets):
            with_terms.append((source, reference, targets))
    return with_terms, without


def timed(translator, lines, options):
    start = time.perf_counter()
    results = translator.translate(lines, options, scores=False)
    return [r.hypotheses[0].text for r in results], time.perf_counter() - start


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a trained German->English model folder")
    parser.add_argument("--min_probability", type=float, default=0.5)
    parser.add_argument("--min_count", type=int, default=5)
    parser.add_argument("--skip_frequent", type=int, default=150)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--repeats", type=int, default=3, help="timings of each, in turns; the median reported")
    parser.add_argument("--glossary_out", help="also write the glossary here (TSV)")
    parser.add_argument("--output_json", help="also write the results here")
    args = parser.parse_args(argv)

    glossary = build_glossary(read_pairs("train"), args.min_probability, args.min_count, args.skip_frequent)
    if args.glossary_out:
        Path(args.glossary_out).write_text(
            "source\ttarget\n" + "".join(f"{s}\t{t}\n" for s, t in glossary.terms), encoding="utf-8"
        )
    with_terms, without = split_test(glossary, read_pairs("test"))
    translator = load_translator(args.model, EngineOptions(threads=args.threads))
    plain = DecodeOptions(split_sentences=False)
    constrained = DecodeOptions(split_sentences=False, glossary=glossary)
    translator.translate([s for s, _, _ in with_terms[:16]], constrained)  # warm-up
    results = dict(
        cpu=cpu_model(),
        model=Path(args.model).name,
        threads=args.threads,
        glossary_terms=len(glossary),
        lines_with_terms=len(with_terms),
        lines_without_terms=len(without),
        applicable_terms=sum(len(t) for _, _, t in with_terms),
    )
    for name, lines in (("with_terms", with_terms), ("without_terms", without)):
        sources = [s for s, _, _ in lines]
        runs = {plain: [], constrained: []}
        for repeat in range(args.repeats):  # in turns, the other first each time
            for options in (plain, constrained) if repeat % 2 == 0 else (constrained, plain):
                runs[options].append(timed(translator, sources, options))
        (before, _), (after, _) = runs[plain][0], runs[constrained][0]
        seconds_before, seconds_after = (statistics.median(s for _, s in runs[o]) for o in (plain, constrained))
        row = dict(
            sentences_per_second_without_glossary=round(len(lines) / seconds_before, 2),
            sentences_per_second_with_glossary=round(len(lines) / seconds_after, 2),
            speed_ratio=round(seconds_before / seconds_after, 3),
        )
        if name == "with_terms":
            for label, hypotheses in (("without_glossary", before), ("with_glossary", after)):
                used = [t in h for (_, _, terms), h in zip(lines, hypotheses) for t in terms]
                scores = corpus_scores(hypotheses, [r for _, r, _ in lines])
                row[label] = dict(
                    term_use_percent=round(100 * float(np.mean(used)), 2),
                    bleu=round(scores["bleu"], 2),
                    chrf=round(scores["chrf"], 2),
                )
        else:
            row["identical_lines"] = sum(a == b for a, b in zip(before, after))
        results[name] = row
        print(f"{name}: {row}", file=sys.stderr)
    print(json.dumps(results, indent=1))
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
