"""The service controller on a real Postgres: replicas created through the submission
path, replaced once their job ended, a rollout one replica at a time that drains an old
replica only once a new one is ready, drain before cancel, scale down, delete, and the
lock that lets one API process act.

Each pass is run by hand (``pass_once``); replicas are brought to RUNNING, ready or
ended by writing Postgres as the scheduler, the launcher and the probes would."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import httpx
import pytest

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import shape_cache
from services.api.serving.controller import ControllerLease, ServiceController, Step
from shared.db.pool import Database
from tests.api.models_seed import Users, trained
from tests.api.models_seed import users_fixture as users_fixture  # the fixture users
from tests.api.services_seed import ended, replica_jobs, running, service_spec, set_ready
from tests.launcher import attempts
from tests.launcher.service_crashes import NODE, crash

StepFn = Callable[[], Awaitable[Step]]


@pytest.fixture
async def controller(db: Database, database_url: str) -> ServiceController:
    return ServiceController(db, shape_cache(JobRepository(db)), ControllerLease(database_url))


@pytest.fixture
async def step(db: Database, controller: ServiceController) -> StepFn:
    """One controller pass; what it did to service ``echo``."""

    async def one() -> Step:
        async with db.connection() as conn:
            return (await controller.pass_once(conn)).get("echo", Step())

    return one


async def test_replicas_are_jobs_made_through_the_submission_path_and_kept_at_the_count(
    client: httpx.AsyncClient, db: Database, step: StepFn
) -> None:
    await client.post("/api/v1/services", json=service_spec(replicas=2))
    first = await step()
    assert len(first.created) == 2
    replicas = await replica_jobs(db, "echo")
    assert [(r["state"], r["revision"]) for r in replicas] == [("PENDING", 1), ("PENDING", 1)]
    env = replicas[0]["spec"]["tasks"][0]["env"]
    assert env == {"CORRAL_SERVICE_NAME": "echo", "CORRAL_SERVICE_REVISION": "1"}
    assert replicas[0]["spec"]["kind"] == "service"
    # The same events as any submit: the scheduler hears of them.
    submitted = await db.fetchval(
        "SELECT count(*) FROM corral.outbox WHERE aggregate = ANY($1::text[])",
        [r["job_id"] for r in replicas],
    )
    assert submitted == 2
    assert not await step()
    status = (await client.get("/api/v1/services/echo")).json()
    assert status["state"] == "Progressing"
    assert [r["state"] for r in status["replica_list"]] == ["Pending", "Pending"]
    # A replica is not resubmitted as a job of its own: the service keeps its replicas.
    again = await client.post(f"/api/v1/jobs/{replicas[0]['job_id']}/resubmit")
    assert again.status_code == 422
    assert "POST /api/v1/services" in again.json()["detail"]


async def test_a_replica_whose_job_ended_is_replaced(
    client: httpx.AsyncClient, db: Database, step: StepFn
) -> None:
    await client.post("/api/v1/services", json=service_spec(replicas=2))
    await step()
    gone, kept = [r["job_id"] for r in await replica_jobs(db, "echo")]
    await ended(db, gone, "FAILED")
    again = await step()
    assert again.forgotten == [gone]
    assert len(again.created) == 1
    now = [r["job_id"] for r in await replica_jobs(db, "echo")]
    assert now == [kept, again.created[0]]
    assert (
        await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", gone) == "FAILED"
    )  # its history stays


async def test_a_rollout_starts_one_new_replica_and_drains_an_old_one_only_once_it_is_ready(
    client: httpx.AsyncClient, db: Database, step: StepFn
) -> None:
    await client.post("/api/v1/services", json=service_spec(replicas=2, drain_s=0.3))
    await step()
    old = [r["job_id"] for r in await replica_jobs(db, "echo")]
    for job_id in old:
        await running(db, job_id, ready=True)
    assert (await client.get("/api/v1/services/echo")).json()["state"] == "Ready"

    changed = service_spec(replicas=2, drain_s=0.3)
    changed["tasks"][0]["command"] = "python serve.py --v2"
    assert (await client.put("/api/v1/services/echo/spec", json=changed)).status_code == 200
    surge = await step()
    assert len(surge.created) == 1
    assert surge.drained == []
    new = surge.created[0]
    assert not await step()  # the new one is not ready: nothing more
    status = (await client.get("/api/v1/services/echo")).json()
    assert status["state"] == "Progressing"
    assert "rolling over to revision 2" in status["reason"]
    spec = (await replica_jobs(db, "echo"))[-1]["spec"]
    assert spec["tasks"][0]["env"]["CORRAL_SERVICE_REVISION"] == "2"

    await running(db, new, ready=False)
    assert not await step()  # running is not ready
    await set_ready(db, new, True)
    drained = await step()
    assert len(drained.drained) == 1
    assert drained.created == []
    [first_old] = drained.drained
    assert first_old in old
    # Out of rotation now, still running: its job is cancelled only after drain_s.
    assert not await step()
    state = await db.fetchval("SELECT cancel_requested_at IS NULL FROM api.jobs WHERE id = $1", first_old)
    assert state is True
    await asyncio.sleep(0.35)
    cancelled = await step()
    assert cancelled.cancelled == [first_old]
    assert await db.fetchval("SELECT cancel_requested_at IS NOT NULL FROM api.jobs WHERE id = $1", first_old)
    # With the old one stopping, the next new replica starts: never more than 3 at once.
    second = await step()
    assert len(second.created) == 1
    await ended(db, first_old)
    await running(db, second.created[0], ready=True)
    last = await step()
    assert last.forgotten == [first_old]
    assert last.drained == [o for o in old if o != first_old]
    replicas = await replica_jobs(db, "echo")
    assert sorted(r["revision"] for r in replicas if not r["draining"]) == [2, 2]


async def test_scaling_down_drains_the_unready_and_newest_first_then_cancels(
    client: httpx.AsyncClient, db: Database, step: StepFn
) -> None:
    await client.post("/api/v1/services", json=service_spec(replicas=3))
    await step()
    jobs = [r["job_id"] for r in await replica_jobs(db, "echo")]
    await running(db, jobs[0], ready=True)
    await running(db, jobs[1], ready=False)
    await running(db, jobs[2], ready=True)
    await client.post("/api/v1/services/echo/scale", json={"replicas": 1})
    down = await step()
    assert down.drained == [jobs[1], jobs[2]]  # not ready first, then the newest
    assert down.created == []
    cancelled = await step()  # drain_s is 0
    assert sorted(cancelled.cancelled) == sorted([jobs[1], jobs[2]])
    await client.post("/api/v1/services/echo/scale", json={"replicas": 0})
    assert (await step()).drained == [jobs[0]]
    for job_id in jobs:
        await ended(db, job_id)
    await step()
    status = (await client.get("/api/v1/services/echo")).json()
    assert status["state"] == "ScaledToZero"
    assert status["replica_list"] == []


async def test_a_deleted_service_is_drained_and_removed_once_its_replicas_ended(
    client: httpx.AsyncClient, db: Database, step: StepFn
) -> None:
    await client.post("/api/v1/services", json=service_spec(replicas=2))
    await step()
    jobs = [r["job_id"] for r in await replica_jobs(db, "echo")]
    deleting = await client.delete("/api/v1/services/echo")
    assert deleting.status_code == 202
    assert deleting.json()["reason"] == "being deleted: 2 replicas left to drain and stop"
    refused = await client.post("/api/v1/services/echo/scale", json={"replicas": 3})
    assert refused.status_code == 409
    assert "being deleted" in refused.json()["detail"]
    assert (await client.delete("/api/v1/services/echo")).status_code == 202  # harmless again
    drained = await step()
    assert sorted(drained.drained) == sorted(jobs)
    assert drained.created == []
    # PENDING replicas are cancelled at once by the cancel path (drain_s 0).
    await step()
    assert {r["state"] for r in await replica_jobs(db, "echo")} == {"CANCELLED"}
    gone = await step()
    assert gone.deleted
    assert (await client.get("/api/v1/services/echo")).status_code == 404
    assert await db.fetchval("SELECT count(*) FROM api.jobs WHERE id = ANY($1::text[])", jobs) == 2


async def test_one_process_holds_the_controllers_lock_at_a_time(database_url: str) -> None:
    first, second = ControllerLease(database_url), ControllerLease(database_url)
    try:
        assert await first.acquire() is not None
        assert await second.acquire() is None
        first.release()
        for _ in range(50):  # the server notices the closed session at once, or nearly
            if await second.acquire() is not None:
                break
            await asyncio.sleep(0.05)
        assert second.conn is not None
    finally:
        first.release()
        second.release()


async def test_a_service_whose_replica_crashes_is_degraded_never_ready(
    client: httpx.AsyncClient, db: Database, step: StepFn
) -> None:
    spec = service_spec(replicas=2)
    spec["retry"] = {"backoff_s": 4.0, "max_backoff_s": 60.0}
    await client.post("/api/v1/services", json=spec)
    await step()
    healthy, crashing = [r["job_id"] for r in await replica_jobs(db, "echo")]
    await running(db, healthy, ready=True)
    await attempts.known_nodes(db, NODE)
    for _ in range(3):
        assert await crash(db, crashing) == "PENDING"  # the launcher's decision: never FAILED
    assert not await step()  # the same replica, restarting: nothing for the controller to do
    status = (await client.get("/api/v1/services/echo")).json()
    assert status["state"] == "Degraded"
    assert status["reason"].startswith(
        f"1 of 2 replicas ready; replica {crashing}: task main-0 exited with code 1 (3 crashes in a row);"
        " 2 restarts, next start in "
    )
    replica = next(r for r in status["replica_list"] if r["job_id"] == crashing)
    assert (replica["state"], replica["restarts"], replica["ready"]) == ("CrashLoopBackOff", 2, False)
    wait_s = int(replica["reason"].rsplit("next start in ", 1)[1].split()[0])
    assert 14 <= wait_s <= 16  # 4, 8, then 16 s


async def test_the_running_controller_acts_when_woken(
    client: httpx.AsyncClient, db: Database, database_url: str
) -> None:
    controller = ServiceController(
        db, shape_cache(JobRepository(db)), ControllerLease(database_url), period_s=30.0
    )
    task = asyncio.create_task(controller.run())
    try:
        for _ in range(100):  # its lock taken, its first pass done
            if controller.lease.conn is not None and not controller.woken.is_set():
                break
            await asyncio.sleep(0.02)
        await client.post("/api/v1/services", json=service_spec(replicas=1))
        controller.wake()  # what the routes of its own process do; the period alone is 30 s
        for _ in range(100):
            if await replica_jobs(db, "echo"):
                break
            await asyncio.sleep(0.02)
        assert len(await replica_jobs(db, "echo")) == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert controller.lease.conn is None  # the lock given back


async def test_an_owner_who_lost_the_vc_gets_no_new_replica_and_the_status_says_why(
    users: Users, db: Database, step: StepFn
) -> None:
    made = await users.admin.put("/api/v1/virtual-clusters/vision", json={"allowed_groups": ["vision"]})
    assert made.status_code in (200, 201), made.text
    spec = {**service_spec(replicas=1), "virtual_cluster": "vision"}
    assert (await users.alice.post("/api/v1/services", json=spec)).status_code == 201
    [first] = (await step()).created
    assert (await users.admin.delete("/api/v1/groups/vision/members/alice")).status_code == 204
    await ended(db, first, "FAILED")

    refused = await step()
    assert (refused.forgotten, refused.created) == ([first], [])
    status = (await users.alice.get("/api/v1/services/echo")).json()
    assert status["state"] == "Unavailable"
    assert status["reason"].startswith(
        "0 of 1 replicas ready; cannot create a replica: you may not submit to virtual cluster 'vision'"
    )
    # Not tried again at every pass: the refusal stands until it is due again or the service changes.
    again = await step()
    assert (again.created, again.held_back) == ([], True)
    assert await replica_jobs(db, "echo") == []
    # An admin's new template is checked with the owner's rights: the admin's would let it by.
    changed = await users.admin.put("/api/v1/services/echo/spec", json=spec)
    assert changed.status_code == 403
    assert "virtual cluster 'vision'" in changed.json()["detail"]

    assert (await users.admin.put("/api/v1/groups/vision/members/alice")).status_code == 200
    assert (await users.alice.post("/api/v1/services/echo/scale", json={"replicas": 1})).status_code == 200
    back = await step()  # changed by a route: tried at once
    assert len(back.created) == 1
    status = (await users.alice.get("/api/v1/services/echo")).json()
    assert status["reason"] == f"0 of 1 replicas ready; replica {back.created[0]}: waiting to be placed"


async def test_an_owner_who_left_a_models_group_gets_no_new_replica(
    users: Users, db: Database, step: StepFn
) -> None:
    job = await trained(db, users.carol)
    shared = await users.carol.post(
        "/api/v1/models/digits/versions", json={"from": f"{job}:model", "group": "vision"}
    )
    assert shared.status_code == 201, shared.text
    spec = {**service_spec(replicas=1), "inputs": [{"model": "digits@latest"}]}
    assert (await users.alice.post("/api/v1/services", json=spec)).status_code == 201
    [first] = (await step()).created
    assert (await users.admin.delete("/api/v1/groups/vision/members/alice")).status_code == 204
    await ended(db, first, "FAILED")

    refused = await step()
    assert refused.created == []
    reason = (await users.alice.get("/api/v1/services/echo")).json()["reason"]
    assert reason.startswith("0 of 1 replicas ready; cannot create a replica: inputs[0]: "), reason
    assert "digits" in reason
    assert await replica_jobs(db, "echo") == []


async def test_a_service_whose_stored_template_is_broken_does_not_stop_the_others(
    client: httpx.AsyncClient, db: Database, controller: ServiceController
) -> None:
    await client.post("/api/v1/services", json=service_spec(name="broken", replicas=1))
    await client.post("/api/v1/services", json=service_spec(name="echo", replicas=1))
    await db.execute(
        'UPDATE api.services SET spec = \'{"name": "broken", "kind": 7}\' WHERE name = \'broken\''
    )
    async with db.connection() as conn:
        steps = await controller.pass_once(conn)
        assert "broken" not in steps
        assert len(steps["echo"].created) == 1
        await controller.pass_once(conn)  # and again: skipped, not a crash
    assert await replica_jobs(db, "broken") == []
    assert len(await replica_jobs(db, "echo")) == 1
