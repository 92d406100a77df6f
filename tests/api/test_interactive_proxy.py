"""The proxy to a task's labelled port through the API: what reaches the app and what comes
back, strip or keep, who may use it (token or portal cookie), and its audit rows.

The API runs on a real port with real Postgres and real NATS (``api_and_node``); the
node's side is a labelled stand-in built on the real ``StreamEnd`` that forwards to a real
web app on 127.0.0.1 (interactive_stand_ins.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
from starlette.types import Message, Scope
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin, Subprotocol

from services.api.interactive.access import PORTAL_COOKIE
from services.api.interactive.proxy import HttpOverStream, response_headers
from services.api.interactive.repository import InteractiveRepository, NewSession
from services.api.interactive.routes_proxy import ForwardedResponse
from services.api.portal.session import SESSION_COOKIE
from shared.bus.nats import NatsBus
from shared.interactive.stream import StreamEnd
from tests.api.interactive_api import (
    ApiAndNode,
    api_and_node_fixture,  # noqa: F401  # the fixture api_and_node
    running_job,
)


def _headers(answer: httpx.Response) -> dict[str, str]:
    return {k.lower(): v for k, v in answer.json()["headers"]}


async def test_the_proxy_passes_requests_without_corrals_credentials(api_and_node: ApiAndNode) -> None:
    job_id = await running_job(api_and_node)
    base = f"/proxy/{job_id}/main-0/http"
    api_and_node.http.cookies.set("corral_sign_in", "secret")
    api_and_node.http.cookies.set("theme", "dark")
    got = await api_and_node.http.get(f"{base}/tree/a%20b?x=1", headers={"X-Forwarded-Host": "evil"})
    assert got.status_code == 200, got.text
    seen = got.json()
    assert (seen["method"], seen["target"]) == ("GET", "/tree/a%20b?x=1")
    headers = _headers(got)
    assert "authorization" not in headers
    assert headers["cookie"] == "theme=dark"
    assert headers["x-forwarded-prefix"] == base
    assert (headers["x-forwarded-host"], headers["x-forwarded-proto"]) == (api_and_node.url[7:], "http")
    assert headers["host"] == f"127.0.0.1:{api_and_node.app.port}"
    assert got.headers.get_list("set-cookie") == ["app_state=1; Path=/"]
    posted = await api_and_node.http.post(f"{base}/api", content=b"payload")
    assert (posted.json()["method"], posted.json()["body"]) == ("POST", "payload")
    root = await api_and_node.http.get(base, follow_redirects=False)
    assert (root.status_code, root.headers["location"]) == (308, f"{base}/")
    # keep: the app was told its prefix, and sees the whole path.
    kept = await running_job(api_and_node, prefix="keep")
    whole = await api_and_node.http.get(f"/proxy/{kept}/main-0/http/lab")
    assert whole.json()["target"] == f"/proxy/{kept}/main-0/http/lab"
    # Another tenant does not find the job; nobody signed in is sent to sign in.
    assert (await api_and_node.bob.get(f"{base}/")).status_code == 404
    async with httpx.AsyncClient(base_url=api_and_node.url) as anonymous:
        browser = await anonymous.get(f"{base}/", headers={"Accept": "text/html"})
        assert (browser.status_code, browser.headers["location"]) == (303, f"/login?next={base}/")
        assert (await anonymous.get(f"{base}/")).status_code == 401
    rows = (await api_and_node.http.get("/api/v1/sessions", params={"job_id": job_id})).json()["items"]
    assert [(r["kind"], r["command"][0], r["close_reason"]) for r in rows] == [
        ("proxy", "POST", "answered 200"),
        ("proxy", "GET", "answered 200"),
    ]
    assert rows[0]["bytes_in"] == len(b"payload")
    assert rows[0]["bytes_out"] > 0


async def test_the_proxy_takes_the_portal_cookie_and_passes_the_apps_own_authorization(
    api_and_node: ApiAndNode,
) -> None:
    job_id = await running_job(api_and_node)
    async with signed_in(api_and_node.url, "crl_alice") as browser:
        got = await browser.get(f"/proxy/{job_id}/main-0/http/", headers={"Authorization": "token jupyter"})
        assert got.status_code == 200, got.text
        headers = _headers(got)
        assert headers["authorization"] == "token jupyter"
        assert "cookie" not in headers, "the portal's cookies stay with the API"
    rows = (await api_and_node.http.get("/api/v1/sessions", params={"job_id": job_id})).json()["items"]
    assert rows[0]["token_id"] == "portal"
    # The page is the task's own, on the API's origin: an admin's cookie opens only the
    # admin's own jobs (with a token, an admin opens any).
    async with signed_in(api_and_node.url, api_and_node.admin_token) as admin_browser:
        assert (await admin_browser.get(f"/proxy/{job_id}/main-0/http/")).status_code == 404
    assert (await api_and_node.admin.get(f"/proxy/{job_id}/main-0/http/")).status_code == 200


@asynccontextmanager
async def signed_in(url: str, token: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browser signed in to the portal with ``token``: it holds the session cookie."""
    async with httpx.AsyncClient(base_url=url) as browser:
        page = await browser.get("/login")
        sign_in = page.text.split('name="sign_in_token" value="', 1)[1].split('"', 1)[0]
        signed = await browser.post("/login", data={"token": token, "sign_in_token": sign_in, "next": "/"})
        assert signed.status_code == 303
        yield browser


