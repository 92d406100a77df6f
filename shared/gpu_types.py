"""GPU types: the short name a job asks for (``H100``) from the model NVML reports.

NVML names a GPU by its full marketing model (``NVIDIA H100 80GB HBM3``,
``NVIDIA A100-SXM4-80GB``, ``Tesla V100-SXM2-16GB``); users, quotas and job specs say
``H100``, ``A100``, ``V100``. The type is the first word of the model that looks like a
product code (letters then digits: H100, A10G, L40S, GB200), upper case; consumer and
workstation cards keep their family too (``RTX 4090`` -> ``RTX4090``); a model with
neither is its own type. The scheduler (placement), the API (submit checks, VC quotas) and the
CLI all use this one function, so they agree on what ``H100`` means.
"""

from __future__ import annotations

import re

_PRODUCT_CODE = re.compile(r"\b([A-Za-z]{1,3}\d{1,4}[A-Za-z]{0,3})\b")
_FAMILY_NUMBER = re.compile(r"\b(RTX|GTX|TITAN|QUADRO)[\s-]+([A-Za-z]?\d{3,4}[A-Za-z]{0,3})\b", re.IGNORECASE)
_NOISE = re.compile(r"\b(NVIDIA|Simulated|Tesla|GeForce)\b", re.IGNORECASE)


def gpu_type_of(model: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``H100``; ``NVIDIA GeForce RTX 4090`` -> ``RTX4090``."""
    name = _NOISE.sub(" ", model).strip()
    family = _FAMILY_NUMBER.search(name)
    if family:
        return (family.group(1) + family.group(2)).upper()
    code = _PRODUCT_CODE.search(name)
    return (code.group(1) if code else name or model).upper()
