"""TensorBoard's event files of another job, copied into a task's ``events/`` directory.

A task whose role names ``event_files_from: <job>`` (a TensorBoard beside a training
job) reads that job's ``*tfevents*`` files. The two jobs run as different uids, each
in a working directory only its own uid may enter, so the agent (root) copies: as the
task starts, then every ``COPY_EVERY_S`` while it runs, it appends what each source
file gained since the last pass to the copy under ``<task's working directory>/events/``
(the source's sub-directories kept: TensorBoard shows each as a run). The API checked at
submit that the submitter may read the source job; only jobs whose working directory is
on this node are copied (a source elsewhere leaves ``events/`` empty).

Root writes into a directory the task controls, and reads one another job controls,
so every step is taken on file descriptors, never on a path twice:

- a source file is opened without following a symlink, must be a regular file with one
  link, and must resolve inside the source directory (a directory swapped for a symlink
  after the walk is caught by where the open file really is);
- the target directories are walked from the task's working directory one name at a
  time with ``O_NOFOLLOW``: a symlink the task planted (``events -> /etc``) is refused;
- a target file must be a regular file with one link owned by the task (or made now,
  then given to it), so root never writes through a link into a file of anyone else.

A pass copies at most ``LIMIT_BYTES`` for a task in all (a runaway source cannot fill
the node's disk through its readers). Anything refused is logged once and skipped.

Concurrency: one asyncio task per following attempt, in the agent's TaskGroup; each
pass runs in a worker thread (file I/O).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

COPY_EVERY_S = 15.0
LIMIT_BYTES = 1024**3
EVENTS_DIR = "events"
PATTERN = "tfevents"
_CHUNK = 1024 * 1024


class RefusedFile(Exception):
    """A source or target that is not what a copy may touch; the message says why."""


@dataclass
class EventFileCopy:
    """One task's copy: where from, where to, and how far each file has been copied."""

    source: Path  # the source job's working directory on this node
    workdir: Path  # the task's working directory (``events/`` is made inside)
    limit_bytes: int = LIMIT_BYTES
    copied: dict[str, int] = field(default_factory=dict)  # relative path -> bytes copied
    refused: set[str] = field(default_factory=set)  # (said once)

    @property
    def total(self) -> int:
        return sum(self.copied.values())

    def sources(self) -> Iterator[str]:
        """Relative paths of the event files under ``source``, symlinks not followed."""
        for directory, dirs, files in os.walk(self.source, followlinks=False):
            dirs.sort()
            for name in sorted(files):
                if PATTERN in name:
                    yield os.path.relpath(os.path.join(directory, name), self.source)

    def copy_once(self) -> int:
        """One pass; the bytes copied."""
        if not self.source.is_dir() or self.source.is_symlink():
            return 0
        done = 0
        for relative in self.sources():
            room = self.limit_bytes - self.total
            if room <= 0:
                self._refuse(relative, f"the copy reached its limit of {self.limit_bytes} bytes")
                break
            try:
                done += self._copy_file(relative, room)
            except (RefusedFile, OSError) as exc:
                self._refuse(relative, str(exc))
        return done

    def _refuse(self, relative: str, why: str) -> None:
        if relative not in self.refused:
            self.refused.add(relative)
            log.warning("not copying event file %s of %s: %s", relative, self.source, why)

    def _copy_file(self, relative: str, room: int) -> int:
        src = _open_source(self.source, relative)
        try:
            size = os.fstat(src).st_size
            offset = self.copied.get(relative, 0)
            if size <= offset:
                return 0
            dst = _open_target(self.workdir, relative)
            try:
                done = 0
                while offset + done < size and done < room:
                    chunk = os.pread(src, min(_CHUNK, size - offset - done, room - done), offset + done)
                    if not chunk:
                        break
                    os.write(dst, chunk)
                    done += len(chunk)
            finally:
                os.close(dst)
            self.copied[relative] = offset + done
            return done
        finally:
            os.close(src)


def _open_source(source: Path, relative: str) -> int:
    fd = os.open(source / relative, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise RefusedFile("not a regular file of one link")
        where = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if not where.is_relative_to(source.resolve()):
            raise RefusedFile(f"it lies outside the source directory (at {where})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_target(workdir: Path, relative: str) -> int:
    """The target file, open for appending, walked to from ``workdir`` name by name."""
    owner = os.stat(workdir, follow_symlinks=False)
    if not stat.S_ISDIR(owner.st_mode):
        raise RefusedFile(f"{workdir} is not a directory")
    uid, gid = owner.st_uid, owner.st_gid
    *directories, name = [EVENTS_DIR, *Path(relative).parts]
    parent = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for directory in directories:
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory, 0o755, dir_fd=parent)
                os.chown(directory, uid, gid, dir_fd=parent, follow_symlinks=False)
            try:
                child = os.open(
                    directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
                )
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise RefusedFile(f"{directory} in the task's directory is not a directory") from exc
                raise
            os.close(parent)
            parent = child
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, 0o644, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):
                raise RefusedFile(f"{name} in the task's directory is not a plain file") from exc
            raise
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_uid not in (uid, os.geteuid()):
            raise RefusedFile(f"{name} in the task's directory is not a plain file of the task's own")
        if (info.st_uid, info.st_gid) != (uid, gid):
            os.fchown(fd, uid, gid)
    except BaseException:
        os.close(fd)
        raise
    return fd


class EventFileCopies:
    """The copies of the tasks this agent runs, each followed by an asyncio task."""

    def __init__(self, tg: asyncio.TaskGroup, every_s: float = COPY_EVERY_S) -> None:
        self._tg = tg
        self._every_s = every_s
        self._following: dict[str, asyncio.Task[None]] = {}

    def follow(self, attempt_id: str, source: Path, workdir: Path) -> None:
        """Copy now and every ``every_s`` until ``stop``."""
        if attempt_id in self._following:
            return
        copy = EventFileCopy(source, workdir)
        self._following[attempt_id] = self._tg.create_task(self._run(copy), name=f"event-files-{attempt_id}")

    def follow_role(self, attempt_id: str, source_job: str | None, work_root: Path, job_id: str) -> None:
        """Follow a task whose role copies the event files of ``source_job`` (if it names one)."""
        if source_job is not None:
            self.follow(attempt_id, work_root / source_job, work_root / job_id)

    def stop(self, attempt_id: str) -> None:
        following = self._following.pop(attempt_id, None)
        if following is not None:
            following.cancel()

    async def _run(self, copy: EventFileCopy) -> None:
        while True:
            try:
                await asyncio.to_thread(copy.copy_once)
            except OSError as exc:  # the task's directory went (the task is ending)
                log.warning("copying event files from %s failed: %s", copy.source, exc)
            await asyncio.sleep(self._every_s)
