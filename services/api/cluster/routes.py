"""The cluster slice's routes: node membership, nodes and GPUs, service instances, VCs."""

from __future__ import annotations

from fastapi import APIRouter

from services.api.cluster import routes_node_join, routes_nodes, routes_services, routes_vcs

router = APIRouter()
for part in (routes_node_join, routes_nodes, routes_services, routes_vcs):
    router.include_router(part.router)
