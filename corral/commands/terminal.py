"""The local end of an interactive session: this terminal, or these pipes.

With a terminal, ``corral exec`` puts it in raw mode for the session, as ``ssh`` and
``kubectl exec -t`` do: every key (Ctrl-C, Ctrl-D, arrows) goes to the remote terminal
as typed, and the remote terminal alone echoes and edits. The mode is restored however
the session ends. A window change (``SIGWINCH``) is read as the terminal's new size.

Standard input is read without blocking the event loop: a terminal, pipe or socket is
watched by the loop (``add_reader``); a regular file cannot be (epoll refuses files) and
is read in a thread, which never blocks for long on a file. A thread is never used for a
pipe or terminal, because a thread blocked in ``read`` would keep the process alive
after the session ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import termios
import tty
from collections.abc import Iterator

READ_CHUNK = 64 * 1024


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """The terminal on ``fd`` in raw mode for the block, then as it was."""
    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSANOW)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def window_size(fd: int) -> tuple[int, int]:
    """``(columns, rows)`` of the terminal on ``fd`` (80x24 when it says nothing)."""
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 80, 24
    return (size.columns or 80), (size.lines or 24)


def is_null_device(fd: int) -> bool:
    """Whether ``fd`` is ``/dev/null`` (a script's or a service's standard input): there is
    then no input to pass on, rather than an input that ends at once."""
    try:
        here, null = os.fstat(fd), os.stat(os.devnull)
    except OSError:
        return False
    return stat.S_ISCHR(here.st_mode) and here.st_rdev == null.st_rdev


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd`` (a pipe may take part of it at a time)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class InputReader:
    """Chunks of a file descriptor's input, awaited; ``b""`` at its end."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._regular_file = stat.S_ISREG(os.fstat(fd).st_mode)

    async def read(self) -> bytes:
        if self._regular_file:
            return await asyncio.to_thread(os.read, self._fd, READ_CHUNK)
        ready: asyncio.Future[None] = self._loop.create_future()

        def readable() -> None:
            if not ready.done():
                ready.set_result(None)

        self._loop.add_reader(self._fd, readable)
        try:
            await ready
        finally:
            self._loop.remove_reader(self._fd)
        try:
            return os.read(self._fd, READ_CHUNK)
        except BlockingIOError:  # another reader of a shared descriptor was first
            return await self.read()
