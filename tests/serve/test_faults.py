"""Faults and load against a real server process whose engine has planted faults (`faulty_server.py`): a failing
batch fails only its own request, a full queue answers 503, a request past its time 504, and SIGTERM answers every
request in flight before the process exits with 0. The tests wait on files and the server's own counts, never on
durations."""

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from hf_vanilla_transformer.translate.translator import load_translator, translate_lines
from tests.helpers import SENTENCES, running_server, serving_model_dir
from tests.serve.faulty_server import BLOCK, POISON


GERMAN = SENTENCES[0::2]


def faulty_server(tmp_path, *args):
    gate = tmp_path / "gate"
    gate.mkdir()
    arguments = ["--model", serving_model_dir(), *args]
    server = running_server(
        *arguments, module="tests.serve.faulty_server", env={"SERVE_GATE": str(gate)}, log=tmp_path / "server.log"
    )
    return server, gate


def translate(url, text, **fields):
    return httpx.post(f"{url}/translate", json={"q": text, "source": "de", "target": "en", **fields}, timeout=300)


def wait_for(condition, what: str, limit: float = 300):
    """Until `condition()` holds (a bound against a hang, not a timing the test depends on)."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"waited too long for {what}"
        time.sleep(0.01)


def refused(url) -> bool:
    """No answer: the connection refused, or reset when it reached the listening socket as it closed."""
    try:
        httpx.get(f"{url}/health")
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
        return True
    return False


def queue_depth(url) -> float:
    metrics = httpx.get(f"{url}/metrics").text
    return float(next(line.split()[1] for line in metrics.splitlines() if line.startswith("translation_queue_depth ")))


@pytest.fixture(scope="module")
def expected():
    translator = load_translator(str(serving_model_dir()))
    return {t.source: t.hypotheses[0].text for t in translate_lines(GERMAN, translator)}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server with a queue of 2 requests, for the tests that release what they block."""
    server, gate = faulty_server(tmp_path_factory.mktemp("faulty"), "--max_queue", 2)
    with server as server:
        server.gate = gate
        yield server


def test_a_failing_batch_fails_only_its_request_and_the_server_goes_on(server, expected):
    with ThreadPoolExecutor(2) as pool:
        texts = [POISON, *GERMAN, f"{GERMAN[0]} {POISON}", *GERMAN]
        answers = list(pool.map(lambda text: translate(server.url, text), texts))
        for text, answer in zip(texts, answers):
            if POISON in text:
                assert answer.status_code == 500
                assert answer.json() == {"error": "Cannot translate text: RuntimeError in the translation engine"}
            else:
                assert answer.status_code == 200 and answer.json()["translatedText"] == expected[text]
        assert translate(server.url, GERMAN[1]).json()["translatedText"] == expected[GERMAN[1]]
        logged = [line for line in server.output().splitlines() if "-> 500" in line]
        assert len(logged) == 2 and all("(RuntimeError: a planted fault)" in line for line in logged)
        assert "Traceback" not in server.output()


def test_a_full_queue_answers_503_with_retry_after(server, expected):
    gate = server.gate
    with ThreadPoolExecutor(2) as pool:
        blocked = pool.submit(translate, server.url, BLOCK)
        wait_for((gate / "started").exists, "the runner to take the blocking request")
        queued = pool.submit(translate, server.url, GERMAN[0])
        wait_for(lambda: queue_depth(server.url) == 2, "the second request to be queued")
        refused = translate(server.url, GERMAN[1])
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert "--max_queue" in refused.json()["error"]
        (gate / "release").touch()
        assert blocked.result().status_code == 200
        assert queued.result().json()["translatedText"] == expected[GERMAN[0]]
        assert translate(server.url, GERMAN[1]).json()["translatedText"] == expected[GERMAN[1]]


@pytest.mark.slow
def test_a_request_past_its_timeout_gets_504(tmp_path):
    server, gate = faulty_server(tmp_path, "--timeout", 1)
    with server as server:
        answer = translate(server.url, BLOCK)
        assert answer.status_code == 504 and answer.json() == {
            "error": "Translation timed out after 1 seconds (--timeout)"
        }
        (gate / "release").touch()
        assert translate(server.url, GERMAN[0]).status_code == 200


@pytest.mark.slow
def test_sigterm_answers_every_request_in_flight_then_exits_with_0(tmp_path, expected):
    server, gate = faulty_server(tmp_path, "--grace_period", 300)
    with server as server, ThreadPoolExecutor(2) as pool:
        blocked = pool.submit(translate, server.url, BLOCK)
        wait_for((gate / "started").exists, "the runner to take the blocking request")
        queued = pool.submit(translate, server.url, GERMAN[2])
        wait_for(lambda: queue_depth(server.url) == 2, "the second request to be queued")
        server.process.send_signal(signal.SIGTERM)
        wait_for(lambda: refused(server.url), "the server to stop accepting connections")
        (gate / "release").touch()
        assert blocked.result().status_code == 200
        assert queued.result().json()["translatedText"] == expected[GERMAN[2]]
        assert server.process.wait(timeout=300) == 0
