"""``KubernetesDriver``: the launch protocol (``services/launcher/drivers.py``) on Kubernetes.

One Pod per task attempt, named by the attempt id, owned by its job's headless Service
(``manifests.py``). The driver keeps no state that matters: everything it knows is in
the API server, selected by label, so a restarted driver lists the pods and carries on.

- ``start`` creates the Service (or finds it), for an MPI job its generation's ssh
  Secret (``mpi.py``), and then the Pod; every creation is idempotent — 409
  AlreadyExists means an earlier call got there — and the pod name being the attempt
  id means a repeated start can never run the attempt twice.
- ``stop`` deletes the pod with the grace period: the kubelet sends SIGTERM, then
  SIGKILL after the grace period.
- ``watch`` lists the pods, reports what they say, then watches from the list's
  resourceVersion. A stream that ends (server timeout, dropped connection) is re-opened
  from the last resourceVersion seen; a 410 Gone (that version was compacted away) makes
  it list again. ``tracking.Tracker`` reports each change once across both paths.
  A pod that can never run (image pull failure, lost node) is deleted after its end is
  reported, so it does not keep the node's GPUs or come back to life.
- ``follow_log`` streams a pod's timestamped log for ``pod_logs.PodLogs``, over a client
  of its own: a thousand long-lived log streams never take the connections that the
  watch, the creations and the deletions need.
- ``reconcile`` lists the labelled pods, deletes running ones nobody expects, and
  deletes the Services of jobs nothing is expected of once their pods have been
  finished for ``keep_finished_s`` (the pods and their logs go with them).

Concurrency: one ``watch`` consumer per driver; ``start``/``stop``/``reconcile`` may
run concurrently with it and each other (they only call the API and touch a set).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import os
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, suppress
from datetime import UTC, datetime
from typing import Literal

import aiohttp
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

from services.launcher.drivers import TaskLaunch, TaskObserved
from services.launcher.kubernetes.api import AlreadyExists, Gone, KubeApi, KubeApiError, NotFound, Object
from services.launcher.kubernetes.manifests import (
    OwnerRef,
    pod_manifest,
    service_manifest,
    service_owner,
)
from services.launcher.kubernetes.mpi import MpiWiring, ssh_secret_manifest, with_mpi
from services.launcher.kubernetes.names import JOB_LABEL, MANAGED_BY, MANAGED_BY_LABEL, POD_SELECTOR, pod_name
from services.launcher.kubernetes.settings import KubernetesSettings
from services.launcher.kubernetes.status import attempt_of, deleted_state, finished_at, is_terminal, pod_state
from services.launcher.kubernetes.tracking import Tracker

log = logging.getLogger(__name__)

_CONNECTION_ERRORS = (KubeApiError, aiohttp.ClientError, asyncio.TimeoutError)


class KubernetesDriverError(Exception):
    """The API server refused what the driver asked; the message says what and why."""


class AttemptNotFound(KubernetesDriverError, LookupError):
    pass


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def cluster_configuration() -> Configuration:
    """Credentials for the cluster: the pod's service account when running inside one,
    else the kubeconfig (``KUBECONFIG`` or ``~/.kube/config``)."""
    configuration = Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(client_configuration=configuration)
    return configuration


class KubernetesDriver:
    def __init__(
        self,
        client: ApiClient | Configuration,
        settings: KubernetesSettings | None = None,
        *,
        job_owner: OwnerRef | None = None,
    ) -> None:
        """``client``: an ``ApiClient`` the caller closes, or a ``Configuration`` from
        which the driver makes its own (closed by ``close``). ``job_owner``: an object
        whose deletion should delete every job's Service, and through them the pods."""
        self._owns_client = isinstance(client, Configuration)
        self._client = ApiClient(client) if isinstance(client, Configuration) else client
        self.settings = settings or KubernetesSettings()
        self._api = KubeApi(self._client, self.settings.namespace)
        self._job_owner = job_owner
        self._tracker = Tracker()
        self._stopping: set[str] = set()
        self._log_client: ApiClient | None = None  # made on the first followed log
        self._log_api: KubeApi | None = None

    async def close(self) -> None:
        if self._log_client is not None:
            await self._log_client.close()
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> KubernetesDriver:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # -- start / stop ---------------------------------------------------------------

    async def _ensure_service(self, job_id: str) -> OwnerRef:
        # Not cached: reconcile may have removed a finished job's Service, and a pod
        # owned by a deleted uid would be garbage-collected at once.
        body = service_manifest(job_id, self.settings, self._job_owner)
        try:
            return service_owner(await self._api.create_service(body))
        except AlreadyExists:
            return service_owner(await self._api.read_service(body["metadata"]["name"]))

    async def start(self, launch: TaskLaunch, mpi: MpiWiring | None = None) -> None:
        """``mpi``: the attempt belongs to an MPI job generation (``mpi.py``): its pod
        mounts the generation's ssh Secret, made here first if it is not yet."""
        try:
            owner = await self._ensure_service(launch.job_id)
            pod = pod_manifest(launch, self.settings, owner)
            if mpi is not None:
                with suppress(AlreadyExists):  # another pod of the generation made it
                    await self._api.create_secret(
                        ssh_secret_manifest(launch.job_id, mpi, self.settings, owner)
                    )
                pod = with_mpi(pod, launch, mpi)
            await self._api.create_pod(pod)
        except AlreadyExists:
            log.info("attempt %s already has its pod; not starting it again", launch.attempt_id)
        except KubeApiError as error:
            raise KubernetesDriverError(
                f"could not start attempt {launch.attempt_id} ({launch.task_role}-{launch.task_index} "
                f"of {launch.job_id}) in namespace {self.settings.namespace}: {error.message}"
            ) from error

    async def stop(self, attempt_id: str, grace_s: float) -> None:
        if self._tracker.ended(attempt_id):
            return  # nothing runs; keep the pod for its logs
        self._stopping.add(attempt_id)
        try:
            await self._api.delete_pod(pod_name(attempt_id), max(0, math.ceil(grace_s)))
        except NotFound:
            pass
        except KubeApiError as error:
            raise KubernetesDriverError(f"could not stop attempt {attempt_id}: {error.message}") from error

    # -- watch ----------------------------------------------------------------------

    async def _observe(self, kind: str, pod: Object) -> list[TaskObserved]:
        attempt = attempt_of(pod)
        if kind == "DELETED":
            state = deleted_state(pod, attempt in self._stopping)
            observed = self._tracker.update(state, pod)
            self._tracker.forget(attempt)
            self._stopping.discard(attempt)
            return observed
        state = pod_state(pod)
        observed = self._tracker.update(state, pod)
        if observed and state.stuck:
            log.warning("attempt %s can never run (%s); deleting its pod", attempt, state.ended)
            self._stopping.add(attempt)
            try:
                await self._api.delete_pod(pod["metadata"]["name"], 0)
            except NotFound:
                pass
            except _CONNECTION_ERRORS as error:  # the next reconcile removes it
                log.warning("could not delete stuck pod of %s: %s", attempt, error)
        return observed

    async def _resync(self, pods: list[Object]) -> list[TaskObserved]:
        observed: list[TaskObserved] = []
        for pod in pods:
            observed += await self._observe("MODIFIED", pod)
        present = {attempt_of(pod) for pod in pods}
        for pod in self._tracker.missing(present).values():
            observed += await self._observe("DELETED", pod)
        return observed

    async def watch(self) -> AsyncGenerator[TaskObserved, None]:
        delay = self.settings.retry_delay_s
        while True:
            try:
                pods, version = await self._api.list_pods(POD_SELECTOR)
            except _CONNECTION_ERRORS as error:
                log.warning("listing pods failed, retrying in %ss: %s", delay, error)
                await asyncio.sleep(delay)
                continue
            for observed in await self._resync(pods):
                yield observed
            while True:
                try:
                    stream = self._api.watch_pods(POD_SELECTOR, version, self.settings.watch_timeout_s)
                    async with aclosing(stream) as events:
                        async for event in events:
                            pod = event.get("object") or {}
                            version = str(pod.get("metadata", {}).get("resourceVersion") or version)
                            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                                for observed in await self._observe(str(event["type"]), pod):
                                    yield observed
                except Gone:
                    log.info("pod watch at resourceVersion %s expired (410); listing again", version)
                    break
                except _CONNECTION_ERRORS as error:
                    log.warning("pod watch broke, resuming in %ss: %s", delay, error)
                    await asyncio.sleep(delay)

    # -- logs -----------------------------------------------------------------------

    async def logs(self, attempt_id: str, follow: bool) -> AsyncIterator[bytes]:
        name = pod_name(attempt_id)
        try:
            await self._api.read_pod(name)
        except NotFound as error:
            raise AttemptNotFound(f"attempt {attempt_id} has no pod (never started, or removed)") from error
        return self._log_stream(name, follow)

    async def _log_stream(self, name: str, follow: bool) -> AsyncIterator[bytes]:
        while True:
            try:
                async with aclosing(self._api.pod_log(name, follow)) as chunks:
                    async for chunk in chunks:
                        yield chunk
                return
            except NotFound:
                return
            except KubeApiError as error:
                if error.status != 400 or not follow:  # 400: the container has not started
                    return
            try:
                pod = await self._api.read_pod(name)
            except NotFound:
                return
            if is_terminal(pod):
                return
            await asyncio.sleep(self.settings.log_wait_interval_s)

    def follow_log(
        self, attempt_id: str, since_time: str | None, idle_s: float
    ) -> AsyncGenerator[bytes, None]:
        """The pod's timestamped log from ``since_time`` (``KubeApi.follow_pod_log``)."""
        if self._log_api is None:
            configuration = copy.copy(self._client.configuration)  # same server, same credentials
            configuration.connection_pool_maxsize = self.settings.log_streams
            self._log_client = ApiClient(configuration)
            self._log_api = KubeApi(self._log_client, self.settings.namespace)
        return self._log_api.follow_pod_log(pod_name(attempt_id), since_time, idle_s)

    async def pod_phase(self, attempt_id: str) -> Literal["live", "ended", "gone"]:
        """Whether the attempt's pod may still write to its log."""
        try:
            pod = await self._api.read_pod(pod_name(attempt_id))
        except NotFound:
            return "gone"
        return "ended" if is_terminal(pod) else "live"

    # -- reconcile ------------------------------------------------------------------

    async def reconcile(self, expected: set[str]) -> set[str]:
        pods, _ = await self._api.list_pods(POD_SELECTOR)
        present: set[str] = set()
        jobs_in_use: set[str] = set()
        last_finish: dict[str, datetime] = {}
        for pod in pods:
            attempt, metadata = attempt_of(pod), pod["metadata"]
            job = str(metadata.get("labels", {}).get(JOB_LABEL, ""))
            if attempt in expected:
                present.add(attempt)  # a finished one's end comes through watch
                jobs_in_use.add(job)
            elif not is_terminal(pod):
                jobs_in_use.add(job)
                await self._delete_unexpected(pod)
            else:
                finish = _parse_time(finished_at(pod) or metadata.get("creationTimestamp"))
                if finish is not None:
                    last_finish[job] = max(finish, last_finish.get(job, finish))
        await self._remove_finished_jobs(jobs_in_use, last_finish)
        return present

    async def _delete_unexpected(self, pod: Object) -> None:
        name, attempt = pod["metadata"]["name"], attempt_of(pod)
        if pod["metadata"].get("deletionTimestamp"):
            return  # already on its way out
        log.warning("deleting pod %s: attempt %s is not expected to run", name, attempt)
        self._stopping.add(attempt)
        with suppress(NotFound):
            await self._api.delete_pod(name, 0)

    async def _remove_finished_jobs(self, jobs_in_use: set[str], last_finish: dict[str, datetime]) -> None:
        now = datetime.now(UTC)
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{JOB_LABEL}"
        for service in await self._api.list_services(selector):
            metadata = service["metadata"]
            job = str(metadata.get("labels", {}).get(JOB_LABEL, ""))
            if job in jobs_in_use:
                continue
            since = last_finish.get(job) or _parse_time(metadata.get("creationTimestamp")) or now
            if (now - since).total_seconds() >= self.settings.keep_finished_s:
                log.info("deleting Service %s of finished job %s and its pods", metadata["name"], job)
                with suppress(NotFound):
                    await self._api.delete_service(metadata["name"])
