"""The monitor: node liveness and inventory from the exporters' heartbeats.

``python -m services.monitor`` is the service; ``python -m services.monitor.exporter``
runs on each GPU machine and reads its GPUs (NVML, or simulated ones).
"""
