"""A job holding shares of GPUs on its page: its GPUs as the fraction it asked, and beside
each task's GPU its share and the memory its processes use, as its node last read it."""

from __future__ import annotations

from shared.db.pool import Database
from shared.ids import new_job_id
from tests.portal.conftest import Browser
from tests.portal.test_job_page import attempt_rows
from tests.portal.test_jobs_page import insert_attempt


async def test_a_sharers_page_shows_its_share_and_what_it_uses(db: Database, portal: Browser) -> None:
    job = new_job_id()
    spec = {
        "name": "sweep",
        "tasks": [{"name": "main", "instances": 2, "command": "x", "resources": {"gpus": 0.5}}],
    }
    await db.execute(
        "INSERT INTO api.jobs (id, name, username, virtual_cluster, spec, total_gpus, state)"
        " VALUES ($1, 'sweep', 'root', 'default', $2, 1, 'RUNNING')",
        job,
        spec,
    )
    read = await insert_attempt(db, job)
    await insert_attempt(db, job, task_index=1)  # its use not read yet
    await db.execute("UPDATE launcher.attempts SET gpu_memory_used_mb = 20000 WHERE id = $1", read)
    page = await portal.get(f"/jobs/{job}")
    assert page.status_code == 200
    assert "<dt>GPUs</dt><dd>1</dd>" in page.text  # two halves
    rows = attempt_rows(page.text)
    assert rows[0][4] == "2,3 (0.5 of it, 20,000 MiB used)"
    assert rows[1][4] == "2,3 (0.5 of it)"
