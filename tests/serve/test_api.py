"""The server's API against a real server process on a loopback port: LibreTranslate's routes through the
`libretranslatepy` client and raw JSON, form and multipart bodies, the native route, concurrent requests each
answered as `translate` answers its text, and every malformed request a 4xx JSON error naming the field."""

import http.client
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from hf_vanilla_transformer.data.glossary import Glossary
from hf_vanilla_transformer.translate.options import DecodeOptions
from hf_vanilla_transformer.translate.translator import load_translator, translate_lines
from tests.helpers import SENTENCES, run_command, running_server, serving_model_dir


GERMAN = SENTENCES[0::2]
# The training sentences, new combinations of their words, and several sentences on a line.
TEXTS = [*GERMAN, "Tom hat Hunger.", "Wo ist Tom?", "Das ist schön.", "Wer ist hier?", "Ich habe Hunger. Wo ist Tom?"]


@pytest.fixture(scope="module")
def model_dir():
    return serving_model_dir()


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "server.log"
    with running_server("--model", model_dir, "--max_texts", 8, "--max_chars", 2000, log=log) as server:
        yield server


@pytest.fixture(scope="module")
def expected(model_dir):
    """translate's output for each line of TEXTS, with the server's settings (the model's, the folder's language)."""
    translator = load_translator(str(model_dir))
    return {t.source: [h.text for h in t.hypotheses] for t in translate_lines(TEXTS, translator)}


def post(server, path, **kwargs) -> httpx.Response:
    return httpx.post(server.url + path, timeout=120, **kwargs)


def test_the_libretranslatepy_client_works_unchanged(server, expected):
    from urllib.error import HTTPError

    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url)
    assert client.translate(GERMAN[0], "de", "en") == expected[GERMAN[0]][0]
    assert client.languages() == [
        {"code": "de", "name": "German", "targets": ["en"]},
        {"code": "en", "name": "English", "targets": []},
    ]
    assert client.detect("Ich habe heute keine Zeit.")[0]["language"] == "de"
    with pytest.raises(HTTPError) as refused:
        client.translate("Where is the station?", "auto", "en")
    assert refused.value.code == 400
    assert json.loads(refused.value.read())["error"].startswith("en is not supported: the text is detected as English")


def test_libretranslates_own_detection_tests_pass(server):
    """LibreTranslate's tests/test_api/test_api_detect_language.py, against this server."""
    hello = post(server, "/detect", data={"q": "Hello"})
    assert hello.status_code == 200 and len(hello.json()) >= 1
    assert "confidence" in hello.json()[0] and "language" in hello.json()[0]
    nothing = post(server, "/detect")
    assert nothing.status_code == 400 and "error" in nothing.json()
    assert httpx.get(server.url + "/detect").status_code == 405
    batch = post(server, "/detect", json={"q": ["This is an English sentence", "Esta es una oración en español"]})
    assert batch.status_code == 200 and isinstance(batch.json(), list) and len(batch.json()) >= 1
    english = post(server, "/detect", json={"q": "This is an English sentence for detection"})
    assert english.status_code == 200 and english.json()[0]["language"] == "en"
    for candidate in english.json():
        assert set(candidate) == {"language", "confidence"} and 0 <= candidate["confidence"] <= 100


def test_auto_translates_what_is_in_the_models_language_and_names_any_other(server, expected):
    german = "Ich habe Hunger. Wo ist Tom?"
    answer = post(server, "/translate", json={"q": [german, "🙂"], "source": "auto", "target": "en"}).json()
    assert answer["translatedText"] == [expected[german][0], "🙂"]
    (found, nothing) = answer["detectedLanguage"]
    assert found["language"] == "de" and found["confidence"] > 90 and nothing == {"confidence": 0.0, "language": "de"}
    french = post(
        server, "/translate", data={"q": "Où est la gare ? Je ne sais pas.", "source": "auto", "target": "en"}
    )
    assert french.status_code == 400
    error = french.json()["error"]
    assert error.startswith("fr is not supported: the text is detected as French (fr, confidence"), error
    assert error.endswith("this server translates from German (de) only"), error


