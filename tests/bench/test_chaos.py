"""``python -m bench.chaos`` at test size: every kind of fault once, nothing lost.

The run starts its own stack, so it is one subprocess, as a user runs it; its seed is
fixed so a failure here can be replayed with the same faults in the same order. The
judging rules (which overlaps a lost lease explains, which copies still running at the
end are double launches) are checked on their own too, without a stack.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chaos.faults import KINDS
from bench.chaos.jobs import JobPlan, Submission
from bench.chaos.ledger import Copy, overlaps, read_copies, unexplained_overlaps
from bench.chaos.verdict import Evidence, judge

REPO = Path(__file__).resolve().parents[2]
BROKEN_PROMISES = (
    "lost_jobs",
    "double_launches",
    "missed_events",
    "missed_webhooks",
    "succeeded_without_end",
    "doubled_submits",
)


@pytest.mark.e2e
@pytest.mark.timeout(170)
def test_a_short_chaos_run_hits_every_kind_of_fault_and_loses_nothing() -> None:
    command = [sys.executable, "-m", "bench.chaos", "--jobs", "20", "--minutes", "1.75", "--seed", "7"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=160, check=False)
    assert done.stdout.strip(), done.stderr[-3000:]
    verdict = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(verdict)[:8] == [
        "jobs",
        "kills_by_target",
        "lost_jobs",
        "double_launches",
        "max_overlap_s",
        "missed_events",
        "missed_webhooks",
        "max_recovery_s",
    ]
    assert verdict["jobs"] == 20
    assert {key: verdict[key] for key in BROKEN_PROMISES} == dict.fromkeys(BROKEN_PROMISES, 0)
    assert set(verdict["kills_by_target"]) == set(KINDS), verdict["kills_by_target"]
    assert verdict["max_recovery_s"] is not None
    assert math.isfinite(verdict["max_recovery_s"])
    assert verdict["seed"] == 7
    assert "seed 7" in done.stderr.splitlines()[0]


def _ledger(tmp_path: Path, node: str, lines: list[str]) -> None:
    job = tmp_path / node / "job-1"
    job.mkdir(parents=True, exist_ok=True)
    with (job / "ledger").open("a") as ledger:
        ledger.writelines(f"{line}\n" for line in lines)


def test_an_overlap_is_explained_only_by_a_lost_attempt_and_only_briefly(tmp_path: Path) -> None:
    _ledger(tmp_path, "node-a", ["start job-1 main 0 att-a 1 100.0", "hb job-1 main 0 att-a 1 105.0"])
    _ledger(tmp_path, "node-b", ["start job-1 main 0 att-b 2 103.0", "end job-1 main 0 att-b 2 110.0"])
    _ledger(tmp_path, "node-b", ["start job-1 main 1 att-c 1 100.0", "hb job-1 main 1 att-c"])  # cut short
    copies = read_copies(tmp_path)
    assert {a: (c.node, c.index, c.ended) for a, c in copies.items()} == {
        "att-a": ("node-a", 0, False),
        "att-b": ("node-b", 0, True),
        "att-c": ("node-b", 1, False),
    }
    found = overlaps(copies, alive=set(), now=200.0)
    assert [(o.older, o.newer, o.seconds) for o in found] == [("att-a", "att-b", 2.0)]
    assert unexplained_overlaps(found, lost={"att-a"}, allowed_s=6.0) == []
    assert unexplained_overlaps(found, lost=set(), allowed_s=6.0) == found  # never declared lost
    assert unexplained_overlaps(found, lost={"att-a"}, allowed_s=1.0) == found  # too long
    # A stale copy still running at the end overlaps until then.
    assert [o.seconds for o in overlaps(copies, alive={"att-a"}, now=120.0)] == [7.0]


def _evidence(state: str, attempts: list[tuple[str, int, str]], alive: set[str]) -> Evidence:
    """One job of one task whose ``attempts`` (id, number, state) each left a copy."""
    plan = JobPlan(number=0, instances=1, beats=1, exit_code=0)
    copies = {a: Copy("job-1", "main", 0, a, no, "node-a", 100.0 + no, 101.0 + no) for a, no, _ in attempts}
    job = {
        "state": state,
        "attempts": [
            {"id": a, "attempt_no": no, "state": st, "task_role": "main", "task_index": 0}
            for a, no, st in attempts
        ],
    }
    return Evidence(
        seed=1,
        plans=[plan],
        submissions=[Submission(plan, job_id="job-1")],
        jobs={"job-1": job},
        jobs_held=1,
        copies=copies,
        alive=alive,
        ledger_now=200.0,
        sse_terminal={},
        webhook_terminal={},
        kills=[],
        accepted_at=[],
        allowed_overlap_s=6.0,
        duration_s=1.0,
    )


def test_a_copy_running_at_the_end_is_a_double_launch_only_when_no_job_needs_it() -> None:
    lost_then_running = [("att-a", 1, "LOST"), ("att-b", 2, "RUNNING")]
    # The stale copy of a lost attempt, still running: a double launch.
    verdict, findings = judge(_evidence("RUNNING", lost_then_running, alive={"att-a"}))
    assert verdict["double_launches"] == 1
    assert any("still running at the end" in line for line in findings)
    # The job's latest attempt, still running when the time ran out: lost, not doubled.
    verdict, _ = judge(_evidence("RUNNING", lost_then_running, alive={"att-b"}))
    assert (verdict["double_launches"], verdict["lost_jobs"]) == (0, 1)
    # Any copy of a job that has ended.
    verdict, _ = judge(_evidence("SUCCEEDED", [("att-a", 1, "SUCCEEDED")], alive={"att-a"}))
    assert verdict["double_launches"] == 1
