"""The SDK, sync and async, against the real API: every kind of answer it reads, the
problem+json errors it raises, job pages, following a log, and the events stream."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from corral.sdk import ApiError, AsyncClient, Client
from services.launcher.task_logs import LogServer, attempt_log_path
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.node_logs import LOGS_QUEUE, logs_subject
from tests.fixtures.api import Api

SPEC = {"name": "hello", "tasks": [{"name": "main", "command": "echo hi", "resources": {"gpus": 1}}]}


async def test_the_sync_client_submits_reads_lists_and_cancels_jobs(api: Api, tmp_path: Path) -> None:
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text("name: from-yaml\ntasks:\n  - name: main\n    command: echo hi\n")

    def session() -> None:
        with Client(api.url, api.alice) as corral:
            first = corral.submit(SPEC)
            second = corral.submit_file(spec_file)
            assert (first.state, first.user, first.virtual_cluster) == ("PENDING", "alice", "default")
            assert corral.get_job(first.id).spec["tasks"][0]["command"] == "echo hi"
            assert second.name == "from-yaml"
            page = corral.list_jobs(limit=1)
            assert [j.id for j in page.items] == [second.id]  # newest first
            assert page.next_cursor is not None  # the API pages with a keyset cursor
            assert [j.id for j in corral.list_jobs(limit=1, cursor=page.next_cursor).items] == [first.id]
            assert [j.id for j in corral.iter_jobs()] == [second.id, first.id]
            assert [j.id for j in corral.list_jobs(state="PENDING").items] == [second.id, first.id]
            assert corral.why_pending(first.id) is None  # no scheduler has looked at it
            cancelled = corral.cancel(first.id)
            assert cancelled.state == "CANCELLED"
            assert corral.wait(first.id, poll_s=0.05).finished
            with pytest.raises(ApiError) as again:
                corral.cancel(first.id)
            assert (again.value.status, again.value.slug) == (409, "conflict")

    await asyncio.to_thread(session)


async def test_an_error_answer_is_one_typed_exception_with_the_problem(api: Api) -> None:
    def session() -> None:
        with Client(api.url, api.alice) as corral:
            with pytest.raises(ApiError) as missing:
                corral.get_job("job-nope")
            error = missing.value
            assert (error.status, error.slug, error.title) == (404, "not-found", "Not found")
            assert "no job with id 'job-nope'" in error.detail
            with pytest.raises(ApiError) as invalid:
                corral.submit({"name": "x", "tasks": [{"name": "main", "command": "true", "gpus": 1}]})
            assert (invalid.value.status, invalid.value.slug) == (422, "invalid-input")
            assert invalid.value.errors[0]["field"] == "tasks.0.gpus"
            with pytest.raises(ApiError) as forbidden:
                corral.put_vc("vision", {"H100": 4})  # alice is no admin
            assert forbidden.value.status == 403
        with Client(api.url, "crl_wrong") as stranger, pytest.raises(ApiError) as unknown:
            stranger.list_nodes()
        assert unknown.value.status == 401

    await asyncio.to_thread(session)


async def test_the_async_client_manages_vcs_webhooks_and_reads_the_cluster(api: Api) -> None:
    async with AsyncClient(api.url, api.admin) as corral:
        vc = await corral.put_vc("vision", {"h100": 4}, max_gpus_per_user=2, description="team")
        assert (vc.quota, vc.max_gpus_per_user) == ({"H100": 4}, 2)
        assert vc.warnings  # no node has H100s
        assert "vision" in [v.name for v in await corral.list_vcs()]
        assert (await corral.get_vc("vision")).description == "team"
        await corral.delete_vc("vision")
        with pytest.raises(ApiError) as gone:
            await corral.get_vc("vision")
        assert gone.value.status == 404

        hook = await corral.create_webhook("https://hooks.example.com/x", ["corral.job.*"])
        assert hook.secret.startswith("whsec_")
        assert [h.id for h in await corral.list_webhooks()] == [hook.id]
        rotated = await corral.rotate_webhook_secret(hook.id, overlap_s=60)
        assert rotated.secret != hook.secret
        assert await corral.list_deliveries(hook.id) == []
        await corral.delete_webhook(hook.id)

        assert await corral.list_nodes() == []
        assert await corral.list_gpus() == []
        assert await corral.list_alerts() == []
        assert (await corral.get_alert_rules()).detail.startswith("the alerter has not started")
        accepted = await corral.silence(["node=n1"], 3600, comment="BIOS")
        assert accepted.id.startswith("sil-")
        job = await corral.submit(SPEC)
        assert (await corral.get_job(job.id)).state == "PENDING"
        assert [j.id async for j in corral.iter_jobs()] == [job.id]


async def test_following_a_log_streams_until_the_attempt_ends(
    api: Api, db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    async with AsyncClient(api.url, api.alice) as corral, asyncio.TaskGroup() as node:
        job = await corral.submit(SPEC)
        # Node n1 answers for its logs over NATS, as its agent does.
        log = attempt_log_path(tmp_path, job.id, "main", 0, 1)
        log.parent.mkdir(parents=True)
        log.write_text("step 1\n")
        answering = node.create_task(bus.answer(logs_subject("n1"), LOGS_QUEUE, LogServer(tmp_path).answer))
        await bus.nc.flush()
        await db.execute(
            "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,"
            " node_id, gpu_indices, state, log_path) VALUES ('att-log', $1, 1, 'main', 0, 1, 'n1', '{0}',"
            " 'RUNNING', $2)",
            job.id,
            str(log),
        )
        assert await corral.logs(job.id) == "step 1\n"
        received: list[str] = []

        async def follow() -> None:
            async for chunk in corral.follow_logs(job.id, task="main-0"):
                received.append(chunk)

        following = asyncio.create_task(follow())
        for _ in range(200):
            if "".join(received) == "step 1\n":
                break
            await asyncio.sleep(0.05)
        with log.open("a") as handle:
            handle.write("step 2\n")
        await db.execute("UPDATE launcher.attempts SET state = 'EXITED', exit_code = 0 WHERE id = 'att-log'")
        async with asyncio.timeout(10):
            await following  # ends by itself once the attempt has ended
        assert "".join(received) == "step 1\nstep 2\n"

        with pytest.raises(ApiError) as not_started:
            await anext(corral.follow_logs(job.id, task="main-1"))
        assert not_started.value.status == 404
        answering.cancel()
