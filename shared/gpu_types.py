"""GPU types: the short name a job asks for (``H100``) from the model NVML reports.

NVML names a GPU by its full marketing model (``NVIDIA H100 80GB HBM3``,
``NVIDIA A100-SXM4-80GB``, ``Tesla V100-SXM2-16GB``); users, quotas and job specs say
``H100``, ``A100``, ``V100``. The type is the first word of the model that looks like a
product code (letters then digits: H100, A10G, L40S, GB200), upper case; consumer and
workstation cards keep their family too (``RTX 4090`` -> ``RTX4090``); a model with
neither is its own type. The scheduler (placement), the API (submit checks, VC quotas) and the
CLI all use this one function, so they agree on what ``H100`` means.

A MIG device (a slice of a GPU in MIG mode) is a GPU type of its own: its GPU's type, a
dash, and its MIG profile (``NVIDIA H100 80GB HBM3 MIG 1g.10gb`` -> ``H100-1G.10GB``), so
a job asks for a slice like any other type and is placed on whole slices of it. A profile
with attributes (``1g.10gb+me``: with the media engines) keeps them after a dash
(``H100-1G.10GB-ME``), because a job's ``gpu_type`` has no ``+``; it is another type,
as NVIDIA's device plugin makes it another resource.
"""

from __future__ import annotations

import re

_PRODUCT_CODE = re.compile(r"\b([A-Za-z]{1,3}\d{1,4}[A-Za-z]{0,3})\b")
_FAMILY_NUMBER = re.compile(r"\b(RTX|GTX|TITAN|QUADRO)[\s-]+([A-Za-z]?\d{3,4}[A-Za-z]{0,3})\b", re.IGNORECASE)
_NOISE = re.compile(r"\b(NVIDIA|Simulated|Tesla|GeForce)\b", re.IGNORECASE)
# "MIG" and a profile ending a model: slices (``1g``), memory (``10gb``), a compute
# instance smaller than its GPU instance first (``1c.3g.40gb``), attributes last (``+me``).
_MIG_PROFILE = re.compile(
    r"(?:^|\s)MIG\s+((?:\d+c\.)?\d+g\.\d+gb(?:\+[a-z]+(?:,[a-z]+)*)?)\s*$", re.IGNORECASE
)


def mig_profile_of(model: str) -> str | None:
    """``NVIDIA H100 80GB HBM3 MIG 1g.10gb`` -> ``1g.10gb``; ``None`` for a whole GPU."""
    found = _MIG_PROFILE.search(model)
    return found.group(1) if found else None


def gpu_type_of(model: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``H100``; ``NVIDIA GeForce RTX 4090`` -> ``RTX4090``;
    ``NVIDIA H100 80GB HBM3 MIG 1g.10gb`` -> ``H100-1G.10GB``."""
    mig = _MIG_PROFILE.search(model)
    if mig is None:
        return _whole_gpu_type(model)
    profile = re.sub(r"[+,]", "-", mig.group(1)).upper()
    parent = model[: mig.start()].strip()
    return f"{_whole_gpu_type(parent) if parent else 'MIG'}-{profile}"


def _whole_gpu_type(model: str) -> str:
    name = _NOISE.sub(" ", model).strip()
    family = _FAMILY_NUMBER.search(name)
    if family:
        return (family.group(1) + family.group(2)).upper()
    code = _PRODUCT_CODE.search(name)
    return (code.group(1) if code else name or model).upper()
