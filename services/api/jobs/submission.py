"""What a submit decides: whether the job may be stored, and how.

A job is refused (nothing stored) when its VC does not exist or the user may not use it
(one 403 for both, so a user cannot learn which VCs other teams have), or when no
registered node could ever hold it (``admission.py``). Otherwise it is stored as
PENDING with its ``job.submitted`` event, atomically.

The common submit (no secrets, no idempotency key) is one statement that checks the VC,
stores the job, its event and the call's audit row at once: no BEGIN and COMMIT round
trips. When that statement stores nothing, the transaction of the full path finds out
why (or, should the VC have appeared meanwhile, submits). A submit with secrets, a copy
of another job's secrets (a resubmit) or an ``Idempotency-Key`` takes that transaction
from the start, and so does a job with inputs: each is pinned to the artifact it names
now, in that transaction, and refused (422) when the submitter may not use it
(``services/api/models/inputs.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.api import SOURCE
from services.api.audit import AuditEntry
from services.api.jobs.admission import ClusterShape, ShapeCache, check_can_ever_run
from services.api.jobs.idempotency import IdempotencyKey
from services.api.jobs.repository import JobRepository, JobRow, JobWrites, NewJob
from services.api.jobs.ssh_access import check_user_keys
from services.api.jobs.storage_access import check_storage
from services.api.models.inputs import pin_inputs, record_inputs
from services.api.models.repository import Reader
from shared.errors import Forbidden, InvalidInput
from shared.events import JobSubmitted
from shared.events.jobs import JobSubmittedData
from shared.ids import new_job_id
from shared.jobs import JobSpec


@dataclass(frozen=True, slots=True)
class Submitted:
    job: JobRow
    replayed: bool = False  # an Idempotency-Key's earlier job, as it is now
    audited: bool = False  # the call's audit row went in with the job


def shape_cache(repo: JobRepository) -> ShapeCache:
    """The cluster's shape as the submit checks read it, a few seconds old at most."""

    async def load() -> ClusterShape:
        return ClusterShape.of(await repo.cluster_shape())

    return ShapeCache(load)


class Submitter:
    def __init__(self, repo: JobRepository, shapes: ShapeCache | None = None) -> None:
        self.repo = repo
        self.shapes = shapes if shapes is not None else shape_cache(repo)

    async def submit(
        self,
        spec: JobSpec,
        username: str,
        vc_user: str | None,
        *,
        secrets: dict[str, str] | None = None,
        idempotency: IdempotencyKey | None = None,
        secrets_from: str | None = None,
        tags: list[str] | None = None,
        audit: tuple[AuditEntry, int] | None = None,
    ) -> Submitted:
        """Store the job as PENDING and its ``job.submitted`` event, or refuse it.

        ``secrets`` (environment variable → value) are stored apart from the spec
        (``api.job_secrets``); ``secrets_from`` copies another job's (a resubmit). With
        ``idempotency``, a key this user already used for the same request returns that
        job instead, and for another request raises ``IdempotencyKeyReused``. ``audit``
        (the call's entry and status): written with the job when the submit is one
        statement, and then ``audited`` says so (services/api/audit.py)."""
        check_can_ever_run(spec, await self.shapes.get())
        await check_storage(self.repo.db, spec, vc_user)
        await check_user_keys(self.repo.db, spec, username)
        job = NewJob(new_job_id(), spec, username, tags)
        event = JobSubmitted(
            source=SOURCE,
            subject=job.id,
            data=JobSubmittedData(
                job_id=job.id,
                name=spec.name,
                user=username,
                virtual_cluster=spec.virtual_cluster,
                total_gpus=spec.total_gpus,
            ),
        )
        if not secrets and secrets_from is None and idempotency is None and not spec.inputs:
            stored = await self.repo.submit_at_once(job, vc_user, event, audit)
            if stored is not None:
                return Submitted(stored, audited=audit is not None)
        async with self.repo.transaction() as tx:
            await self._check_vc(tx, spec, vc_user)
            if idempotency is not None:
                earlier = await idempotency.claim(tx, username, job.id)
                if earlier is not None:
                    replayed = await tx.get_job(earlier)
                    assert replayed is not None  # the key's job: deleted with it (cascade)
                    return Submitted(replayed, replayed=True)
            inputs = await pin_inputs(tx.conn, spec.inputs, Reader(username, vc_user is None))
            stored = await tx.insert_job(job)
            await record_inputs(tx.conn, job.id, inputs)
            if secrets:
                await tx.insert_secrets(job.id, secrets)
            if secrets_from is not None:
                await tx.copy_secrets(secrets_from, job.id)
            await tx.append(event, aggregate=job.id)
        if idempotency is not None:
            await idempotency.sweep(self.repo)
        return Submitted(stored)

    async def check(self, spec: JobSpec, username: str, vc_user: str | None) -> None:
        """The checks of a submit, storing nothing (for dry runs)."""
        check_can_ever_run(spec, await self.shapes.get())
        await check_storage(self.repo.db, spec, vc_user)
        await check_user_keys(self.repo.db, spec, username)
        async with self.repo.transaction() as tx:
            await self._check_vc(tx, spec, vc_user)
            await pin_inputs(tx.conn, spec.inputs, Reader(username, vc_user is None))

    @staticmethod
    async def _check_vc(tx: JobWrites, spec: JobSpec, vc_user: str | None) -> None:
        """A user gets the same 403 for a VC that does not exist and for one they may not
        use: telling them apart would tell them which VCs other teams have."""
        usable = await tx.vc_usable(spec.virtual_cluster, vc_user)
        if vc_user is not None and not usable:
            raise Forbidden(
                f"you may not submit to virtual cluster {spec.virtual_cluster!r}: it does not exist or"
                " none of your groups has access to it. `corral vcs` (GET /api/v1/virtual-clusters)"
                " lists those you can use; ask an admin to add one of your groups to its access list"
            )
        if usable is None:
            raise InvalidInput(
                f"virtual cluster {spec.virtual_cluster!r} does not exist; `corral vcs` (GET"
                " /api/v1/virtual-clusters) lists those you can submit to"
            )
