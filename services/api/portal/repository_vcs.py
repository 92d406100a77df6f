"""What the virtual-clusters page reads beyond the cluster slice's ``list_vcs``: the GPUs
waiting jobs ask for, and who holds a VC's GPUs. SQL only, each one query for every VC
shown (``sql/vcs.sql``); ``routes_vcs.py`` puts them together per GPU type.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.api.portal.repository import SQL
from shared.db.pool import Database


@dataclass(frozen=True, slots=True)
class DemandRow:
    vc: str
    gpu_type: str | None  # None: the jobs take any GPU type
    jobs: int
    gpus: int


@dataclass(frozen=True, slots=True)
class HolderRow:
    vc: str
    username: str
    model: str | None
    borrowed: bool
    gpus: int


class VcsPageRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def waiting_demand(self, vcs: list[str]) -> list[DemandRow]:
        return [DemandRow(**r) for r in await self._db.fetch(SQL.vcs_waiting_demand, vcs)]

    async def holders(self, vcs: list[str]) -> list[HolderRow]:
        return [HolderRow(**r) for r in await self._db.fetch(SQL.vcs_users, vcs)]