def test_an_app_says_nothing_for_the_apis_whole_origin() -> None:
    """The task's page is served from the API's origin: what would reach past the app's own
    pages (Corral's cookies, a nameless cookie, a service worker's scope, wiping the
    site's data, HSTS) is dropped; the app's own headers and cookies pass."""
    answer = [
        (b"Content-Type", b"text/html"),
        (b"Set-Cookie", b"_xsrf=abc; Path=/"),
        (b"Set-Cookie", b"app_state=1"),
        (b"Service-Worker-Allowed", b"/"),
        (b"Clear-Site-Data", b'"cookies"'),
        (b"Strict-Transport-Security", b"max-age=31536000"),
        (b"Set-Cookie", b"=forged; Path=/"),
        (b"Set-Cookie", b"forged"),
        (b"Set-Cookie", b"  =forged"),
        (b"Set-Cookie", b" Corral_Session=forged"),
        (b"Set-Cookie", b"__Host-corral_session=forged; Secure; Path=/"),
        (b"Set-Cookie", b"__SECURE-Corral_sign_in=forged; Secure"),
        (b"Connection", b"close"),
    ]
    assert response_headers(answer) == [
        (b"content-type", b"text/html"),
        (b"set-cookie", b"_xsrf=abc; Path=/"),
        (b"set-cookie", b"app_state=1"),
    ]


def test_the_portal_cookie_is_named_as_the_portal_names_it() -> None:
    assert PORTAL_COOKIE == SESSION_COOKIE


async def test_an_apps_websocket_is_relayed_through_the_proxy(api_and_node: ApiAndNode) -> None:
    """A real WebSocket server as the task's app (as a Jupyter kernel's channels are)."""
    seen: list[tuple[str, dict[str, str]]] = []

    async def echo(conn: ServerConnection) -> None:
        assert conn.request is not None
        seen.append((conn.request.path, {k.lower(): v for k, v in conn.request.headers.raw_items()}))
        async for message in conn:
            await conn.send(message)

    async with serve(echo, "127.0.0.1", 0, subprotocols=[Subprotocol("kernel.v5")]) as app:
        port = next(iter(app.sockets)).getsockname()[1]
        job_id = await running_job(api_and_node)
        await api_and_node.db.execute(
            "UPDATE launcher.attempts SET ports = $2 WHERE job_id = $1", job_id, {"http": [port]}
        )
        url = (
            api_and_node.url.replace("http://", "ws://")
            + f"/proxy/{job_id}/main-0/http/api/kernels/k1/channels?s=1"
        )
        async with connect(
            url,
            subprotocols=[Subprotocol("kernel.v5")],
            additional_headers={"Authorization": "Bearer crl_alice"},
        ) as conn:
            assert conn.subprotocol == "kernel.v5"
            await conn.send("hello")
            assert await conn.recv() == "hello"
            await conn.send(b"\x00\x01" * 70_000)  # larger than a stream frame
            assert await conn.recv() == b"\x00\x01" * 70_000
        [(path, headers)] = seen
        assert path == "/api/kernels/k1/channels?s=1"
        assert "authorization" not in headers
        assert headers["x-forwarded-prefix"] == f"/proxy/{job_id}/main-0/http"
    rows = (await api_and_node.http.get("/api/v1/sessions", params={"job_id": job_id})).json()["items"]
    assert [(r["kind"], r["command"][0]) for r in rows] == [("proxy", "WEBSOCKET")]
    assert rows[0]["bytes_in"] == rows[0]["bytes_out"] == 5 + 140_000
    refused = api_and_node.url.replace("http://", "ws://") + f"/proxy/{job_id}/main-0/http/x"
    with pytest.raises(InvalidStatus) as caught:
        async with connect(refused, additional_headers={"Authorization": "Bearer crl_bob"}):
            pass
    assert caught.value.response.status_code == 403


