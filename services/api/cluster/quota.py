"""Whether a VC's quota can hold: the warnings a ``PUT`` of a quota answers with.

A quota is accepted even when the quotas of all VCs add up to more GPUs of a type than
the cluster has (nodes come and go, and an admin may be adding some); the answer then
carries a warning, because the guarantee cannot hold for every VC at once.
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.gpu_types import gpu_type_of


def gpus_per_type(nodes: Iterable[tuple[int, str | None]]) -> dict[str, int]:
    """The cluster's GPUs per GPU type, from (GPU count, GPU model) per registered node."""
    totals: dict[str, int] = {}
    for gpus, model in nodes:
        if gpus and model:
            gpu_type = gpu_type_of(model)
            totals[gpu_type] = totals.get(gpu_type, 0) + gpus
    return totals


def quota_warnings(quota: dict[str, int], have: dict[str, int], promised: dict[str, int]) -> list[str]:
    """``have``: the cluster's GPUs per type; ``promised``: what the other VCs' quotas
    guarantee per type."""
    warnings = []
    for gpu_type, gpus in sorted(quota.items()):
        if not gpus:
            continue
        if gpu_type not in have:
            warnings.append(f"no registered node has {gpu_type} GPUs yet; the quota holds once some do")
        elif promised.get(gpu_type, 0) + gpus > have[gpu_type]:
            warnings.append(
                f"VCs are promised {promised.get(gpu_type, 0) + gpus} {gpu_type} GPUs in all and the cluster"
                f" has {have[gpu_type]}: not every VC can get its quota at once"
            )
    return warnings
