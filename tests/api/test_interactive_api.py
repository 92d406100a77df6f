"""Interactive sessions through the API: asking for one, its WebSocket, its relay to the
node, what the node says, refusals, malformed messages, shutdown, and the audit.

The API runs on a real port with real Postgres and real NATS (``api_and_node``); the
node's side is a labelled stand-in built on the real ``StreamEnd`` (interactive_stand_ins.py).
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

from services.api.interactive import routes_stream
from services.api.interactive.repository import InteractiveRepository
from shared.clock import utcnow
from shared.interactive.protocol import exit_code_of
from tests.api.interactive_api import (
    NODE,
    SUBPROTOCOL,
    ApiAndNode,
    api_and_node_fixture,  # noqa: F401  # the fixture api_and_node
    audited,
    client_as,
    closed_with,
    refused,
    running_job,
    session,
    ws,
)


async def test_exec_relays_stdin_resize_output_and_the_exit_code_and_is_audited(
    api_and_node: ApiAndNode,
) -> None:
    job_id = await running_job(api_and_node)
    created = await session(api_and_node, job_id, command=["sh"], cols=120, rows=30)
    assert created["id"].startswith("ses_")
    assert len(created["id"]) == 36
    assert (created["kind"], created["task"], created["node_id"]) == ("exec", "main-0", NODE)
    # A client offering v5 and v4 (as kubectl does) gets the newer one.
    async with ws(api_and_node, created, subprotocols=("v5.channel.k8s.io", SUBPROTOCOL)) as conn:
        assert conn.subprotocol == "v5.channel.k8s.io"
        await conn.send(b"\x00hello")
        assert await conn.recv() == b"\x01hello"
        await conn.send(b'\x04{"Width": 100, "Height": 40}')
        assert await conn.recv() == b"\x01resized 100x40"
        await conn.send(b"\xff\x00")  # v5.channel.k8s.io: stdin closed
        assert await conn.recv() == b"\x01<end of stdin>"
        await conn.send(b"\x00exit 3")
        status = await conn.recv()
        assert isinstance(status, bytes)
        assert status[0] == 3
        assert exit_code_of(status[1:]) == 3
        assert await closed_with(conn) == (1000, "")
    [opened] = api_and_node.node.opened
    assert (opened.kind, opened.attempt_id, opened.user, opened.command) == (
        "exec",
        f"att-{job_id}",
        "alice",
        ["sh"],
    )
    assert (opened.cols, opened.rows, opened.idle_timeout_s) == (120, 30, 600)
    assert opened.stream_id not in created["id"], "the node never sees the session id"
    [row] = await audited(api_and_node, job_id, 1)
    assert (row["user"], row["token_id"], row["task"], row["node_id"], row["exit_code"]) == (
        "alice", "tok-alice", "main-0", NODE, 3
    )  # fmt: skip
    assert row["close_reason"] == "the command exited"
    assert (row["bytes_in"], row["bytes_out"]) == (
        len(b"helloexit 3"),
        len(b"helloresized 100x40<end of stdin>"),
    )
    assert row["duration_s"] is not None
    assert row["duration_s"] >= 0
    # The audit of alice's job is hers (and the admin's) alone.
    assert (await api_and_node.bob.get("/api/v1/sessions", params={"job_id": job_id})).status_code == 404
    assert len((await api_and_node.admin.get("/api/v1/sessions")).json()["items"]) == 1


async def test_asking_for_a_session_says_what_is_wrong(api_and_node: ApiAndNode) -> None:
    job_id = await running_job(api_and_node)
    url = f"/api/v1/jobs/{job_id}/sessions"
    unknown = await api_and_node.http.post(url, json={"kind": "exec", "task": "worker-0"})
    assert unknown.status_code == 404
    assert unknown.json()["detail"] == f"job {job_id} has no task 'worker-0'; its tasks are main-0 … main-1"
    idle = await api_and_node.http.post(url, json={"kind": "exec", "task": "main-1"})
    assert idle.status_code == 409
    assert f"task main-1 of job {job_id} has not started yet" in idle.json()["detail"]
    label = await api_and_node.http.post(url, json={"kind": "port-forward", "port": "jupyter"})
    assert label.status_code == 404
    assert label.json()["detail"].endswith("has no port labelled 'jupyter'; its labels: http")
    assert (await api_and_node.http.post(url, json={"kind": "port-forward"})).status_code == 422
    assert (await api_and_node.http.post(url, json={"kind": "shell"})).status_code == 422
    pending = await running_job(api_and_node, state="PENDING")
    waiting = await api_and_node.http.post(f"/api/v1/jobs/{pending}/sessions", json={"kind": "exec"})
    assert waiting.status_code == 409
    assert waiting.json()["detail"].startswith(f"job {pending} is pending, not running yet")
    ended = await running_job(api_and_node, state="SUCCEEDED", attempt="EXITED")
    finished = await api_and_node.http.post(f"/api/v1/jobs/{ended}/sessions", json={"kind": "exec"})
    assert finished.status_code == 409
    assert "has ended (succeeded)" in finished.json()["detail"]
    # Someone else's job does not exist for them; an admin may go in.
    assert (await api_and_node.bob.post(url, json={"kind": "exec"})).status_code == 404
    assert (await api_and_node.admin.post(url, json={"kind": "exec"})).status_code == 201


async def test_exec_needs_the_exec_scope_and_a_vc_that_allows_it(api_and_node: ApiAndNode) -> None:
    job_id = await running_job(api_and_node)
    url = f"/api/v1/jobs/{job_id}/sessions"
    made = await api_and_node.admin.post(
        "/api/v1/tokens", json={"name": "x", "user": "alice", "scopes": ["submit"]}
    )
    async with client_as(api_and_node.url, made.json()["token"]) as plain:
        denied = await plain.post(url, json={"kind": "exec"})
        assert denied.status_code == 403
        assert "needs a token with the 'exec' scope" in denied.json()["detail"]
        # A token without exec cannot mint one that has it.
        assert (await plain.post("/api/v1/tokens", json={"name": "y", "scopes": ["exec"]})).status_code == 403
    made = await api_and_node.admin.post(
        "/api/v1/tokens", json={"name": "e", "user": "alice", "scopes": ["submit", "exec"]}
    )
    assert made.json()["scopes"] == ["read", "submit", "exec"]
    async with client_as(api_and_node.url, made.json()["token"]) as exec_token:
        assert (await exec_token.post(url, json={"kind": "exec"})).status_code == 201
    off = await api_and_node.admin.put("/api/v1/virtual-clusters/default", json={"interactive": False})
    assert off.json()["interactive"] is False
    resized = await api_and_node.admin.put("/api/v1/virtual-clusters/default", json={"quota": {}})
    assert resized.json()["interactive"] is False, "a PUT without it keeps the switch"
    switched_off = await api_and_node.http.post(url, json={"kind": "exec"})
    assert switched_off.status_code == 403
    assert "turned off for virtual cluster default" in switched_off.json()["detail"]


async def test_a_session_connects_once_with_its_creators_live_credential_in_time(
    api_and_node: ApiAndNode,
) -> None:
    job_id = await running_job(api_and_node)
    created = await session(api_and_node, job_id)
    assert "another credential" in await refused(api_and_node, created, token="crl_bob")
    async with ws(api_and_node, created) as conn:
        await conn.send(b"\x00exit 0")
        assert exit_code_of((await conn.recv())[1:]) == 0
    assert "already connected" in await refused(api_and_node, created)
    late = await session(api_and_node, job_id)
    await api_and_node.db.execute(
        "UPDATE api.interactive_sessions SET created_at = now() - interval '31 seconds' WHERE id = $1",
        late["id"],
    )
    assert "not connected within 30 s" in await refused(api_and_node, late)
    unknown = dict(created, stream_url="/api/v1/sessions/ses_" + "x" * 32 + "/stream")
    assert "no session" in await refused(api_and_node, unknown)
    # A token that expires between asking and connecting is refused.
    soon = (utcnow() + timedelta(seconds=1.5)).isoformat()
    made = await api_and_node.admin.post(
        "/api/v1/tokens",
        json={"name": "s", "user": "alice", "scopes": ["submit", "exec"], "expires_at": soon},
    )
    async with client_as(api_and_node.url, made.json()["token"]) as short:
        brief = await session(api_and_node, job_id, client=short)
    await asyncio.sleep(1.6)
    assert "expired" in await refused(api_and_node, brief, token=made.json()["token"])


async def test_a_session_is_refused_when_its_caller_may_no_longer_go_in_by_the_time_it_connects(
    api_and_node: ApiAndNode,
) -> None:
    job_id = await running_job(api_and_node)
    created = await session(api_and_node, job_id)
    await api_and_node.admin.put("/api/v1/virtual-clusters/default", json={"interactive": False})
    assert "turned off for virtual cluster default" in await refused(api_and_node, created)
    assert api_and_node.node.opened == [], "nothing was opened on the node"
    [row] = await api_and_node.db.fetch("SELECT close_reason, closed_at FROM api.interactive_sessions")
    assert row["close_reason"].startswith("refused: interactive access")
    assert row["closed_at"] is not None


async def test_an_open_session_ends_when_its_token_is_revoked_or_its_vc_switched_off(
    api_and_node: ApiAndNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller is verified again every RECHECK_EVERY_S while a session is open."""
    monkeypatch.setattr(routes_stream, "RECHECK_EVERY_S", 0.2)
    job_id = await running_job(api_and_node)
    made = await api_and_node.admin.post(
        "/api/v1/tokens", json={"name": "r", "user": "alice", "scopes": ["submit", "exec"]}
    )
    token, token_id = made.json()["token"], made.json()["id"]
    async with client_as(api_and_node.url, token) as revocable:
        revoked = await session(api_and_node, job_id, client=revocable)
    switched = await session(api_and_node, job_id)
    async with ws(api_and_node, revoked, token) as first, ws(api_and_node, switched) as second:
        await first.send(b"\x00hello")
        assert await first.recv() == b"\x01hello"
        await asyncio.sleep(0.5)  # rechecked, still allowed
        assert (await api_and_node.admin.delete(f"/api/v1/tokens/{token_id}")).status_code == 204
        code, reason = await asyncio.wait_for(closed_with(first), 2)
        assert code == 1008
        assert reason.startswith("access withdrawn: the bearer token was revoked")
        await second.send(b"\x00still here")
        assert await second.recv() == b"\x01still here"
        await api_and_node.admin.put("/api/v1/virtual-clusters/default", json={"interactive": False})
        code, reason = await asyncio.wait_for(closed_with(second), 2)
        assert code == 1008
        assert reason.startswith(
            "access withdrawn: interactive access (exec, port-forward, proxy) is turned off"
        )
    # The audit row is written as the API ends the session, just after the close frame.
    async with asyncio.timeout(5):
        while True:
            rows = {
                r["id"]: r
                for r in await api_and_node.db.fetch(
                    "SELECT id, close_reason, bytes_in FROM api.interactive_sessions"
                )
            }
            if all(rows[s["id"]]["close_reason"] is not None for s in (revoked, switched)):
                break
            await asyncio.sleep(0.05)
    assert rows[revoked["id"]]["close_reason"].startswith("access withdrawn: the bearer token was revoked")
    assert rows[revoked["id"]]["bytes_in"] == len(b"hello"), "what moved before is still counted"
    assert rows[switched["id"]]["close_reason"].startswith("access withdrawn: interactive access")
    ended = await api_and_node.node.wait_ended(2)
    assert [e.startswith("access withdrawn: ") for e in ended] == [True, True], "the node stopped both"