async def test_an_apps_websocket_by_the_portal_cookie_must_come_from_the_apis_own_pages(
    api_and_node: ApiAndNode,
) -> None:
    """A page of another site may open a WebSocket that carries the browser's cookies
    (cross-site WebSocket hijacking): with the portal's cookie, only the API's own
    origin gets through; a bearer token needs no Origin."""

    async def echo(conn: ServerConnection) -> None:
        async for message in conn:
            await conn.send(message)

    async with serve(echo, "127.0.0.1", 0) as app, signed_in(api_and_node.url, "crl_alice") as browser:
        port = next(iter(app.sockets)).getsockname()[1]
        job_id = await running_job(api_and_node)
        await api_and_node.db.execute(
            "UPDATE launcher.attempts SET ports = $2 WHERE job_id = $1", job_id, {"http": [port]}
        )
        url = api_and_node.url.replace("http://", "ws://") + f"/proxy/{job_id}/main-0/http/ws"
        cookie = f"{PORTAL_COOKIE}={browser.cookies[PORTAL_COOKIE]}"
        foreign = ["https://evil.example", "null", api_and_node.url.replace("http://", "https://")]
        for origin in [*(Origin(o) for o in foreign), None]:
            with pytest.raises(InvalidStatus) as caught:
                async with connect(url, origin=origin, additional_headers={"Cookie": cookie}):
                    pass
            assert caught.value.response.status_code == 403
            assert b"must come from " + api_and_node.url.encode() in (caught.value.response.body or b"")
        async with connect(
            url, origin=Origin(api_and_node.url), additional_headers={"Cookie": cookie}
        ) as conn:
            await conn.send("from the job's page")
            assert await conn.recv() == "from the job's page"
        async with connect(url, additional_headers={"Authorization": "Bearer crl_alice"}) as conn:
            await conn.send("from a script")
            assert await conn.recv() == "from a script"
    rows = (await api_and_node.http.get("/api/v1/sessions", params={"job_id": job_id})).json()["items"]
    assert [r["token_id"] for r in rows] == ["tok-alice", "portal"], "a refused one opens nothing"


async def test_an_answer_cancelled_before_its_body_is_read_still_closes_its_stream_and_row(
    api_and_node: ApiAndNode, bus: NatsBus
) -> None:
    """The client gone (the server cancelling the send) before the body's first chunk: the
    body generator never ran, yet the forward stream is closed and the row completed."""
    repo = InteractiveRepository(api_and_node.db)
    session_id = "ses_" + "c" * 32
    await repo.insert(
        NewSession(session_id, "proxy", "job-x", "main", 0, "att-x", "node-t", "alice", "tok-alice",
                   "0" * 64, ["GET", "/"], False, True, 80, 24, "http", 1, connected=True)
    )  # fmt: skip
    stream = StreamEnd(bus.nc, send_subject="test.cancelled.out", recv_subject="test.cancelled.in")
    await stream.open()
    response = ForwardedResponse(HttpOverStream(stream, "port 1 (http)"), stream, repo, session_id, 200)
    started = anyio.Event()

    async def send(message: Message) -> None:
        started.set()
        await anyio.sleep_forever()  # a client that never takes the answer

    async def receive() -> Message:
        await anyio.sleep_forever()
        return {}

    scope: Scope = {"type": "http", "asgi": {"spec_version": "2.4"}}
    async with anyio.create_task_group() as tg:
        tg.start_soon(response, scope, receive, send)
        await started.wait()
        tg.cancel_scope.cancel()
    assert stream.closed
    [row] = await api_and_node.db.fetch("SELECT close_reason, closed_at FROM api.interactive_sessions")
    assert row["close_reason"] == "the client left"
    assert row["closed_at"] is not None
