"""Who may call a server: API keys from a file (403 without a listed one), per-key rate limits (429), CORS only for
the origins given; and the settings refused before a server starts."""

import httpx
import pytest

from hf_vanilla_transformer import cli
from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.serve.access import RateLimits, read_api_keys
from hf_vanilla_transformer.serve.languages import Pair
from hf_vanilla_transformer.serve.settings import Settings
from tests.helpers import running_server, serving_model_dir


FIELDS = {"q": "Wo ist Tom?", "source": "de", "target": "en"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    (folder / "keys.txt").write_text("# one key per line, optionally with its requests per minute\nopen\nslow 1\n")
    arguments = ["--model", serving_model_dir(), "--api_keys", folder / "keys.txt", "--cors_origins", "https://a.org"]
    with running_server(*arguments, log=folder / "server.log") as server:
        yield server


def test_requests_without_a_listed_key_get_403(server):
    for body in (FIELDS, {**FIELDS, "api_key": "wrong"}):
        for route in ("/translate", "/detect"):
            answer = httpx.post(server.url + route, data=body, timeout=60)
            assert answer.status_code == 403 and "API key" in answer.json()["error"]
    native = httpx.post(server.url + "/v1/translate", json={"texts": ["Wo ist Tom?"]}, timeout=60)
    assert native.status_code == 403
    assert httpx.post(server.url + "/translate", data={**FIELDS, "api_key": "open"}, timeout=60).status_code == 200
    native = httpx.post(server.url + "/v1/translate", json={"texts": ["Wo ist Tom?"], "api_key": "open"}, timeout=60)
    assert native.status_code == 200
    assert httpx.get(server.url + "/languages").status_code == 200  # as LibreTranslate: no key needed


def test_a_key_beyond_its_rate_gets_429_and_others_go_on(server):
    assert httpx.post(server.url + "/translate", json={**FIELDS, "api_key": "slow"}, timeout=60).status_code == 200
    refused = httpx.post(server.url + "/translate", json={**FIELDS, "api_key": "slow"}, timeout=60)
    assert refused.status_code == 429
    assert refused.json() == {"error": "Slowdown: 1 per 1 minute"} and int(refused.headers["retry-after"]) >= 1
    assert httpx.post(server.url + "/translate", json={**FIELDS, "api_key": "open"}, timeout=60).status_code == 200


def test_cors_answers_only_the_origins_given(server):
    allowed = httpx.options(
        server.url + "/translate",
        headers={"Origin": "https://a.org", "Access-Control-Request-Method": "POST"},
    )
    assert allowed.headers.get("access-control-allow-origin") == "https://a.org"
    other = httpx.get(server.url + "/languages", headers={"Origin": "https://b.org"})
    assert "access-control-allow-origin" not in other.headers


def test_without_cors_origins_no_cors_header_is_sent():
    from starlette.testclient import TestClient

    from hf_vanilla_transformer.serve.app import create_app

    app = create_app(model=str(serving_model_dir()))
    with TestClient(app) as client:
        answer = client.get("/languages", headers={"Origin": "https://a.org"})
        assert answer.status_code == 200 and "access-control-allow-origin" not in answer.headers


def test_rate_limits_refill_over_a_minute():
    limits = RateLimits(per_minute=2, per_key={"vip": 5})
    assert [limits.allow("a") for _ in range(3)] == [True, True, False]
    assert all(limits.allow("vip") for _ in range(5)) and not limits.allow("vip")
    assert RateLimits(None).allow("anyone")


def test_the_key_file_and_settings_are_checked_before_the_server_starts(tmp_path, capsys):
    (tmp_path / "bad.txt").write_text("key ten\n")
    with pytest.raises(InputError, match=r"bad.txt:1: expected `KEY` or `KEY REQUESTS_PER_MINUTE`"):
        read_api_keys(str(tmp_path / "bad.txt"))
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(InputError, match="no key"):
        read_api_keys(str(tmp_path / "empty.txt"))
    with pytest.raises(InputError, match="--max_queue must be positive"):
        Settings(max_queue=0).check()
    mistakes = (["--api_keys", tmp_path / "missing.txt"], ["--workers", "0"], ["--max_chars", "-1"])
    for mistake in (*mistakes, ["--timeout_keep_alive", "0"]):
        assert cli.main(["serve", "--model", str(serving_model_dir()), *map(str, mistake)]) == 2
        assert f"{mistake[0]}" in capsys.readouterr().err
    assert cli.main(["serve", "--model", str(tmp_path / "nothing")]) == 2
    assert "nothing" in capsys.readouterr().err


def test_a_folder_without_its_languages_needs_them_given():
    class Translator:
        class trained_on:
            source_lang = target_lang = None

    with pytest.raises(InputError, match="--source_lang and --target_lang"):
        Pair.of(Translator)
    assert Pair.of(Translator, "DE", "en") == Pair("de", "en")
