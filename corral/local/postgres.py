"""A private Postgres cluster from the machine's own binaries.

``initdb`` once into ``<dir>/data`` with password authentication (the password is kept
in ``<dir>/password``, mode 0600), then ``postgres`` as a child process listening on
loopback only, and on a Unix socket in ``<dir>/run``. Postgres refuses to run as root, so
when we are root the cluster belongs to an unprivileged user (``nobody`` by default) and
its processes run as that user.

The services of a local stack connect through the socket (``local_url``): a round trip
over it costs client and server about a tenth less CPU than over loopback TCP
(measured: 54 and 39 µs against 60 and 44 µs per ``SELECT``), and a job takes some forty
round trips. The TCP port stays for tools and for anything that parses the URL.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from corral.local.ports import child_output, wait_until_listening

_SEARCH_DIRS = ("/usr/lib/postgresql/{v}/bin", "/usr/local/pgsql/bin")
# A Unix socket's path must fit in sockaddr_un's 108 bytes, NUL included.
_MAX_SOCKET_PATH = 107


def find_pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for version in ("17", "16", "15", "14", "13"):
        for template in _SEARCH_DIRS:
            candidate = Path(template.format(v=version)) / name
            if candidate.exists():
                return str(candidate)
    raise FileNotFoundError(
        f"Postgres binary {name!r} not found; install PostgreSQL (e.g. apt-get install "
        "postgresql) or set CORRAL_DATABASE_URL to an existing server"
    )


@dataclass
class LocalPostgres:
    directory: Path
    port: int
    run_as: str = "nobody"
    superuser: str = "corral"
    database: str = "corral"
    process: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def password(self) -> str:
        return (self.directory / "password").read_text().strip()

    @property
    def socket_dir(self) -> Path | None:
        """Where the server's Unix socket is, or None when that path would be too long
        for a socket (a deep home directory): then it listens on TCP only."""
        directory = self.directory.absolute() / "run"
        fits = len(str(directory / f".s.PGSQL.{self.port}")) <= _MAX_SOCKET_PATH
        return directory if fits else None

    def url(self, database: str | None = None) -> str:
        return (
            f"postgresql://{self.superuser}:{self.password}@127.0.0.1:{self.port}/{database or self.database}"
        )

    def local_url(self, database: str | None = None) -> str:
        """The URL for clients on this machine: through the Unix socket where there is
        one (see the module's docstring), else ``url``."""
        socket_dir = self.socket_dir
        if socket_dir is None:
            return self.url(database)
        return (
            f"postgresql://{self.superuser}:{self.password}@/{database or self.database}"
            f"?host={quote(str(socket_dir), safe='/')}&port={self.port}"
        )

    def _owner(self) -> tuple[int, int] | None:
        """(uid, gid) to run the cluster as when we are root; None runs it as ourselves."""
        if os.geteuid() != 0:
            return None
        entry = pwd.getpwnam(self.run_as)
        return entry.pw_uid, entry.pw_gid

    def _run_as_owner(self, args: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        owner = self._owner()
        if owner is None:
            return subprocess.Popen(args, cwd="/", **kwargs)  # type: ignore[call-overload,no-any-return]
        return subprocess.Popen(  # type: ignore[call-overload,no-any-return]
            args, cwd="/", user=owner[0], group=owner[1], extra_groups=[], **kwargs
        )

    def _chown(self, path: Path) -> None:
        owner = self._owner()
        if owner is not None:
            os.chown(path, *owner)

    def init(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        password_file = self.directory / "password"
        if not password_file.exists():
            fd = os.open(password_file, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(24) + "\n")
        # initdb reads the password from a file the cluster owner can read.
        pwfile = self.directory / ".initdb-pw"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        self._chown(pwfile)
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        self._chown(self.directory)
        self._chown(self.data_dir)
        initdb = self._run_as_owner(
            [
                find_pg_bin("initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                self.superuser,
                "--auth=scram-sha-256",
                f"--pwfile={pwfile}",
                "--encoding=UTF8",
                "--no-instructions",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            output, _ = initdb.communicate(timeout=120)
            if initdb.returncode != 0:
                raise RuntimeError(f"initdb failed: {output.decode(errors='replace')}")
        finally:
            pwfile.unlink(missing_ok=True)

    def start(self, *, log_file: Path | None = None, timeout_s: float = 30.0) -> None:
        self.init()
        socket_dir = self.socket_dir
        if socket_dir is not None:
            socket_dir.mkdir(mode=0o700, exist_ok=True)
            self._chown(socket_dir)
        with child_output(log_file) as log:
            self.process = self._run_as_owner(
                [
                    find_pg_bin("postgres"),
                    "-D",
                    str(self.data_dir),
                    "-p",
                    str(self.port),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    f"unix_socket_directories={socket_dir or ''}",
                    "-c",
                    "max_connections=300",
                    "-c",
                    "shared_buffers=64MB",
                    # A private, disposable-by-design dev cluster: durability of the last
                    # millisecond is traded for speed only where the caller asked (tests).
                    "-c",
                    f"fsync={'off' if os.environ.get('CORRAL_PG_FAST') else 'on'}",
                    *_statement_stats(),
                ],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        wait_until_listening(self.process, self.port, timeout_s, "postgres")
        self._ensure_database()

    def _ensure_database(self) -> None:
        import asyncio

        import asyncpg

        async def create() -> None:
            for _ in range(100):
                try:
                    conn = await asyncpg.connect(self.url("postgres"))
                    break
                except (OSError, asyncpg.CannotConnectNowError):
                    await asyncio.sleep(0.1)
            else:
                raise RuntimeError("postgres accepts no connections")
            try:
                exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", self.database)
                if not exists:
                    await conn.execute(f'CREATE DATABASE "{self.database}"')
            finally:
                await conn.close()

        asyncio.run(create())

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        # SIGINT is Postgres' "fast shutdown": roll back clients, checkpoint, exit.
        self.process.send_signal(2)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _statement_stats() -> list[str]:
    """With ``CORRAL_PG_STATEMENTS=1``: pg_stat_statements loaded (``CREATE EXTENSION
    pg_stat_statements`` then shows what each statement cost), for finding where the
    database's time goes (docs/performance.md); off by default, it costs every statement."""
    if not os.environ.get("CORRAL_PG_STATEMENTS"):
        return []
    return ["-c", "shared_preload_libraries=pg_stat_statements", "-c", "pg_stat_statements.track=all"]
