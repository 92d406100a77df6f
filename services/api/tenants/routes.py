"""The tenants slice's routes: tokens, users (and ``whoami``, their ssh keys), groups, the audit log."""

from __future__ import annotations

from fastapi import APIRouter

from services.api.tenants import (
    routes_audit,
    routes_groups,
    routes_ssh_keys,
    routes_tokens,
    routes_users,
)

router = APIRouter()
for part in (routes_tokens, routes_users, routes_ssh_keys, routes_groups, routes_audit):
    router.include_router(part.router)