async def test_a_malformed_client_message_closes_its_websocket_with_1008_alone(
    api_and_node: ApiAndNode,
) -> None:
    job_id = await running_job(api_and_node)
    bystander = await session(api_and_node, job_id)
    async with ws(api_and_node, bystander) as kept:
        cases: list[tuple[Any, str]] = [
            ("text", "text messages are not taken"),
            (b"", "an empty message"),
            (b"\x07hi", "channel 7 is not taken by an exec session"),
            (b'\x04{"Width": "wide"}', "resize frame must be JSON"),
        ]
        for message, said in cases:
            async with ws(api_and_node, await session(api_and_node, job_id)) as conn:
                await conn.send(message)
                code, reason = await closed_with(conn)
                assert (code, said in reason) == (1008, True), reason
        await kept.send(b"\x00still here")
        assert await kept.recv() == b"\x01still here"
    ended = await api_and_node.node.wait_ended(5)
    assert sum("a malformed message from the client" in r for r in ended) == 4
    rows = await audited(api_and_node, job_id, 5)  # the four and the bystander
    assert sum((r["close_reason"] or "").startswith("a malformed message") for r in rows) == 4


async def test_what_the_node_says_reaches_theclient_as(api_and_node: ApiAndNode) -> None:
    job_id = await running_job(api_and_node)
    api_and_node.node.not_running.add(f"att-{job_id}")
    async with ws(api_and_node, await session(api_and_node, job_id)) as conn:
        status = await conn.recv()
        assert isinstance(status, bytes)
        assert status[0] == 3
        assert "the attempt is exited, not running" in json.loads(status[1:])["message"]
        assert (await closed_with(conn))[0] == 1011
    api_and_node.node.not_running.clear()
    api_and_node.node.end_with = "the task ended"
    async with ws(api_and_node, await session(api_and_node, job_id)) as conn:
        status = await conn.recv()
        assert json.loads(status[1:])["message"] == "the task ended"
        assert (await closed_with(conn))[0] == 1000
    rows = await audited(api_and_node, job_id, 2)
    assert [r["close_reason"] for r in rows] == [
        "the task ended",
        f"not opened: node {NODE}: the attempt is exited, not running",
    ]


