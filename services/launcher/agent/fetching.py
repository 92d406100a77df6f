"""``fetch_sources``: what the agent does for a task whose role has ``fetch`` items
before it spawns it — run ``fetch_worker.py`` as the task's own identity, bounded in
bytes and time, and say plainly why a fetch failed.

Who fetches: with a sandbox, the uid and gid the sandbox gives the job on this node
(``Sandbox.identities.claim``); without one, the agent's own user, as the task runs. The
worker starts as the agent's user (root on a sandboxed node) and drops to the task's
identity before it reads or writes anything a job names (``fetch_worker.drop_to``).

The claim is held across the fetch's await: the agent made the attempt known to the
sandbox before (``Sandbox.hold``, readying.py), so the sweep keeps the job's uid, and
gives it back when the start fails.

A stop asked for while a fetch runs takes effect once it ends: the task then starts
and is stopped at once, as any task asked to stop while it starts.

How a failure is classified: ``fetch_refused`` (permanent: the source is missing, the
version is not in the repository, the archive is damaged or unsafe, the task may not
read the file, it is larger than the node allows) or ``fetch_failed`` (``unknown``: the
network did not answer, or the fetch outran its time; retried up to the job's
``retry.max_retries``, never for ever).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.launcher.agent import fetch_worker
from services.launcher.agent.processes import Exit
from services.launcher.agent.sandbox.identities import IdentityProblem
from services.launcher.agent.sandbox.sandbox import Sandbox
from services.launcher.agent.tasks import Task
from shared.fetch_spec import Fetch

FETCH_REFUSED = "fetch_refused"
FETCH_FAILED = "fetch_failed"
START_FAILED = "start_failed"
WORKER_SOURCE = Path(fetch_worker.__file__).read_text()
# What the worker's environment keeps of the agent's: the way out to the network.
_PASSED_ON = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
_STDERR_KEPT = 64 * 1024


class FetchSettings(BaseSettings):
    """What a node lets a task fetch before it starts (``tasks[].fetch``: docs/fetch.md);
    the launcher reads it too, for a pod's fetch."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_FETCH_", extra="ignore", use_attribute_docstrings=True
    )

    max_mb: int = Field(default=10240, ge=1)
    """The most a task's fetches may put in its working directory, all together, in MiB;
    more fails its start (``fetch_refused``), so a job cannot fill the node's disk."""
    timeout_s: float = Field(default=600.0, gt=0)
    """How long a task's fetches may take, all together; longer fails its start
    (``fetch_failed``, retried up to the job's ``retry.max_retries``)."""


@dataclass(frozen=True)
class FetchFailure:
    uri: str
    what: str
    permanent: bool


def worker_order(
    items: list[Fetch],
    settings: FetchSettings,
    uid: int | None,
    gid: int | None,
    hidden: tuple[Path, ...] = (),
) -> str:
    """The worker's one argument (``fetch_worker.main``). It fetches into its working
    directory, named relatively: the task's uid needs no way through its parents."""
    return json.dumps(
        {
            "items": [item.model_dump() for item in items],
            "dest": ".",
            "max_bytes": settings.max_mb * 1024 * 1024,
            "timeout_s": settings.timeout_s,
            "token": uuid.uuid4().hex[:12],
            "uid": uid,
            "gid": gid,
            "hidden": [str(path) for path in hidden],
        }
    )


