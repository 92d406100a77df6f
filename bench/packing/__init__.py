"""GPU packing on the Alibaba GPU-sharing trace, as the FGD paper measures it (``python -m
bench.packing``): the trace's 1,213 nodes, pods arriving one at a time without departures
until their GPU request reaches 130 % of the cluster's GPUs, and how much of the cluster's
GPU capacity each policy has allocated by then.

The policies: FGD and the paper's packing baselines as its simulator scores them
(``fragmentation.py``, ``baselines.py``; checked against the simulator's published means),
and Corral's own placement code, ``services.scheduler.placement``, called as the live
planner calls it (``corral.py``). The replay (``replay.py``) keeps its own ledger of what
each policy placed (``cluster.py``) and refuses any placement that over-commits a node.
"""
