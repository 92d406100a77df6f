"""What is retried and what is not, and where the URL and token come from.

The retry tests script the server's answers with ``httpx.MockTransport`` (labelled: a
scripted server, because the real API cannot be made to answer 503 or drop a connection
on cue); everything else in tests/sdk runs against the real API."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from corral.sdk import (
    ApiError,
    Client,
    ConfigurationError,
    ConnectionFailed,
    CorralError,
    read_config,
    resolve,
    write_config,
)
from corral.sdk.retries import RetryPolicy

FAST = RetryPolicy(retries=2, backoff_s=0.01)
JOB = {
    "id": "job-1",
    "name": "x",
    "user": "alice",
    "virtual_cluster": "default",
    "state": "RUNNING",
    "created_at": "2026-11-22T14:08:24Z",
    "updated_at": "2026-11-22T14:08:24Z",
}
UNAVAILABLE = {
    "type": "/docs/problems/unavailable",
    "title": "Service unavailable",
    "status": 503,
    "detail": "Corral's database is not reachable right now",
}


def scripted(*answers: httpx.Response | Exception) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A scripted server: each request gets the next answer (or the error is raised)."""
    seen: list[httpx.Request] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.MockTransport(handle), seen


def busy() -> httpx.Response:
    return httpx.Response(503, json=UNAVAILABLE, headers={"Retry-After": "0"})


def test_an_idempotent_call_is_retried_after_a_503_and_a_dropped_connection() -> None:
    transport, seen = scripted(busy(), httpx.ConnectError("refused"), httpx.Response(200, json=JOB))
    with Client("http://corral.test", "t", retries=FAST, transport=transport) as corral:
        assert corral.get_job("job-1").state == "RUNNING"
    assert len(seen) == 3
    assert seen[0].headers["Authorization"] == "Bearer t"


def test_retries_are_bounded_and_end_in_the_last_answer_or_connection_failed() -> None:
    transport, seen = scripted(busy(), busy(), busy(), busy())
    with (
        Client("http://corral.test", "t", retries=FAST, transport=transport) as corral,
        pytest.raises(ApiError) as error,
    ):
        corral.list_nodes()
    assert (error.value.status, error.value.slug, len(seen)) == (503, "unavailable", 3)
    transport, seen = scripted(*[httpx.ReadError("reset")] * 3)
    with (
        Client("http://corral.test", "t", retries=FAST, transport=transport) as corral,
        pytest.raises(ConnectionFailed),
    ):
        corral.list_nodes()
    assert len(seen) == 3


def test_a_submit_is_never_sent_twice() -> None:
    for answer in (busy(), httpx.ReadError("reset")):
        transport, seen = scripted(answer, httpx.Response(201, json=JOB))
        with (
            Client("http://corral.test", "t", retries=FAST, transport=transport) as corral,
            pytest.raises(CorralError),
        ):
            corral.submit({"name": "x", "tasks": []})
        assert len(seen) == 1


def test_a_body_that_is_not_problem_json_is_still_an_api_error() -> None:
    transport, _ = scripted(httpx.Response(502, text="<html>Bad gateway</html>"))
    with Client("http://corral.test", "t", transport=transport) as corral, pytest.raises(ApiError) as error:
        corral.submit({})
    assert (error.value.status, error.value.detail) == (502, "<html>Bad gateway</html>")


def test_url_and_token_come_from_arguments_then_environment_then_config_then_make_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("CORRAL_URL", "CORRAL_TOKEN", "CORRAL_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CORRAL_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "home"))
    with pytest.raises(ConfigurationError, match="no token: run `corral login`"):
        resolve()
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "admin-token").write_text("crl_admin\n")
    assert resolve() == resolve("http://127.0.0.1:8080", "crl_admin")  # beside `make up`
    path = write_config("https://corral.example", 'crl_"quoted"')
    assert path == tmp_path / "config.toml"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert read_config() == {"url": "https://corral.example", "token": 'crl_"quoted"'}
    assert (resolve().url, resolve().token) == ("https://corral.example", 'crl_"quoted"')
    monkeypatch.setenv("CORRAL_URL", "http://env:1/")
    monkeypatch.setenv("CORRAL_TOKEN", "crl_env")
    assert (resolve().url, resolve().token) == ("http://env:1", "crl_env")
    assert (resolve("http://arg:2", "crl_arg").url, resolve("http://arg:2", "crl_arg").token) == (
        "http://arg:2",
        "crl_arg",
    )
    path.write_text("url = [")
    monkeypatch.delenv("CORRAL_TOKEN")
    with pytest.raises(ConfigurationError, match="cannot read the config file"):
        resolve()
