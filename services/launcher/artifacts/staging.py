"""Where the launcher assembles a blob a node uploads, chunk by chunk, before it is
verified and stored.

Each chunk is written at its offset into ``<staging>/<attempt>/<sha256>.part`` (a
chunk sent twice, after a lost reply, writes the same bytes again). The chunk that
reaches the blob's size makes the file whole: it is hashed, and only a file whose
sha256 is its name goes to the store; the part file goes either way. A node that dies
mid-upload leaves its part files behind; ``sweep`` removes those untouched for an hour
(its next agent starts the blob again: ``missing`` tells it what the store lacks).

File I/O runs in threads: the launcher's loop keeps answering other nodes meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from pathlib import Path

from shared.artifacts.manifest import file_sha256

log = logging.getLogger(__name__)
STALE_AFTER_S = 3600.0
SWEEP_EVERY_S = 600.0


class UploadRefused(Exception):
    """A chunk that does not fit its blob (past its size, a size that changed)."""


class Staging:
    def __init__(self, root: Path) -> None:
        self.root = root

    def part_of(self, attempt_id: str, sha256: str) -> Path:
        return self.root / attempt_id / f"{sha256}.part"

    async def write(self, attempt_id: str, sha256: str, offset: int, size: int, data: bytes) -> Path | None:
        """Write one chunk; the path of the whole, verified blob once this chunk made it
        whole (the caller stores it, then ``discard``s it), else None."""
        if offset + len(data) > size:
            raise UploadRefused(f"a chunk at {offset} of {len(data)} bytes runs past the blob's {size} bytes")
        part = self.part_of(attempt_id, sha256)
        return await asyncio.to_thread(self._write, part, sha256, offset, size, data)

    def _write(self, part: Path, sha256: str, offset: int, size: int, data: bytes) -> Path | None:
        part.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.pwrite(fd, data, offset)
            whole = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if whole > size:
            part.unlink(missing_ok=True)
            raise UploadRefused(f"blob {sha256} is larger than the {size} bytes announced; send it again")
        if offset + len(data) < size:
            return None
        if whole != size or file_sha256(part) != sha256:
            part.unlink(missing_ok=True)
            raise UploadRefused(
                f"blob {sha256} arrived with other content (its sha256 differs); send it again"
            )
        return part

    async def discard(self, part: Path) -> None:
        await asyncio.to_thread(part.unlink, True)

    async def sweep(self) -> int:
        """Remove part files untouched for an hour, and attempts' empty directories."""
        try:
            return await asyncio.to_thread(self._sweep, time.time() - STALE_AFTER_S)
        except OSError as exc:  # (the disk's trouble must not stop the launcher: next time)
            log.warning("could not sweep abandoned uploads from %s: %s", self.root, exc)
            return 0

    def _sweep(self, before: float) -> int:
        removed = 0
        if not self.root.is_dir():
            return 0
        for directory in self.root.iterdir():
            if not directory.is_dir() or directory.is_symlink():
                continue
            for part in directory.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    if part.lstat().st_mtime < before:
                        if part.is_dir() and not part.is_symlink():
                            shutil.rmtree(part, ignore_errors=True)
                        else:
                            part.unlink()
                        removed += 1
            with contextlib.suppress(OSError):
                if directory.lstat().st_mtime < before:
                    directory.rmdir()  # (only once empty)
        if removed:
            log.info("removed %d abandoned upload(s) from %s", removed, self.root)
        return removed
