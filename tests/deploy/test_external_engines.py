"""NATS and Postgres, installed from their own charts (deploy/external): the values and
the clusters Corral needs, and the README that says how to install them."""

from __future__ import annotations

import re

import yaml

from shared.db.credentials import SERVICE_ROLES
from tests.deploy.render import DEPLOY


def test_nats_values_cluster_three_servers_that_sync_every_write() -> None:
    values = yaml.safe_load((DEPLOY / "external" / "nats-values.yaml").read_text())
    assert values["config"]["cluster"] == {"enabled": True, "replicas": 3}
    jetstream = values["config"]["jetstream"]
    assert jetstream["enabled"] is True
    assert jetstream["fileStore"]["pvc"]["enabled"] is True
    assert jetstream["merge"]["sync_interval"] == "always"


def test_postgres_clusters_write_the_secret_the_pods_read() -> None:
    """The CloudNativePG Clusters are custom resources with no schema here: these are
    field checks, not a validation."""
    for variant, instances in (("dev", 1), ("production", 3)):
        cluster = yaml.safe_load((DEPLOY / "external" / f"postgres-{variant}.yaml").read_text())
        assert (cluster["apiVersion"], cluster["kind"]) == ("postgresql.cnpg.io/v1", "Cluster")
        # CloudNativePG names the application Secret <cluster>-app, with the URL in `uri`.
        assert cluster["metadata"]["name"] + "-app" == "corral-db-app"
        assert cluster["spec"]["instances"] == instances
        assert cluster["spec"]["bootstrap"]["initdb"] == {"database": "corral", "owner": "corral"}
    production = yaml.safe_load((DEPLOY / "external" / "postgres-production.yaml").read_text())
    assert production["spec"]["postgresql"]["synchronous"]["number"] >= 1  # a synchronous standby


def test_postgres_clusters_make_the_service_roles_the_owner_may_not() -> None:
    """The owner Corral migrates as has no CREATEROLE: the operator makes the roles,
    without a login, and the migration grants to them."""
    for variant in ("dev", "production"):
        cluster = yaml.safe_load((DEPLOY / "external" / f"postgres-{variant}.yaml").read_text())
        roles = {role["name"]: role for role in cluster["spec"]["managed"]["roles"]}
        assert set(roles) == set(SERVICE_ROLES.values())
        assert all(role["ensure"] == "present" and role["login"] is False for role in roles.values())


def test_readme_installs_the_engines_from_their_charts() -> None:
    readme = (DEPLOY / "README.md").read_text()
    for needed in (
        "nats/nats",
        "deploy/external/nats-values.yaml",
        "cloudnative-pg",
        "postgres-production.yaml",
    ):
        assert needed in readme
    assert re.search(r"kubectl -n corral create secret generic corral-admin-token", readme)
