"""Alerts reach real receivers from a running stack; a killed alerter re-sends after restart."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable

import asyncpg

from tests.e2e.stack import Stack, corral, submit, wait_state
from tests.fixtures.receivers import Receivers


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} did not happen in {timeout_s}s")


async def _route_job_failures(stack: Stack, receivers: Receivers, path: str) -> None:
    """Warnings to a webhook at ``path``, critical alerts to a PagerDuty receiver; wait
    until the alerter has the routing in force."""
    (stack.home / "routing.yaml").write_text(
        "receivers:\n"
        f"  - {{name: tools, webhook: {{url: '{receivers.url(path)}'}}}}\n"
        f"  - {{name: oncall, pagerduty: {{routing_key: R0KEY, url: '{receivers.url('pd')}'}}}}\n"
        "route:\n"
        "  receiver: tools\n"
        "  routes:\n"
        "    - {match: {severity: critical}, receiver: oncall}\n"
    )
    await _until(lambda: "routing in force" in stack.logs("alerter"), "the routing reload")


async def test_a_failed_job_reaches_the_webhook_of_the_routing_file(
    stack: Stack, receivers: Receivers
) -> None:
    await _route_job_failures(stack, receivers, "hook")
    async with stack.client() as http:
        job_id = await submit(http, "echo oops; exit 3")
        await wait_state(http, job_id, {"FAILED"})
        await _until(lambda: bool(receivers.bodies("hook")), "the webhook")
    (body,) = receivers.bodies("hook")
    assert body["version"] == "4"
    assert body["status"] == "firing"
    assert body["alerts"][0]["labels"]["job"] == job_id
    assert body["alerts"][0]["labels"]["rule"] == "JobFailed"
    # For the job's owner: the alert names them, so a route can reach them.
    assert body["alerts"][0]["labels"]["user"] == "admin"
    assert body["alerts"][0]["labels"]["virtual_cluster"] == "default"
    assert receivers.bodies("pd") == []  # a warning: not routed to the pager


async def test_an_alerter_killed_mid_delivery_sends_again_after_restart(
    stack: Stack, receivers: Receivers
) -> None:
    await _route_job_failures(stack, receivers, "hang")
    async with stack.client() as http:
        await wait_state(http, await submit(http, "exit 3"), {"FAILED"})
    await _until(lambda: bool(receivers.bodies("hang")), "the first delivery")
    old = stack.kill("alerter")  # mid-request: the receiver has not answered
    receivers.release.set()  # the receiver recovers: from now on it answers at once
    await stack.wait_restarted("alerter", old)
    await _until(lambda: len(receivers.bodies("hang")) >= 2, "the delivery after the restart", timeout_s=30)
    conn = await asyncpg.connect(stack.env["CORRAL_DATABASE_URL"])
    try:
        row = await conn.fetchrow("SELECT state, attempts, last_status FROM alerter.notifications")
    finally:
        await conn.close()
    assert row is not None
    assert row["state"] == "sent"
    assert row["attempts"] == 2
    assert row["last_status"] == 200
    assert receivers.bodies("hang")[0] == receivers.bodies("hang")[1]  # the same notification, twice


async def test_a_silence_mutes_notifications_until_it_is_lifted(stack: Stack, receivers: Receivers) -> None:
    await _route_job_failures(stack, receivers, "hook")
    created = await asyncio.to_thread(
        corral, stack, "silence", "rule=JobFailed", "--for", "1h", "--comment", "drill"
    )
    assert created.returncode == 0, created.stderr
    silence_id = created.stdout.split(":")[0]
    await _until(lambda: "active" in corral(stack, "silences").stdout, "the silence", timeout_s=10)
    async with stack.client() as http:
        muted = await submit(http, "exit 3")
        await wait_state(http, muted, {"FAILED"})
        await asyncio.sleep(2.0)
        assert receivers.bodies("hook") == []
        alerts = (await http.get("/api/v1/alerts")).json()["items"]
        assert [a["labels"]["job"] for a in alerts] == [muted]  # still stored and listed
        lifted = await asyncio.to_thread(corral, stack, "unsilence", silence_id)
        assert lifted.returncode == 0, lifted.stderr
        await _until(lambda: "expired" in corral(stack, "silences").stdout, "the expiry", timeout_s=10)
        heard = await submit(http, "exit 3")
        await wait_state(http, heard, {"FAILED"})
        await _until(lambda: bool(receivers.bodies("hook")), "the webhook")
    assert [b["alerts"][0]["labels"]["job"] for b in receivers.bodies("hook")] == [heard]


async def test_rules_changed_through_the_cli_are_in_force_without_a_restart(
    stack: Stack, receivers: Receivers
) -> None:
    await _route_job_failures(stack, receivers, "hook")
    overrides = stack.home / "my-rules.yaml"
    overrides.write_text("events:\n  job_failed:\n    severity: info\n    labels: {team: ml-platform}\n")
    bad = stack.home / "bad-rules.yaml"
    bad.write_text("events:\n  job_failed: {severity: page}\n")
    refused = await asyncio.to_thread(corral, stack, "alert-rules", "set", str(bad))
    assert refused.returncode != 0
    assert "events.job_failed.severity" in refused.stderr
    accepted = await asyncio.to_thread(corral, stack, "alert-rules", "set", str(overrides))
    assert accepted.returncode == 0, accepted.stderr
    await _until(
        lambda: "# in force; overrides version 1" in corral(stack, "alert-rules").stdout, "the overrides"
    )
    shown = corral(stack, "alert-rules").stdout
    assert "team: ml-platform" in shown
    async with stack.client() as http:
        job_id = await submit(http, "exit 3")
        await wait_state(http, job_id, {"FAILED"})
        await _until(lambda: bool(receivers.bodies("hook")), "the webhook")
    (alert,) = receivers.bodies("hook")[0]["alerts"]
    assert alert["labels"]["team"] == "ml-platform"
    assert alert["labels"]["severity"] == "info"
    reset = await asyncio.to_thread(corral, stack, "alert-rules", "reset")
    assert reset.returncode == 0, reset.stderr
    await _until(lambda: "team: ml-platform" not in corral(stack, "alert-rules").stdout, "the reset")


async def test_a_hung_service_is_reported_down_and_recovers(stack: Stack) -> None:
    """A scheduler that stops answering (SIGSTOP: a hang, which no restart policy sees)
    stops beating; ServiceDown fires, and resolves itself when it runs again."""
    (stack.home / "alert-rules.yaml").write_text("conditions:\n  service_down: {after_s: 10}\n")
    await _until(lambda: "after_s: 10.0" in corral(stack, "alert-rules").stdout, "the rules file")
    listed = corral(stack, "instances").stdout
    assert {"api", "scheduler", "launcher", "monitor", "alerter"} <= {
        line.split()[0]
        for line in listed.split("\n\n")[0].splitlines()[1:]  # (the instances' table)
    }
    scheduler = stack.pid("scheduler")
    os.kill(scheduler, signal.SIGSTOP)
    try:
        await _until(lambda: "ServiceDown" in corral(stack, "alerts").stdout, "the alert", timeout_s=30)
        firing = corral(stack, "alerts", "--state", "firing").stdout
        assert "service scheduler is down: none of its 1 instance(s) on record was heard for" in firing
    finally:
        os.kill(scheduler, signal.SIGCONT)
    await _until(
        lambda: "ServiceDown" not in corral(stack, "alerts", "--state", "firing").stdout, "the resolve"
    )
