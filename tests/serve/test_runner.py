"""The runner on its own, with a scripted engine on the engine API (`Translator.translate`): the lines of requests
waiting together go to the engine in one call, each request gets exactly its own lines in order, a failing text fails
only its request, abandoned requests are skipped, the text and HTML layouts put translations back where their lines
were."""

import threading

from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.serve.runner import Job, Runner, TranslationFailed
from hf_vanilla_transformer.serve.texts import layout
from hf_vanilla_transformer.translate.io import LineTranslation, TextHypothesis
from hf_vanilla_transformer.translate.options import DecodeOptions
from hf_vanilla_transformer.translate.translator import Batch


class Translator:
    """Translates a line into itself upper-cased; a line with "!" breaks the engine, one with "?" is refused."""

    def __init__(self):
        self.calls = []

    def decoding(self, options):
        return options

    def translate(self, lines, options=None, *, scores=True, on_batch=None, **_):
        self.calls.append(list(lines))
        if any("?" in line for line in lines):
            raise InputError("cannot split '?'")
        if any("!" in line for line in lines):
            raise RuntimeError("a bad sentence")
        on_batch(Batch(len(lines), len(lines), len(lines), len(lines), 0.0))
        return [LineTranslation(line, [TextHypothesis(line.upper(), [], [], None, False)], 1) for line in lines]


def run(requests: list[list[str]], abandon=()):
    """Submit every request before the runner starts (so they wait together); their results, the engine, the
    batches observed."""
    translator, results, done, observed = Translator(), {}, threading.Semaphore(0), []
    runner = Runner(translator, 3000, None, max_wait=0, observe=lambda **kw: observed.append(kw))
    for k, lines in enumerate(requests):
        job = Job(lines, DecodeOptions(), lambda result, k=k: (results.__setitem__(k, result), done.release()))
        job.abandoned = k in abandon
        runner.submit(job)
    runner.start()
    for _ in range(len(requests) - len(abandon)):
        done.acquire()
    runner.stop()
    return results, translator, observed


def texts(result):
    return [t.hypotheses[0].text for t in result]


def test_waiting_requests_share_one_engine_call_and_each_gets_its_own_lines_in_order():
    results, translator, observed = run([["a b", "c"], ["d"], ["e f g"]])
    assert translator.calls == [["a b", "c", "d", "e f g"]]
    assert [texts(results[k]) for k in range(3)] == [["A B", "C"], ["D"], ["E F G"]]
    assert observed == [dict(sentences=4, tokens=4, generated=4, seconds=0.0)]


def test_a_failing_text_fails_only_its_request_and_abandoned_requests_are_skipped():
    results, translator, _ = run([["a b"], ["c !"], ["d"], ["e"], ["?"]], abandon={3})
    assert texts(results[0]) == ["A B"] and texts(results[2]) == ["D"]
    assert isinstance(results[1], TranslationFailed) and results[1].kind == "RuntimeError"
    assert isinstance(results[4], InputError) and 3 not in results
    assert ["c !"] in translator.calls and all("e" not in call for call in translator.calls)


def test_text_and_html_layouts_put_translations_where_their_lines_were():
    lines = []
    text = layout("Hallo Welt\n🙂\n\nWie geht's?", "text", lines)
    page = layout("<p>Tom &amp; Maria <b>lachen</b></p><style>p {}</style>\n<i>!!</i>", "html", lines)
    assert lines == ["Hallo Welt", "Wie geht's?", "Tom & Maria", "lachen"]
    assert text.fill(["Hello world", "How are you?", "", ""]) == "Hello world\n🙂\n\nHow are you?"
    assert page.fill(["", "", "Tom & Mary", "laugh <3"]) == (
        "<p>Tom &amp; Mary <b>laugh &lt;3</b></p><style>p {}</style>\n<i>!!</i>"
    )
