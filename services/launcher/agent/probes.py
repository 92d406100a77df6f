"""Readiness and liveness probes of the service tasks a node agent runs.

A ``kind: service`` task is a replica: the gateway sends it requests only while it is
*ready*, and a replica that stops being *alive* is restarted. The agent decides both,
as the kubelet does for a pod, from the spec's probes (``shared/service_spec.py``):

- readiness: the spec's HTTP GET or, without one, a TCP connection to the service's
  port, every ``period_s`` after ``initial_delay_s``. The task starts not ready, is
  ready after one pass and not ready again after ``failure_threshold`` failures in a
  row. Only changes are written (``launcher.node_set_readiness``, migration 0034), with
  the probe's word on it: ``GET /healthz: 503``, ``connection refused``;
- liveness (only when the spec has one): ``failure_threshold`` failures in a row stop
  the task with the platform condition ``liveness_failed`` (exit_codes.yaml), and its
  end says why: ``liveness probe failed 3 times: GET /healthz: 500``.

Tasks share the node's network, so a probe that reaches the port proves nothing unless
the listener is the task's: any process could bind a port allocated to another task
and answer its probes. For a sandboxed task (it has a cgroup) each probe first checks
that every socket listening on the port belongs to a process of the task
(``interactive/listeners.py``, the check port-forwards make); a listener of another
process fails the probe ("port 8000 is held by another process"). An unsandboxed task
runs on a node that does not separate tenants, and only the allocated port is used.

Each probe of each task is one asyncio task under the agent's TaskGroup, cancelled when
the task ends (``stop``); reading ``/proc`` runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.launcher.agent.interactive import listeners
from services.launcher.agent.tasks import Task
from shared.aio import raise_if_cancelling
from shared.db.pool import DATABASE_ERRORS
from shared.jobs import JobSpec
from shared.service_spec import Probe

log = logging.getLogger(__name__)

LIVENESS_PLATFORM = "liveness_failed"
# Readiness when the spec gives no probe: a TCP connection to the service's port.
DEFAULT_READINESS = Probe(period_s=1.0)

ReportReadiness = Callable[[str, bool, str], Awaitable[bool]]
StopTask = Callable[..., None]


@dataclass(frozen=True)
class ProbeResult:
    passed: bool
    detail: str  # "GET /healthz: 200", "connection refused"


async def http_get(port: int, path: str, timeout_s: float) -> ProbeResult:
    """One HTTP/1.1 GET to 127.0.0.1:``port``: any 2xx or 3xx within ``timeout_s`` passes."""
    what = f"GET {path}"
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: corral-probe\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            status_line = await reader.readline()
    except TimeoutError:
        return ProbeResult(False, f"{what}: no answer within {timeout_s:g} s")
    except ConnectionRefusedError:
        return ProbeResult(False, "connection refused")
    except OSError as exc:
        return ProbeResult(False, f"{what}: {exc.strerror or exc}")
    except (ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError):
        # The task's server chose what it sent: a status line past the reader's limit
        # (64 KiB) without a newline is a failed probe, never the agent's end.
        return ProbeResult(False, f"{what}: not an HTTP answer")
    finally:
        if writer is not None:
            writer.close()
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return ProbeResult(False, f"{what}: not an HTTP answer")
    status = int(parts[1])
    return ProbeResult(200 <= status < 400, f"{what}: {status}")


async def tcp_connect(port: int, timeout_s: float) -> ProbeResult:
    """A TCP connection to 127.0.0.1:``port``, closed at once."""
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
    except TimeoutError:
        return ProbeResult(False, f"port {port}: no connection within {timeout_s:g} s")
    except ConnectionRefusedError:
        return ProbeResult(False, "connection refused")
    except OSError as exc:
        return ProbeResult(False, f"port {port}: {exc.strerror or exc}")
    writer.close()
    return ProbeResult(True, f"port {port} accepts connections")


class Probes:
    """The probes of every service task this agent runs."""

    def __init__(
        self, tg: asyncio.TaskGroup, report: ReportReadiness, stop: StopTask, grace_s: float
    ) -> None:
        self._tg = tg
        self._report = report
        self._stop = stop
        self._grace_s = grace_s
        self._running: dict[str, list[asyncio.Task[None]]] = {}

    def follow(self, task: Task, spec: JobSpec) -> None:
        """Start probing ``task`` if it is a replica of a service."""
        service = spec.service
        if spec.kind != "service" or service is None or task.attempt_id in self._running:
            return
        readiness = service.readiness or DEFAULT_READINESS
        probes = [
            self._tg.create_task(
                self._readiness(
                    task, readiness, self._port(task, readiness, service.port), http=bool(service.readiness)
                ),
                name=f"readiness-{task.attempt_id}",
            )
        ]
        if service.liveness is not None:
            port = self._port(task, service.liveness, service.port)
            probes.append(
                self._tg.create_task(
                    self._liveness(task, service.liveness, port), name=f"liveness-{task.attempt_id}"
                )
            )
        self._running[task.attempt_id] = probes

    def stop(self, attempt_id: str) -> None:
        """The task ended: its probes stop."""
        for probe in self._running.pop(attempt_id, []):
            probe.cancel()

    @staticmethod
    def _port(task: Task, probe: Probe, service_port: str) -> int | None:
        ports = task.ports.get(probe.port or service_port) or []
        return ports[0] if ports else None

    async def _readiness(self, task: Task, probe: Probe, port: int | None, *, http: bool) -> None:
        reported: tuple[bool, str] | None = None
        ready, failures = False, 0
        await asyncio.sleep(probe.initial_delay_s)
        while not task.ended:
            result = await self._guarded_probe(task, probe, port, http=http)
            failures = 0 if result.passed else failures + 1
            if result.passed:
                ready = True
            elif failures >= probe.failure_threshold:
                ready = False
            # A ready replica's word stays the passing probe's until it is out of rotation;
            # a replica out of rotation says what each new failure is.
            changed = reported is None or ready != reported[0] or (not ready and result.detail != reported[1])
            if changed and await self._record(task, ready, result.detail):
                reported = (ready, result.detail)
            await asyncio.sleep(probe.period_s)

    async def _record(self, task: Task, ready: bool, detail: str) -> bool:
        """Write a change; False if it could not be (Postgres away: tried at the next probe)."""
        try:
            await self._report(task.attempt_id, ready, detail)
        except DATABASE_ERRORS as exc:
            raise_if_cancelling()
            log.warning("could not record the readiness of %s (%s); will retry", task.attempt_id, exc)
            return False
        except Exception:
            raise_if_cancelling()  # never the agent's end: tried again at the next probe
            log.exception("could not record the readiness of %s; will retry", task.attempt_id)
            return False
        log.info("attempt %s is %s: %s", task.attempt_id, "ready" if ready else "not ready", detail)
        return True

    async def _liveness(self, task: Task, probe: Probe, port: int | None) -> None:
        failures = 0
        await asyncio.sleep(probe.initial_delay_s)
        while not task.ended:
            result = await self._guarded_probe(task, probe, port, http=True)
            failures = 0 if result.passed else failures + 1
            if failures >= probe.failure_threshold:
                reason = f"liveness probe failed {failures} times: {result.detail}"
                log.info("attempt %s: %s; stopping it", task.attempt_id, reason)
                self._stop(task.attempt_id, reason, self._grace_s, platform=LIVENESS_PLATFORM)
                return
            await asyncio.sleep(probe.period_s)

    async def _guarded_probe(self, task: Task, probe: Probe, port: int | None, *, http: bool) -> ProbeResult:
        """One probe; whatever it raises is a failed probe and a log line. A probe runs
        under the agent's TaskGroup, where an exception would end the agent and every
        task it runs, and what a probe reads is the task's to choose."""
        try:
            return await self._probe(task, probe, port, http=http)
        except Exception:
            raise_if_cancelling()
            log.exception("attempt %s: the probe failed unexpectedly", task.attempt_id)
            return ProbeResult(False, "the probe failed unexpectedly")

    async def _probe(self, task: Task, probe: Probe, port: int | None, *, http: bool) -> ProbeResult:
        if port is None:
            return ProbeResult(False, "the task was allocated no port to probe")
        held = await self._held_by_another(task, port)
        if held is not None:
            return ProbeResult(False, held)
        if http:
            return await http_get(port, probe.path, probe.timeout_s)
        return await tcp_connect(port, probe.timeout_s)

    @staticmethod
    async def _held_by_another(task: Task, port: int) -> str | None:
        """Why the listener on ``port`` cannot be the task's, or None (see the module docstring)."""
        cgroup = task.cgroup
        if cgroup is None:
            return None
        owner = "nobody"
        with contextlib.suppress(OSError):
            owner, _ = await asyncio.to_thread(lambda: listeners.owner_of_port(port, cgroup.processes()))
        if owner == "other":
            return f"port {port} is held by another process"
        if owner == "nobody":
            return "connection refused"
        return None