def test_json_form_and_multipart_bodies_give_the_same_answers(server, expected):
    text = TEXTS[-1]
    fields = {"q": text, "source": "de", "target": "en"}
    answers = [
        post(server, "/translate", json=fields),
        post(server, "/translate", data=fields),
        post(server, "/translate", files={name: (None, value) for name, value in fields.items()}),
        post(server, "/translate", params=fields),  # the query string, as LibreTranslate's request.values
    ]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"translatedText": expected[text][0]}
    listed = post(server, "/translate", json={**fields, "q": TEXTS[:3]})
    assert listed.json() == {"translatedText": [expected[t][0] for t in TEXTS[:3]]}
    umlaut = "Das ist schön."  # UTF-8 form bodies as curl -d sends them (raw) and as browsers do (percent-encoded)
    for body in (f"q={umlaut}&source=de&target=en".encode(), b"q=Das+ist+sch%C3%B6n.&source=de&target=en"):
        answer = post(
            server, "/translate", content=body, headers={"content-type": "application/x-www-form-urlencoded"}
        )
        assert answer.status_code == 200 and answer.json() == {"translatedText": expected[umlaut][0]}, answer.text
    repeated = post(server, "/translate", content=b"q=Wo+ist+Tom%3F&q=Tom+hat+Hunger.&source=de&target=en")
    assert repeated.json() == {"translatedText": [expected["Wo ist Tom?"][0], expected["Tom hat Hunger."][0]]}


def test_alternatives_auto_lines_html_and_text_with_nothing_to_translate(server, expected, model_dir):
    first, second = GERMAN[0], GERMAN[1]
    answer = post(server, "/translate", json={"q": first, "source": "auto", "target": "en", "alternatives": 2}).json()
    translator = load_translator(str(model_dir))
    (alone,) = translate_lines([first], translator, DecodeOptions(nbest=3))  # the request's batch: it alone
    best, *others = [h.text for h in alone.hypotheses]
    assert answer["translatedText"] == best
    assert answer["detectedLanguage"]["language"] == "de"
    assert answer["alternatives"] == [t for t in dict.fromkeys(others) if t != best]
    lines = post(server, "/translate", data={"q": f"{first}\r\n\n{second}", "source": "de", "target": "en"}).json()
    assert lines["translatedText"] == f"{expected[first][0]}\n\n{expected[second][0]}"
    page = f"<p class='x'>{first} <b>{second}</b></p><script>var a = '{first}';</script> &amp; 🙂"
    html = post(server, "/translate", json={"q": page, "source": "de", "target": "en", "format": "html"}).json()
    first_en, second_en = (expected[t][0].replace("&", "&amp;").replace("<", "&lt;") for t in (first, second))
    assert (
        html["translatedText"]
        == f"<p class='x'>{first_en} <b>{second_en}</b></p><script>var a = '{first}';</script> &amp; 🙂"
    )
    for untouched in ("🙂", "  ", "!!! ..."):
        answer = post(server, "/translate", json={"q": [untouched], "source": "de", "target": "en"}).json()
        assert answer == {"translatedText": [untouched]}


def test_the_native_route_returns_translates_records_with_scores(server, model_dir):
    answer = post(server, "/v1/translate", json={"texts": [GERMAN[0], "", GERMAN[2]], "nbest": 2})
    assert answer.status_code == 200, answer.text
    translator = load_translator(str(model_dir))
    reference = list(translate_lines([GERMAN[0], "", GERMAN[2]], translator, DecodeOptions(nbest=2)))
    records = answer.json()["translations"]
    assert [r["source"] for r in records] == [GERMAN[0], "", GERMAN[2]]
    for record, translation in zip(records, reference):
        assert [h["text"] for h in record["hypotheses"]] == [h.text for h in translation.hypotheses]
        assert [h["tokens"] for h in record["hypotheses"]] == [h.tokens for h in translation.hypotheses]
        assert all(h["score"] is not None and len(h["token_scores"]) == len(h["tokens"]) for h in record["hypotheses"])
    greedy = post(server, "/v1/translate", json={"texts": [GERMAN[3]], "num_beams": 1, "split_sentences": False})
    alone = next(translate_lines([GERMAN[3]], translator, DecodeOptions(num_beams=1, split_sentences=False)))
    assert greedy.json()["translations"][0]["hypotheses"][0]["text"] == alone.hypotheses[0].text


def test_a_hundred_concurrent_requests_each_get_translates_answer_for_its_text(server, expected):
    requests = [TEXTS[i % len(TEXTS)] for i in range(100)]

    def ask(text):
        return post(server, "/translate", json={"q": text, "source": "de", "target": "en"})

    with ThreadPoolExecutor(100) as pool:
        answers = list(pool.map(ask, requests))
    assert [a.status_code for a in answers] == [200] * 100
    assert [a.json()["translatedText"] for a in answers] == [expected[t][0] for t in requests]
    metrics = httpx.get(server.url + "/metrics").text
    assert 'translation_requests_total{route="/translate",status="200"}' in metrics
    assert "translation_batch_sentences_count" in metrics and "translation_queue_depth 0.0" in metrics


