"""Virtual clusters with real processes: a VC created at runtime takes its quota back from
a job borrowing idle GPUs, through the launcher's preemption, and the borrower returns to
the queue with its history (no restart of anything, no job lost or run twice)."""

from __future__ import annotations

import asyncio

from tests.e2e.stack import HOLD, Stack, corral, submit, wait_state


async def test_a_new_vc_reclaims_its_quota_from_a_borrower(stack: Stack) -> None:
    async with stack.client() as http:
        # The default VC has no quota: its job runs on idle GPUs, as a borrower.
        borrower = await submit(http, HOLD, gpus=8, name="borrower")
        await wait_state(http, borrower, {"RUNNING"})
        created = corral(stack, "vc", "set", "vision", "--quota", "H100=4", "--max-gpus-per-user", "8")
        assert created.returncode == 0, created.stderr
        assert created.stdout.splitlines()[1].split()[:2] == ["vision", "H100:4"]
        owner = await submit(http, HOLD, gpus=4, name="owner", virtual_cluster="vision")
        running = await wait_state(http, owner, {"RUNNING"}, timeout_s=45)
        assert len(running["attempts"][0]["gpu_indices"]) == 4
        back = await wait_state(http, borrower, {"PENDING", "SCHEDULED", "RUNNING"})
        job = (await http.get(f"/api/v1/jobs/{borrower}")).json()
        first = job["attempts"][0]
        assert first["stop_reason"].startswith("preempted: reclaimed for a job within its VC's quota")
        assert job["retries"] == 0, "being reclaimed is not the job's fault"
        # 8 GPUs, 4 held by the owner: the borrower waits for them, and says so.
        assert back["state"] == "PENDING"
        await asyncio.sleep(1.5)
        waiting = (await http.get(f"/api/v1/jobs/{borrower}")).json()["pending"]
        assert (waiting["reason"], waiting["detail"]) == (
            "InsufficientGPUs",
            "needs 8 GPUs; 4 are free on ready nodes",
        )
        listed = corral(stack, "vcs")
        assert listed.returncode == 0, listed.stderr
        rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
        assert rows["vision"][:4] == ["vision", "H100:4", "H100:4", "-"]
        stack.release(owner)
        await wait_state(http, owner, {"SUCCEEDED"})
        again = await wait_state(http, borrower, {"RUNNING"}, timeout_s=30)
        assert [a["attempt_no"] for a in again["attempts"]] == [1, 2], "the first attempt is kept"
        stack.release(borrower)
        await wait_state(http, borrower, {"SUCCEEDED"})
