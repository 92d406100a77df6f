"""The job page links a running task's labelled ports through the API's proxy
(``/proxy/{job}/{task}/{label}/``): only the running attempt of a running job, since the
proxy answers 409 for anything else."""

from __future__ import annotations

import re
from datetime import timedelta

from shared.clock import utcnow
from shared.db.pool import Database
from tests.portal.conftest import Browser
from tests.portal.test_jobs_page import insert_attempt, insert_job


def proxy_links(html: str) -> list[str]:
    return re.findall(r'<a href="(/proxy/[^"]+)"', html)


async def test_a_running_tasks_ports_link_through_the_proxy(db: Database, portal: Browser) -> None:
    now = utcnow()
    job = await insert_job(db, user="root", state="RUNNING", instances=2)
    await insert_attempt(db, job, state="EXITED", started=now - timedelta(minutes=9), exit_code=137)
    await insert_attempt(db, job, attempt_no=2, started=now - timedelta(minutes=5))
    await insert_attempt(db, job, task_index=1, state="STARTING")
    page = await portal.get(f"/jobs/{job}")
    assert page.status_code == 200
    # main-0's second attempt runs; its first has ended and main-1 has not started yet.
    assert proxy_links(page.text) == [f"/proxy/{job}/main-0/master/"]


async def test_a_finished_jobs_ports_are_not_links(db: Database, portal: Browser) -> None:
    job = await insert_job(db, user="root", state="SUCCEEDED", finished=utcnow())
    await insert_attempt(db, job, state="RUNNING")  # as the row may still say, briefly
    page = await portal.get(f"/jobs/{job}")
    assert "master: 29500" in page.text
    assert proxy_links(page.text) == []
