"""Reading and writing raw non-blocking file descriptors (a pty's master, pipes) on the
event loop: one read or write at a time, waiting for readiness in between, so a
reader that does not read (a stream out of credit) leaves the data in the kernel and
the writer on the other side blocks, as a terminal's would."""

from __future__ import annotations

import asyncio
import errno
import os


async def _ready(fd: int, *, write: bool) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, wake)
    try:
        await ready
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def read_some(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes; ``b""`` at the end (a pty whose other side is all closed
    says EIO: the end too)."""
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            await _ready(fd, write=False)
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b""
            raise


async def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            await _ready(fd, write=True)
            continue
        view = view[written:]


def non_blocking(*fds: int) -> None:
    for fd in fds:
        os.set_blocking(fd, False)
