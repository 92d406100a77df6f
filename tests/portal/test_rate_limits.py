"""The portal's form posts are rate-limited by session as the API's calls are by token,
and a resubmit from a job's page draws on the submit bucket."""

from __future__ import annotations

import httpx

from services.api.app import create_app
from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.api.settings import ApiSettings, Settings
from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.db.pool import Database
from shared.jobs import JobSpec
from shared.service import Health
from tests.portal.conftest import Browser


async def _jobs(db: Database) -> int:
    count: int = await db.fetchval("SELECT count(*) FROM api.jobs")
    return count


async def test_a_sessions_resubmits_draw_on_the_submit_bucket(db: Database) -> None:
    settings = Settings(api=ApiSettings(submit_rate_limit_per_s=0.01, submit_rate_limit_burst=1))
    app = create_app(db, Health("api", {}), settings)
    await upsert_token(TenantRepository(db), "tok-ann", "ann", hash_token("crl_ann"), "user", "ann")
    spec = JobSpec.model_validate({"name": "again", "tasks": [{"name": "main", "command": "true"}]})
    job_id = (await Submitter(JobRepository(db)).submit(spec, "ann", "ann")).job.id
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://corral.test") as http:
        ann = Browser(http)
        assert (await ann.sign_in("crl_ann")).status_code == 303
        first = await ann.post(f"/jobs/{job_id}/resubmit")
        assert first.status_code == 303
        second = await ann.post(f"/jobs/{job_id}/resubmit")
        assert second.status_code == 429
        assert int(second.headers["Retry-After"]) >= 1
        assert "submits per second" in second.text
        # Reads are not submits: the page still opens.
        assert (await ann.get(f"/jobs/{job_id}")).status_code == 200
    assert await _jobs(db) == 2
