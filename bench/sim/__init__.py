"""The trace simulator behind ``python -m bench.simulate``: a discrete-event replay of a
job trace on a simulated cluster (``engine.py``), the trace format (``traces.py``), and
the policies it compares (``policy/``: FIFO, EASY backfill, the SJF/SRTF oracles,
Tiresias' LAS, and Corral's own).

Corral's policy here is not a model of the scheduler: ``policy/corral.py`` calls the
live service's ``services.scheduler.planner.plan`` itself, so what the simulator
measures is what the scheduler runs. The other policies exist only to be compared
with it; the live service never imports anything from here.
"""