def worker_environment(home: Path, *, proxies: bool = True) -> dict[str, str]:
    """The worker's whole environment (none of the agent's secrets): ``proxies`` passes
    on the agent's way out to the network."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "GIT_TERMINAL_PROMPT": "0",  # (a private repository fails; it never waits on a prompt)
        "GIT_CONFIG_NOSYSTEM": "1",  # (the node's git settings are not the job's)
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ALLOW_PROTOCOL": "http:https:git:file",  # (never ext::, which runs commands)
    }
    if proxies:
        env.update({name: os.environ[name] for name in _PASSED_ON if name in os.environ})
    return env


def failure_of(stderr: bytes, returncode: int) -> FetchFailure:
    """What the worker said (its last ``CORRAL-FETCH-FAILED`` line), or how it died.

    Read as untrusted: in a pod the worker runs on the task image's Python, which the
    job chose, so the line may be anything; one that is not what the worker writes is
    taken as the tail of its output."""
    for line in reversed(stderr.decode(errors="replace").splitlines()):
        if line.startswith(fetch_worker.FAILED_MARK):
            try:
                said = json.loads(line.removeprefix(fetch_worker.FAILED_MARK))
                uri, what, permanent = said["uri"], said["what"], said["permanent"]
            except (ValueError, KeyError, TypeError):
                break
            if isinstance(uri, str) and isinstance(what, str) and isinstance(permanent, bool):
                return FetchFailure(uri[:2048], what[:1000], permanent)
            break
    tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {returncode}"]
    return FetchFailure("its sources", f"the fetch failed: {tail[0][:500]}", permanent=False)


async def run_worker(order: str, env: dict[str, str], cwd: Path, timeout_s: float) -> FetchFailure | None:
    """Run the worker to its end (killed, with what it started, a little after its own
    deadline, which it should have kept)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-S",
        "-c",
        WORKER_SOURCE,
        order,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,  # (its git children are killed with it)
    )
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(timeout_s + 10):
            stderr = b""
            while chunk := await proc.stderr.read(_STDERR_KEPT):
                stderr = (stderr + chunk)[-_STDERR_KEPT:]  # (its last line says why)
            await proc.wait()
    except TimeoutError:
        return FetchFailure("its sources", f"not fetched within {timeout_s:g} s", permanent=False)
    finally:
        # Whatever it started is killed too, even when it ended on its own: a git helper
        # left behind would run on as the job's uid, in no cgroup.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    code = await proc.wait()  # (it has ended: this is its status)
    return None if code == 0 else failure_of(stderr, code)


def _ready_working_dir(cwd: Path, uid: int | None, gid: int | None) -> None:
    cwd.mkdir(mode=0o700, parents=True, exist_ok=True)
    if uid is not None and gid is not None:
        os.chown(cwd, uid, gid)  # (as ``Sandbox.prepare`` leaves it)


def platform_of(failure: FetchFailure) -> str:
    return FETCH_REFUSED if failure.permanent else FETCH_FAILED


def _failed(task: Task, failure: FetchFailure) -> Exit:
    task.platform = platform_of(failure)
    return Exit(None, None, f"could not fetch {failure.uri}: {failure.what}")


async def fetch_sources(
    task: Task,
    items: list[Fetch],
    username: str,
    cwd: Path,
    sandbox: Sandbox | None,
    settings: FetchSettings,
) -> Exit | None:
    """Fetch ``items`` into ``cwd`` as the task's identity. Returns why the task cannot
    start (its ``platform`` set), or None."""
    if not items:
        return None
    uid = gid = None
    if sandbox is not None:
        try:
            identity = sandbox.identities.claim(task.job_id, username)
        except IdentityProblem as exc:
            task.platform = START_FAILED
            return Exit(None, None, f"could not start the task: {exc}")
        uid, gid = identity.uid, identity.gid
    try:
        _ready_working_dir(cwd, uid, gid)
        hidden = tuple(sandbox.config.hidden) if sandbox is not None else ()
        order = worker_order(items, settings, uid, gid, hidden)
        failure = await run_worker(order, worker_environment(cwd), cwd, settings.timeout_s)
    except OSError as exc:
        failure = FetchFailure("its sources", f"the fetch could not run: {exc}", permanent=False)
    if failure is None:
        return None
    logging.getLogger(__name__).info("attempt %s: %s: %s", task.attempt_id, failure.uri, failure.what)
    return _failed(task, failure)
