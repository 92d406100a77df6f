"""``corral join-token``, ``corral join``, ``corral remove-node``, ``corral bus-credentials``:
who belongs to the cluster (services/api/cluster/node_join.py says how joining works)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

import typer

from corral.commands.output import JsonFlag, echo, echo_result
from corral.commands.session import client
from corral.sdk import Client
from corral.sdk.models import Joined

STREAMS = ("jobs", "nodes", "alerts")


def _write_secret(path: Path, secret: str) -> None:
    """0600 from its first byte."""
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
        handle.write(secret + "\n")


def write_node_home(home: Path, joined: Joined) -> Path:
    """Write ``joined`` into ``home``: each secret to its own 0600 file under
    ``credentials/`` (0700), the rest to ``node.env`` (corral/local/node_home.py);
    returns the ``node.env`` path."""
    secrets_dir = home / "credentials"
    secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    secrets_dir.chmod(0o700)
    node = joined.node_id
    nats_password = secrets_dir / f"nats-node-{node}.password"
    database_password = secrets_dir / "postgres-agent.password"
    node_secret = secrets_dir / f"node-{node}.secret"
    _write_secret(nats_password, joined.nats.password)
    _write_secret(database_password, joined.database.password)
    _write_secret(node_secret, joined.node_secret)
    settings = {
        "CORRAL_SERVICES": "agent,exporter",
        "CORRAL_NODE_ID": node,
        "CORRAL_NATS_URL": joined.nats.url,
        "CORRAL_NATS_USER": joined.nats.user,
        "CORRAL_NATS_PASSWORD_FILE": str(nats_password),
        "CORRAL_DATABASE_URL": joined.database.url,
        "CORRAL_DATABASE_PASSWORD_FILE": str(database_password),
        "CORRAL_DATABASE_MIGRATE_ON_START": "false",  # (the control plane's owner migrates)
        "CORRAL_AGENT_NODE_SECRET_FILE": str(node_secret),
    }
    if joined.nats.ca_pem:  # the control plane's CA: its NATS's and Postgres's certificate
        ca_file = secrets_dir / "ca.pem"
        ca_file.write_text(joined.nats.ca_pem)
        settings["CORRAL_NATS_CA_FILE"] = str(ca_file)
        if "sslmode=verify" in joined.database.url:
            settings["CORRAL_DATABASE_URL"] += f"&sslrootcert={quote(str(ca_file), safe='/')}"
    path = home / "node.env"  # (corral/local/node_home.py reads it)
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def register(app: typer.Typer) -> None:
    @app.command("join-token")
    def join_token(
        ctx: typer.Context,
        ttl_s: Annotated[int, typer.Option("--ttl-s", help="how long it may be used, once")] = 3600,
        json_: JsonFlag = False,
    ) -> None:
        """Make a one-time token with which a machine joins as a node (admin)."""
        with client(ctx) as api:
            made = api.create_join_token(ttl_s)
        echo_result(
            made,
            f"{made.token}\nexpires {made.expires_at:%Y-%m-%d %H:%M} UTC; on the new machine:\n"
            f"  {made.command}",
            as_json=json_,
        )

    @app.command("join")
    def join(
        api_url: Annotated[
            str, typer.Option("--api", help="the control plane's API, e.g. http://10.0.0.1:8080")
        ],
        token: Annotated[str, typer.Option("--token", help="a join token (corral join-token)")],
        node_id: Annotated[str, typer.Option("--node-id", help="this node's name in the cluster")],
    ) -> None:
        """Join this machine as a node: its credentials go to $CORRAL_HOME; `corral up` runs it."""
        home = Path(os.environ.get("CORRAL_HOME", ".corral")).resolve()
        # The join token is this call's only credential (a new machine has no bearer token).
        with Client(api_url, token=token) as api:
            joined = api.join(token, node_id)
        path = write_node_home(home, joined)
        echo(
            f"joined as node {joined.node_id}: its credentials are in {home / 'credentials'} (0600), its "
            f"settings in {path}.\nStart it with: CORRAL_HOME={home} corral up"
        )

    @app.command("remove-node")
    def remove_node(
        ctx: typer.Context, node_id: Annotated[str, typer.Argument(metavar="NODE")], json_: JsonFlag = False
    ) -> None:
        """Revoke a node's credentials (admin): it is cut off, its tasks end as a lost node's."""
        with client(ctx) as api:
            removed = api.remove_node(node_id)
        echo_result(removed, f"node {removed.node_id} removed: {removed.detail}", as_json=json_)

    @app.command("bus-credentials")
    def bus_credentials(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(metavar="NAME", help="the integrator's name")],
        stream: Annotated[
            list[str] | None, typer.Option("--stream", help=f"a stream it may read: {', '.join(STREAMS)}")
        ] = None,
        revoke: Annotated[bool, typer.Option("--revoke", help="revoke its credentials instead")] = False,
        json_: JsonFlag = False,
    ) -> None:
        """Read-only NATS credentials for an integrator (admin); shown once."""
        with client(ctx) as api:
            if revoke:
                api.revoke_bus_credentials(name)
                echo(f"the bus credentials of {name} are revoked")
                return
            made = api.mint_bus_credentials(name, stream or ["jobs"])
        echo_result(
            made,
            f"user {made.user}\npassword {made.password}\nurl {made.url}\nstreams {', '.join(made.streams)} "
            f"(consumer name: {made.consumer})\n{made.detail}",
            as_json=json_,
        )