@pytest.mark.slow
def test_an_idle_connection_outlives_the_clients_own_idle_expiry(server):
    """httpx keeps an idle connection for 5 s, as uvicorn did by default: a server closing it as the client sends a
    request on it loses the request. The server leaves the closing to the client."""
    assert httpx.Limits().keepalive_expiry == 5.0  # the clients' expiry this guards against
    connection = http.client.HTTPConnection(httpx.URL(server.url).host, httpx.URL(server.url).port, timeout=30)
    try:
        connection.request("GET", "/health")
        assert connection.getresponse().read() == b'{"status":"ok"}'
        first = connection.sock
        time.sleep(httpx.Limits().keepalive_expiry + 1)
        connection.request("GET", "/health")  # a closed connection: http.client.RemoteDisconnected
        assert connection.getresponse().status == 200 and connection.sock is first  # the same connection, still open
    finally:
        connection.close()


def test_health_languages_and_metrics(server):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    assert httpx.get(server.url + "/languages").status_code == 200
    metrics = httpx.get(server.url + "/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    for name in ("translation_request_duration_seconds_bucket", "translation_tokens_per_second"):
        assert name in metrics.text


LIBRE = {"q": "Wo ist Tom?", "source": "de", "target": "en"}
FORM = {"content-type": "application/x-www-form-urlencoded"}
BAD_REQUESTS = [
    # (route, body keyword arguments, status, words the error must hold)
    ("/translate", dict(content=b'{"q": "Hallo"', headers={"content-type": "application/json"}), 400, "JSON"),
    ("/translate", dict(content=b"[1, 2]", headers={"content-type": "application/json"}), 400, "Invalid JSON format"),
    (
        "/translate",
        dict(content=json.dumps(LIBRE).encode(), headers=FORM),
        400,
        "Content-Type is application/x-www-form",
    ),
    ("/translate", dict(content=json.dumps(LIBRE).encode(), headers={"content-type": ""}), 400, "no Content-Type"),
    ("/translate", dict(content=b"q=\xff&source=de&target=en"), 400, "UTF-8"),
    ("/translate", dict(content=b'{"q": "\xff"}', headers={"content-type": "application/json"}), 400, "UTF-8"),
    ("/translate", dict(content=b"q=%FF&source=de&target=en"), 400, "UTF-8"),
    ("/translate", dict(json={**LIBRE, "q": ""}), 400, "missing q parameter"),
    ("/translate", dict(json={**LIBRE, "q": []}), 400, "missing q parameter"),
    ("/translate", dict(json={"source": "de", "target": "en"}), 400, "missing q parameter"),
    ("/translate", dict(data={"q": "Hallo", "target": "en"}), 400, "missing source parameter"),
    ("/translate", dict(json={"q": "Hallo", "source": "de"}), 400, "missing target parameter"),
    ("/translate", dict(json={**LIBRE, "q": 3}), 400, "q must be"),
    ("/translate", dict(json={**LIBRE, "q": ["Hallo", None]}), 400, "q[1] must be a string"),
    ("/translate", dict(json={**LIBRE, "source": ["de"]}), 400, "source must be a string"),
    ("/translate", dict(json={**LIBRE, "source": "zz"}), 400, "zz is not supported"),
    ("/translate", dict(json={**LIBRE, "target": "fr"}), 400, "fr is not supported"),
    ("/translate", dict(json={**LIBRE, "format": "pdf"}), 400, "pdf format is not supported"),
    ("/translate", dict(json={**LIBRE, "alternatives": "many"}), 400, "alternatives parameter is not a number"),
    ("/translate", dict(json={**LIBRE, "alternatives": 9}), 400, "alternatives parameter must be <= 3"),
    ("/translate", dict(json={**LIBRE, "q": ["Hallo"] * 9}), 400, "exceeds text limit (8)"),
    ("/translate", dict(json={**LIBRE, "q": "Hallo " * 400}), 413, "exceeds text limit (2000)"),
    ("/translate", dict(content=b"q=" + b"a" * 100_000), 413, "size limit"),
    ("/detect", dict(json={}), 400, "missing q parameter"),
    ("/v1/translate", dict(json={"q": ["Hallo"]}), 400, "unknown field 'q'"),
    ("/v1/translate", dict(json={"texts": "Hallo"}), 400, "texts must be a non-empty list"),
    ("/v1/translate", dict(json={"texts": ["Hallo", 1]}), 400, "texts[1] must be a string"),
    ("/v1/translate", dict(json={"texts": ["Hallo\nTom"]}), 400, "texts[0] holds a line break"),
    ("/v1/translate", dict(json={"texts": ["Hallo"], "num_beams": 0}), 400, "num_beams must be between 1 and 8"),
    ("/v1/translate", dict(json={"texts": ["Hallo"], "num_beams": 2.5}), 400, "num_beams must be a whole number"),
    ("/v1/translate", dict(json={"texts": ["Hallo"], "nbest": 5}), 400, "nbest (5) must be at most num_beams (4)"),
    ("/v1/translate", dict(json={"texts": ["Hallo"], "length_penalty": "x"}), 400, "length_penalty must be a number"),
    ("/v1/translate", dict(json={"texts": ["Hallo"], "split_sentences": "yes"}), 400, "split_sentences must be"),
    ("/translate", dict(json={**LIBRE, "glossary": "Hallo=Hi"}), 400, "glossary must be a list of {source, target}"),
    ("/translate", dict(json={**LIBRE, "glossary": []}), 400, "glossary must be a non-empty list"),
    ("/translate", dict(json={**LIBRE, "glossary": [{"source": "Tom"}]}), 400, "glossary[0] must be an object with"),
    (
        "/v1/translate",
        dict(json={"texts": ["Hallo"], "glossary": [{"source": "", "target": "x"}]}),
        400,
        "glossary[0]",
    ),
    (
        "/v1/translate",
        dict(json={"texts": ["Hallo"], "glossary": [{"source": f"w{i}", "target": "x"} for i in range(101)]}),
        400,
        "glossary has 101 terms, more than the limit (100)",
    ),
    (
        "/v1/translate",
        dict(
            json={"texts": ["Hallo"], "glossary": [{"source": "Tom", "target": "a"}, {"source": "Tom", "target": "b"}]}
        ),
        400,
        "glossary[1]: 'Tom' is given the target 'b', and 'a' at glossary[0]",
    ),
    ("/nowhere", dict(json={}), 404, "Not Found"),
]


def test_every_malformed_request_gets_a_json_error_naming_the_field_and_one_log_line(server):
    before = server.output().count("\n")
    for route, body, status, words in BAD_REQUESTS:
        answer = post(server, route, **body)
        assert answer.status_code == status, (route, body, answer.text)
        error = answer.json()["error"]
        assert words in error, (route, body, error)
        assert "Traceback" not in error and "/" not in re.sub(r"/v1|application/[\w.+-]+", "", error)  # no path
    not_an_object = post(server, "/translate", json=[LIBRE])
    assert not_an_object.json() == {"error": "Invalid JSON format"}  # LibreTranslate's exact words
    assert httpx.get(server.url + "/translate").status_code == 405
    assert httpx.post(server.url + "/languages").json() == {"error": "Method Not Allowed"}
    logged = server.output().splitlines()[before:]
    errors = [line for line in logged if " -> 4" in line]
    assert len(errors) == len(BAD_REQUESTS) + 3, "\n".join(logged)
    assert not any("Traceback" in line for line in logged)


def test_a_server_whose_port_is_taken_never_says_it_is_ready(model_dir):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = run_command("serve", "--model", model_dir, "--port", taken.getsockname()[1], timeout=300)
    assert done.returncode != 0
    assert "address already in use" in done.stderr.lower(), done.stderr
    assert not re.search(r"\bready\b", done.stderr, re.IGNORECASE), done.stderr


def test_a_requests_glossary_holds_for_it_alone_and_the_servers_for_the_others(model_dir, tmp_path):
    """Requests with and without their own glossary, at once: each is answered as `translate` answers its text with
    its glossary (the server's where it gives none), so no request's terms reach another's translation."""
    (tmp_path / "server.tsv").write_text("Hunger\thungry\n", encoding="utf-8")
    own = [{"source": "Tom", "target": "Tom today"}]
    translator = load_translator(str(model_dir))
    server_glossary = Glossary.read(tmp_path / "server.tsv")
    expected = {
        name: [t.hypotheses[0].text for t in translator.translate(TEXTS, DecodeOptions(glossary=glossary))]
        for name, glossary in (("server", server_glossary), ("own", Glossary.of_pairs([("Tom", "Tom today")])))
    }
    assert expected["server"] != expected["own"]
    log = tmp_path / "server.log"
    with running_server("--model", model_dir, "--glossary", tmp_path / "server.tsv", log=log) as server:

        def ask(i):
            body = {"q": TEXTS[i % len(TEXTS)], "source": "de", "target": "en"}
            return i, post(server, "/translate", json=body | ({"glossary": own} if i % 2 else {})).json()

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, range(40)))
    for i, answer in answers:
        assert answer["translatedText"] == expected["own" if i % 2 else "server"][i % len(TEXTS)], (i, answer)
    assert any("hungry" in text for text in expected["server"]) and any("Tom today" in t for t in expected["own"])
