"""The runner on its own, with a scripted engine: the lines of requests waiting together share batches, each request
gets exactly its own lines in order, a failing sentence fails only its request, abandoned requests are skipped, the
text and HTML layouts put translations back where their lines were."""

import threading

from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.serve.runner import Job, Options, Runner, TranslationFailed
from hf_vanilla_transformer.serve.texts import layout
from hf_vanilla_transformer.translate.backends import Hypothesis
from hf_vanilla_transformer.translate.io import LineTranslation, TextHypothesis
from hf_vanilla_transformer.translate.translator import LinePieces


class Engine:
    """Sentence i of a line is token id `ord(first letter)`; its translation is the upper-cased sentence."""

    def __init__(self):
        self.batches = []

    def generate(self, sources, limits, scores=False, seed=0):
        self.batches.append([chr(ids[0]) for ids in sources])
        if [ord("!")] in sources:
            raise RuntimeError("a bad sentence")
        return [[Hypothesis(ids, [], False)] for ids in sources]


class Translator:
    def __init__(self):
        self.backend = Engine()

    def encode(self, lines):
        if "?" in lines:
            raise InputError("cannot split '?'")
        pieces = [line.split() for line in lines]
        return [LinePieces([""] + [" "] * (len(p) - 1), p, [[ord(w[0])] for w in p], 0) for p in pieces]

    def limit(self, length):
        return 10

    def decode(self, lines, encoded, parts):
        return [
            LineTranslation(line, [TextHypothesis(" ".join(p.texts).upper(), [], [], None, False)], len(p.texts))
            for line, p in zip(lines, encoded)
        ]


def run(requests: list[list[str]], max_tokens=3000, abandon=()):
    """Submit every request before the runner starts (so they wait together); their results, and the engine."""
    translator, results, done = Translator(), {}, threading.Semaphore(0)
    runner = Runner(lambda options: translator, max_tokens, None, max_wait=0)
    for k, lines in enumerate(requests):
        job = Job(lines, Options(), lambda result, k=k: (results.__setitem__(k, result), done.release()))
        job.abandoned = k in abandon
        runner.submit(job)
    runner.start()
    for _ in range(len(requests) - len(abandon)):
        done.acquire()
    runner.stop()
    return results, translator.backend


def texts(result):
    return [t.hypotheses[0].text for t in result]


def test_waiting_requests_share_batches_and_each_gets_its_own_lines_in_order():
    results, engine = run([["a b", "c"], ["d"], ["e f g"]])
    assert engine.batches == [["a", "b", "c", "d", "e", "f", "g"]]
    assert [texts(results[k]) for k in range(3)] == [["A B", "C"], ["D"], ["E F G"]]
    _, engine = run([["a b", "c"], ["d"]], max_tokens=2)  # translate's budget cuts the batches
    assert sorted(map(len, engine.batches)) == [2, 2]


def test_a_failing_sentence_fails_only_its_request_and_abandoned_requests_are_skipped():
    results, engine = run([["a b"], ["c !"], ["d"], ["e"], ["?"]], abandon={3})
    assert texts(results[0]) == ["A B"] and texts(results[2]) == ["D"]
    assert isinstance(results[1], TranslationFailed) and results[1].kind == "RuntimeError"
    assert isinstance(results[4], InputError) and 3 not in results
    assert ["c", "!"] in engine.batches and all("e" not in batch for batch in engine.batches)


def test_text_and_html_layouts_put_translations_where_their_lines_were():
    lines = []
    text = layout("Hallo Welt\n🙂\n\nWie geht's?", "text", lines)
    page = layout("<p>Tom &amp; Maria <b>lachen</b></p><style>p {}</style>\n<i>!!</i>", "html", lines)
    assert lines == ["Hallo Welt", "Wie geht's?", "Tom & Maria", "lachen"]
    assert text.fill(["Hello world", "How are you?", "", ""]) == "Hello world\n🙂\n\nHow are you?"
    assert page.fill(["", "", "Tom & Mary", "laugh <3"]) == (
        "<p>Tom &amp; Mary <b>laugh &lt;3</b></p><style>p {}</style>\n<i>!!</i>"
    )