async def test_port_forward_carries_bytes_both_ways(api_and_node: ApiAndNode) -> None:
    job_id = await running_job(api_and_node)
    created = await session(api_and_node, job_id, kind="port-forward", port="http")
    async with ws(api_and_node, created) as conn:
        await conn.send(b"\x00GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while b"}" not in answer:
            frame = await conn.recv()
            assert isinstance(frame, bytes)
            assert frame[0] == 0
            answer += frame[1:]
        # The app closed the connection after answering: so does the WebSocket.
        assert await closed_with(conn) == (1000, "")
    assert answer.startswith(b"HTTP/1.1 200 OK")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["target"] == "/hello"
    assert api_and_node.node.opened[-1].port == api_and_node.app.port
    [row] = await audited(api_and_node, job_id, 1)
    assert (row["kind"], row["port"], row["close_reason"]) == (
        "port-forward",
        "http",
        "the task closed the connection",
    )


async def test_the_api_shutting_down_ends_its_sessions_and_says_so(api_and_node: ApiAndNode) -> None:
    job_id = await running_job(api_and_node)
    async with ws(api_and_node, await session(api_and_node, job_id)) as conn:
        await conn.send(b"\x00up")
        assert await conn.recv() == b"\x01up"
        api_and_node.server.should_exit = True
        code, _ = await closed_with(conn)
        assert code == 1012  # service restart: the client may reconnect elsewhere
    await api_and_node.serving
    assert await api_and_node.node.wait_ended(1) == ["the API shut down"]
    [row] = await api_and_node.db.fetch("SELECT close_reason, closed_at FROM api.interactive_sessions")
    assert row["close_reason"] == "the API shut down"
    assert row["closed_at"] is not None


async def test_audit_rows_past_the_retention_are_deleted(api_and_node: ApiAndNode) -> None:
    """What each API process runs once an hour, with the audit log's retention."""
    job_id = await running_job(api_and_node)
    old = [await session(api_and_node, job_id) for _ in range(5)]
    new = await session(api_and_node, job_id)
    await api_and_node.db.execute(
        "UPDATE api.interactive_sessions SET created_at = now() - interval '400 days' WHERE id = ANY($1)",
        [o["id"] for o in old],
    )
    repo = InteractiveRepository(api_and_node.db)
    assert await repo.forget_old(365 * 86400, batch=2) == 5, "batch after batch, until none is left"
    assert await repo.forget_old(365 * 86400) == 0
    assert [r.id for r in await repo.sessions(job_id, None, 10)] == [new["id"]]
