"""Composition root of the exporter: sample the GPUs, publish a heartbeat, repeat.

Heartbeats go straight to the metrics stream (no outbox: the exporter owns no table,
and a lost heartbeat is replaced by the next one a second later).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import sys
import time

from services.monitor.exporter.backend import GpuBackend, open_backend
from services.monitor.exporter.capacity import node_capacity
from services.monitor.settings import Settings
from shared.aio import raise_if_cancelling
from shared.bus.nats import NatsBus
from shared.container_runtime import ContainerRuntimeSettings, RuntimeName, runtime_refusal
from shared.events import NodeTelemetry
from shared.events.nodes import NodeTelemetryData
from shared.gpu_sharing import GpuSharingSettings, mode_refusal
from shared.gpu_types import gpu_type_of, mig_profile_of
from shared.service import Health, run_service, serve_health
from shared.telemetry import setup_telemetry, shutdown_telemetry

log = logging.getLogger(__name__)
SOURCE = "corral/exporter"


async def publish_forever(
    bus: NatsBus, backend: GpuBackend, settings: Settings, sharing: GpuSharingSettings, runtime: RuntimeName
) -> None:
    node_id = settings.exporter.node_id
    boot = f"{int(time.time())}-{os.getpid()}"
    hostname = socket.gethostname()
    capacity = node_capacity(settings.exporter.cpus, settings.exporter.memory_mb, simulated=backend.simulated)
    for seq in itertools.count():
        started = time.monotonic()
        gpus = await asyncio.to_thread(backend.sample)
        event = NodeTelemetry(
            source=SOURCE,
            subject=node_id,
            id=f"{node_id}-{boot}-{seq}",
            data=NodeTelemetryData(
                node_id=node_id,
                hostname=hostname,
                address=settings.exporter.address,
                simulated=backend.simulated,
                interval_s=settings.exporter.interval_s,
                boot_id=boot,
                gpus=gpus,
                rack=settings.exporter.rack,
                cpus=capacity.cpus,
                memory_mb=capacity.memory_mb,
                gpu_sharing=sharing.mode,
                container_runtime=runtime,
                gpu_fault=backend.fault,
            ),
        )
        try:
            await bus.publish(event.nats_subject, event.model_dump_json().encode(), msg_id=event.id)
        except Exception as exc:  # NATS down or slow: skip this beat, keep beating
            raise_if_cancelling()
            log.warning("heartbeat not published (%s)", exc)
        await asyncio.sleep(max(0.0, settings.exporter.interval_s - (time.monotonic() - started)))


async def serve(
    settings: Settings, backend: GpuBackend, sharing: GpuSharingSettings, runtime: RuntimeName
) -> None:
    provider = setup_telemetry("exporter", settings.common.telemetry)
    exporter = settings.exporter
    bus = await NatsBus.connect(settings.common.nats, name=f"corral-exporter-{exporter.node_id}")
    try:
        await bus.ensure_streams()

        async def nats_connected() -> bool:
            return bus.nc.is_connected

        health = Health("exporter", {"nats": nats_connected})
        async with asyncio.TaskGroup() as tg:
            tg.create_task(serve_health(health, settings.common.health), name="health")
            tg.create_task(publish_forever(bus, backend, settings, sharing, runtime), name="heartbeats")
    finally:
        await bus.close()
        backend.close()
        shutdown_telemetry(provider)


def main() -> int:
    from services.monitor.exporter.nvml import mig_enabled  # (pynvml only where it is asked for)

    settings = Settings()
    exporter = settings.exporter
    backend = open_backend(
        exporter.backend,
        node_id=exporter.node_id,
        simulated_gpus=exporter.simulated_gpus,
        simulated_model=exporter.simulated_model,
        faults_file=exporter.faults_file,
        simulated_nvlink_domain_size=exporter.simulated_nvlink_domain_size,
        device_root=exporter.device_root,
    )
    sharing = GpuSharingSettings()
    # A mode whose tool this node lacks is refused here, before the node announces itself:
    # fractions that nothing enforces must not be placed on it.
    # (a lost GPU's "unknown" model is no profile of its own)
    samples = backend.sample() if sharing.mode == "mig" else []
    types = {gpu_type_of(gpu.model) for gpu in samples if mig_profile_of(gpu.model)}
    refusal = mode_refusal(
        sharing.mode,
        sharing,
        simulated=backend.simulated,
        mig_enabled=mig_enabled(backend),
        gpu_types=types,
        fault=backend.fault,
    )
    # A runtime named but missing likewise: jobs with images must not be placed where
    # they cannot run in their image.
    runtime = ContainerRuntimeSettings()
    refusal = refusal or runtime_refusal(runtime)
    if refusal:
        backend.close()
        print(f"corral exporter: {refusal}", file=sys.stderr)
        return 2
    return run_service("exporter", lambda: serve(settings, backend, sharing, runtime.name))
