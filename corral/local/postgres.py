"""A private Postgres cluster: ``initdb`` once, then ``postgres`` as a child process.

The binaries are Corral's own by default (``pg_install``). The cluster uses password
authentication (SCRAM, for socket and TCP connections alike; the owner's password is
kept in ``<dir>/password``, mode 0600) and listens on loopback, and on a Unix socket;
with ``host`` and ``tls`` (``CORRAL_PG_HOST``: node agents on other machines) also
there, over TLS only. The services log in as roles of their own, with passwords of their own
(``logins.py``); the owner's is for migrations, tools and tests.

**Who runs it.** Postgres refuses to run as root. When we are root, the cluster belongs
to an unprivileged account, ``corral-postgres`` (created as a system account when
missing; ``CORRAL_PG_USER`` names another), and its processes run as that account. An
existing cluster keeps the owner it was made with.

**Where its files are.** That account must reach its data directory, and a private home
(a checkout under ``/root``, a ``mktemp -d``: mode 0700) lets no other account through.
So when the account cannot reach ``<dir>``, the server's own files (``data`` and the
socket's ``run``) go to ``/var/lib/corral/postgres/<hash of dir>``, a root-made path
it can traverse, and ``<dir>/data`` becomes a link to them: the password, the link and
the logs stay in ``$CORRAL_HOME``, and the next start finds the cluster through the link.

The services of a local stack connect through the socket (``local_url``): a round trip
over it costs client and server about a tenth less CPU than over loopback TCP, and a job
takes some forty round trips. The TCP port stays for tools and for anything that parses
the URL.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from corral.local.pg_install import PostgresInstall, choose_install
from corral.local.ports import check_port_free, child_output, wait_until_listening
from corral.local.problems import StartupProblem
from corral.local.server_logs import POSTGRES_FATAL, damaged_store_fix, last_line_saying, log_since, log_size
from corral.local.tls import ServerTls

# A Unix socket's path must fit in sockaddr_un's 108 bytes, NUL included.
_MAX_SOCKET_PATH = 107
DEFAULT_ACCOUNT = "corral-postgres"
RELOCATED_ROOT = Path("/var/lib/corral/postgres")
STEP = "Postgres"
# The one role other machines may log in as: node agents (shared/db/credentials.py).
REMOTE_ROLE = "corral_agent"
_UNREACHABLE_HOME_FIX = (
    "set CORRAL_HOME to a directory that account can reach (such as one under /srv), "
    "or CORRAL_DATABASE_URL to an existing server"
)
# A system account with its own group, no home and no login: it only runs the server.
_USERADD = (
    "useradd",
    "--system",
    "--user-group",
    "--no-create-home",
    "--home-dir",
    "/nonexistent",
    "--shell",
    "/usr/sbin/nologin",
    "--comment",
    "Corral's private PostgreSQL",
)


@dataclass
class LocalPostgres:
    directory: Path
    port: int
    run_as: str = field(default_factory=lambda: os.environ.get("CORRAL_PG_USER") or DEFAULT_ACCOUNT)
    superuser: str = "corral"
    database: str = "corral"
    process: subprocess.Popen[bytes] | None = None
    install: PostgresInstall | None = None
    # Where it listens besides loopback (other machines' node agents), and then only
    # with TLS and a password (``_beyond_loopback``); loopback alone by default.
    host: str = "127.0.0.1"
    tls: ServerTls | None = None
    log_file: Path | None = None

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory (through ``<dir>/data`` when that is a link)."""
        link = self.directory / "data"
        return link.resolve() if link.is_symlink() else link

    @property
    def server_dir(self) -> Path:
        """Where the server's own files are: ``<dir>``, or where ``<dir>/data`` points."""
        return self.data_dir.parent

    @property
    def password(self) -> str:
        return (self.directory / "password").read_text().strip()

    @property
    def socket_dir(self) -> Path | None:
        """Where the server's Unix socket is, or None when that path would be too long
        for a socket (a deep home directory): then it listens on TCP only."""
        directory = self.server_dir.absolute() / "run"
        fits = len(str(directory / f".s.PGSQL.{self.port}")) <= _MAX_SOCKET_PATH
        return directory if fits else None

    def url(self, database: str | None = None, *, user: str | None = None) -> str:
        """As the owner, with its password; as ``user``, without one (it comes from a file)."""
        return f"postgresql://{self._login(user)}@127.0.0.1:{self.port}/{database or self.database}"

    def local_url(self, database: str | None = None, *, user: str | None = None) -> str:
        """The URL for clients on this machine: through the Unix socket where there is
        one (see the module's docstring), else ``url``."""
        socket_dir = self.socket_dir
        if socket_dir is None:
            return self.url(database, user=user)
        return (
            f"postgresql://{self._login(user)}@/{database or self.database}"
            f"?host={quote(str(socket_dir), safe='/')}&port={self.port}"
        )

    def _login(self, user: str | None) -> str:
        return f"{self.superuser}:{self.password}" if user is None else user

    def _owner(self) -> tuple[int, int] | None:
        """(uid, gid) to run the cluster as when we are root; None runs it as ourselves."""
        if os.geteuid() != 0:
            return None
        try:
            made = self.data_dir.stat()
        except OSError:
            made = None
        if made is not None and made.st_uid != 0:  # an existing cluster keeps its owner
            return made.st_uid, made.st_gid
        return _account(self.run_as)

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

    def _owner_can(self, test: str, path: Path) -> bool:
        """Whether the cluster's owner passes ``test -<test> path`` (asked as that account,
        so every parent directory's mode and ACL count)."""
        owner = self._owner()
        if owner is None:
            return True
        check = subprocess.run(
            ["test", f"-{test}", str(path)], user=owner[0], group=owner[1], extra_groups=[], check=False
        )
        return check.returncode == 0

    def _runnable(self, install: PostgresInstall) -> PostgresInstall:
        """``install``, or a copy of it the owner can run (see ``copied_under``)."""
        if self._owner_can("x", install.bindir / "postgres"):
            return install
        try:
            RELOCATED_ROOT.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
            return install.copied_under(RELOCATED_ROOT.parent)
        except OSError as exc:
            raise StartupProblem(
                STEP,
                f"the database's account {self.run_as!r} cannot run {install.bindir / 'postgres'} "
                f"(a parent directory is private), and copying it to {RELOCATED_ROOT.parent} failed ({exc})",
                "make the checkout's directory traversable by that account, or set CORRAL_PG_BINDIR",
            ) from exc

    def _place_server_files(self) -> Path:
        """The directory for ``data`` and ``run`` of a new cluster (see the module's docstring)."""
        if self._owner_can("x", self.directory):
            self._chown(self.directory)
            return self.directory
        key = hashlib.sha256(str(self.directory.absolute()).encode()).hexdigest()[:16]
        place = RELOCATED_ROOT / key
        try:
            for parent in reversed(place.parents[: len(place.parents) - 1]):
                if not parent.exists():
                    parent.mkdir(mode=0o711)
            place.mkdir(mode=0o700, exist_ok=True)
            self._chown(place)
        except OSError as exc:
            raise StartupProblem(
                STEP,
                f"the database's account {self.run_as!r} cannot reach {self.directory} (a parent "
                f"directory is private), and {place} could not be made for it instead ({exc})",
                _UNREACHABLE_HOME_FIX,
            ) from exc
        if not self._owner_can("w", place):
            raise StartupProblem(
                STEP,
                f"the database's account {self.run_as!r} can reach neither {self.directory} nor {place}",
                _UNREACHABLE_HOME_FIX,
            )
        (self.directory / "data").symlink_to(place / "data", target_is_directory=True)
        return place

    def init(self) -> None:
        self.install = self._runnable(choose_install(self.data_dir if self.data_dir.exists() else None))
        if (self.data_dir / "PG_VERSION").exists():
            return
        if self.data_dir.is_dir() and any(self.data_dir.iterdir()):
            raise StartupProblem(
                STEP,
                f"{self.data_dir} holds files but no PG_VERSION: it is not a whole Postgres data "
                "directory (damaged, or half copied), and Corral will not make a new one over it",
                damaged_store_fix(self.data_dir, "database (every job in the old one is lost)"),
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        password_file = self.directory / "password"
        if not password_file.exists():
            fd = os.open(password_file, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(24) + "\n")
        link = self.directory / "data"
        server_dir = self.server_dir if link.is_symlink() else self._place_server_files()
        # initdb reads the password from a file the cluster owner can read.
        pwfile = server_dir / ".initdb-pw"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        self._chown(pwfile)
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        self._chown(self.data_dir)
        initdb = self._run_as_owner(
            [
                self.install.binary("initdb"),
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
                last = output.decode(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
                raise StartupProblem(
                    STEP,
                    f"initdb of {self.data_dir} with {self.install.describe()} failed: {last[0]}",
                    f"remove {self.data_dir} if it was left half made and start again, or set "
                    "CORRAL_DATABASE_URL to an existing server",
                )
        finally:
            pwfile.unlink(missing_ok=True)

    def start(self, *, log_file: Path | None = None, timeout_s: float = 30.0) -> None:
        check_port_free(self.port, STEP, "CORRAL_PG_PORT")
        self.log_file = log_file
        log_from = log_size(log_file)
        self.init()
        assert self.install is not None
        socket_dir = self.socket_dir
        if socket_dir is not None:
            socket_dir.mkdir(mode=0o700, exist_ok=True)
            self._chown(socket_dir)
        with child_output(log_file) as log:
            self.process = self._run_as_owner(
                [
                    self.install.binary("postgres"),
                    "-D",
                    str(self.data_dir),
                    "-p",
                    str(self.port),
                    "-c",
                    f"listen_addresses={self._listen_addresses()}",
                    *self._beyond_loopback(),
                    "-c",
                    # Quoted: the list is comma-separated and a home may hold spaces.
                    f'unix_socket_directories="{socket_dir}"' if socket_dir else "unix_socket_directories=",
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
        try:
            wait_until_listening(self.process, self.port, timeout_s, "postgres")
        except RuntimeError as exc:
            where = f"its log, {log_file}" if log_file else "its output"
            said = log_since(log_file, log_from)
            if "SSL is not supported by this build" in said:
                raise StartupProblem(
                    STEP,
                    f"{self.install.describe()} was built without TLS, which listening beyond loopback "
                    "(CORRAL_PG_HOST) needs",
                    "set CORRAL_PG_BINDIR to a PostgreSQL built with OpenSSL (Debian's postgresql package: "
                    "/usr/lib/postgresql/<version>/bin), or unset CORRAL_PG_HOST",
                ) from exc
            fatal = last_line_saying(said, POSTGRES_FATAL)
            if fatal is not None:
                raise StartupProblem(
                    STEP,
                    f"Postgres could not start on {self.data_dir}: {fatal}",
                    f"see {where}; if it says the data directory is damaged, "
                    + damaged_store_fix(self.data_dir, "database (every job in the old one is lost)"),
                ) from exc
            raise StartupProblem(STEP, f"{exc} ({self.install.describe()})", f"see {where}") from exc
        self._ensure_database()

    def start_again(self) -> None:
        """After a crash (the supervisor has killed what was left of the old server):
        the same data directory, which Postgres recovers from its WAL."""
        self.start(log_file=self.log_file)

    def _listen_addresses(self) -> str:
        if self.tls is None:
            return "127.0.0.1"
        return "*" if self.host == "0.0.0.0" else f"127.0.0.1,{self.host}"

    def _beyond_loopback(self) -> list[str]:
        """TLS on, with the stack's certificate (a copy the cluster's account owns, as
        Postgres requires of its key), and from other machines only the node agents'
        login, over TLS, with its password (``pg_hba.conf``: the first matching line
        decides, and initdb's own lines cover loopback only): no other role, and nothing
        without TLS."""
        if self.tls is None:
            return []
        cert, key = self.data_dir / "server.crt", self.data_dir / "server.key"
        shutil.copyfile(self.tls.cert_file, cert)
        shutil.copyfile(self.tls.key_file, key)
        key.chmod(0o600)
        for path in (cert, key):
            self._chown(path)
        hba = self.data_dir / "pg_hba.conf"
        lines = hba.read_text().splitlines()
        for network in ("0.0.0.0/0", "::/0"):
            remote = f"hostssl {self.database} {REMOTE_ROLE} {network} scram-sha-256"
            if remote not in lines:
                lines.append(remote)
        hba.write_text("\n".join(lines) + "\n")
        return ["-c", "ssl=on", "-c", f"ssl_cert_file={cert}", "-c", f"ssl_key_file={key}"]

    def remote_url(self, address: str, *, user: str) -> str:
        """The URL for ``user`` on another machine, which reaches this one at ``address``:
        TLS, with this server's certificate checked against the CA the client is given
        (``sslrootcert``, added where the CA file lies)."""
        return f"postgresql://{user}@{address}:{self.port}/{self.database}?sslmode=verify-full"

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


def _account(name: str) -> tuple[int, int]:
    """(uid, gid) of the account the cluster runs as, made a system account if missing."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        why = "useradd is not on this machine"
        if shutil.which("useradd"):
            made = subprocess.run([*_USERADD, name], capture_output=True, text=True, check=False)
            why = made.stderr.strip() or f"useradd exited with {made.returncode}"
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise StartupProblem(
                STEP,
                f"Postgres refuses to run as root, and the account {name!r} for it could not be made ({why})",
                f"create a system account named {name!r}, or name an existing unprivileged one with "
                "CORRAL_PG_USER (such as nobody)",
            ) from None
    return entry.pw_uid, entry.pw_gid
