"""Debian packages a test needs (Chromium, Open MPI, sshd), installed with apt when missing.

Once per run, under a file lock so parallel workers do not race; an ``apt-get update`` is
tried once when the install fails on stale package lists (a fresh machine has none).
Without apt-get, or when apt cannot install them, the caller's tests are skipped, saying
which package and why.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(  # a fixed argv
        ["apt-get", *args], capture_output=True, text=True, timeout=900, check=False, env=env
    )


def ensure_debian_packages(needed: dict[Path, str]) -> None:
    """Each file of ``needed`` (a binary) exists, its package (the value) installed if not."""
    missing = {path: package for path, package in needed.items() if not path.exists()}
    if not missing:
        return
    packages = sorted(set(missing.values()))
    if shutil.which("apt-get") is None:
        pytest.skip(f"no {', '.join(map(str, missing))} and no apt-get to install {' '.join(packages)}")
    with open(Path(os.environ.get("TMPDIR", "/tmp")) / "corral-apt-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all(path.exists() for path in missing):  # another worker installed them meanwhile
            return
        installed = _apt("install", "-y", "--no-install-recommends", *packages)
        if installed.returncode != 0:
            _apt("update")
            installed = _apt("install", "-y", "--no-install-recommends", *packages)
    absent = [str(path) for path in missing if not path.exists()]
    if installed.returncode != 0 or absent:
        pytest.skip(f"could not install {' '.join(packages)} with apt-get: {installed.stderr[-500:]}")


def ensure_mpi() -> None:
    """Open MPI (mpirun, and the library mpi4py loads) and OpenSSH's server and client."""
    ensure_debian_packages(
        {
            Path("/usr/bin/mpirun"): "openmpi-bin",
            Path("/usr/lib/x86_64-linux-gnu/libmpi.so"): "libopenmpi-dev",
            Path("/usr/sbin/sshd"): "openssh-server",
            Path("/usr/bin/ssh"): "openssh-client",
        }
    )
