"""How the scheduler and the API processes set up Python's cyclic garbage collector.

CPython frees almost everything by reference counting; the cyclic collector only exists
for reference cycles, which Corral's hot paths (a scheduling cycle's records, a
request's models) do not make. Yet with the default thresholds (a young collection
every 700 net allocations) it walks those objects again and again: a scheduling cycle
keeps ~100,000 records alive for its whole length, so they survive the young collections,
are promoted, and trigger full collections over every object the process holds: in
``bench.sched_throughput``, a large share of the scheduler's CPU (``gc.callbacks``
counts it).

In the API the cost is latency: 16 requests in flight keep their objects alive across
young collections, so every few hundred submits a full collection walks the FastAPI app
(its routes, pydantic models and OpenAPI schemas) for tens of milliseconds, and every
request in flight waits for it: in ``bench.api`` those pauses make the submit p99.
Frozen after the app is built, a full collection is an order of magnitude shorter.
(docs/performance.md has the figures.)

So, once at start-up:

- ``gc.freeze()``: what exists once the service's code is imported (modules, classes,
  functions, settings) lives as long as the process; frozen, no collection walks it again;
- a young collection every ``YOUNG_THRESHOLD`` net allocations instead of 700: a cycle's
  or a request's short-lived objects are freed by reference counting before it comes,
  and the rare cycles of garbage (an exception's traceback) are still collected.

The older generations keep their defaults (and CPython's rule that a full collection
waits until a quarter of the long-lived objects are new).

The scheduler does this before it starts, the API once its app is built. The other
services keep CPython's defaults: nothing there keeps such a crowd alive at once, so
the setting is taken only where it shows a gain.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000


def tune_garbage_collector() -> None:
    """Freeze what start-up made, and collect young objects far less often (see above)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
