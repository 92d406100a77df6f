"""A small filesystem of a test's own, to fill up: a tmpfs, and a filler file.

A tmpfs allocates a page as it is written, and ``ENOSPC`` is what the writer gets once
the mount's size is used, as on a full disk; nothing outside the mount notices. Mounting
one needs root (or ``CAP_SYS_ADMIN``): where that is refused the test is skipped, with
the reason.
"""

from __future__ import annotations

import errno
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.infra import world_readable_tempdir


@contextmanager
def small_disk(size_mb: int, prefix: str) -> Iterator[Path]:
    """A tmpfs of ``size_mb``, world-traversable (a private Postgres runs as an
    unprivileged user); unmounted afterwards, once whoever holds files on it has let go
    (the caller stops its servers first)."""
    path = world_readable_tempdir(prefix)
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        refused = mounted.stderr.strip() if mounted.returncode != 0 else None
    except FileNotFoundError:
        refused = "no mount command"
    if refused is not None:
        path.rmdir()
        pytest.skip(f"a small filesystem to fill needs `mount -t tmpfs` as root: {refused}")
    try:
        yield path
    finally:
        _unmount(path)


def _unmount(path: Path) -> None:
    for _ in range(50):
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode == 0:
            break
        time.sleep(0.1)  # a server still closing its files
    else:
        # Never leave a tmpfs behind a failed test: detach it now; it goes once unused.
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
    shutil.rmtree(path, ignore_errors=True)


def fill(path: Path) -> int:
    """Append zeros to ``path`` until its filesystem refuses; how many bytes went in.
    Called again, it takes whatever others freed meanwhile."""
    written = 0
    with path.open("ab", buffering=0) as out:
        for block in (bytes(1 << 20), bytes(4096)):
            while True:
                try:
                    written += out.write(block) or 0
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return written
