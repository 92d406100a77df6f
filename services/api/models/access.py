"""Who may do what with models and artifacts: they follow their tenants.

A model belongs to the user who registered its first version, and may be shared with one
group (named at that first register, by a member of it). Its owner, the group's members
and admins may read it and name it as a job's input; only its owner and admins may add
versions. An artifact is read as its job is (the job's owner, admins), and also by
whoever may read a model with a version of it: a model's readers see what it holds
without reading the job that trained it. Whatever one may not read is reported as not
found, as jobs are, so that its existence does not leak; only a model's name, which all
share, can be learned (a register of a taken name is refused as taken).

Reads filter in SQL with the same rule (``repository.py``'s queries); these functions
decide for one row already read.
"""

from __future__ import annotations

from services.api.models.repository import JobBrief, LockedModel, Reader
from services.api.tenants.auth import Principal


def reader_of(principal: Principal) -> Reader:
    return Reader(principal.username, principal.is_admin)


def may_read_job(job: JobBrief, reader: Reader) -> bool:
    return reader.is_admin or job.username == reader.username


def may_register(model: LockedModel, reader: Reader) -> bool:
    return reader.is_admin or model.owner == reader.username
