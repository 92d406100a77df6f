"""A machine with NVIDIA GPUs whose driver is broken, for tests: an honest, labelled fake.

Two parts, each standing for what cannot exist on a machine without GPUs:

- ``fake_sysfs``: a ``/sys/bus/pci/devices`` tree holding NVIDIA 3D controllers (vendor
  0x10de, class 0x0302), as the kernel shows a GPU server's, for the exporter's
  ``device_root``;
- ``failing_nvml``: a ``libnvidia-ml.so.1`` built here whose ``nvmlInitWithFlags``
  answers ``NVML_ERROR_DRIVER_NOT_LOADED``, as NVML does when the kernel module is not
  loaded. Put its directory on ``LD_LIBRARY_PATH`` and pynvml loads it instead of the
  (absent) real one.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

NVML_ERROR_DRIVER_NOT_LOADED = 9
_SOURCE = f"""
/* A stand-in for NVIDIA's NVML with the driver not loaded (tests only). */
int nvmlInitWithFlags(unsigned int flags) {{ (void)flags; return {NVML_ERROR_DRIVER_NOT_LOADED}; }}
int nvmlInit_v2(void) {{ return {NVML_ERROR_DRIVER_NOT_LOADED}; }}
int nvmlShutdown(void) {{ return 0; }}
"""


def fake_sysfs(root: Path, gpus: int = 8) -> Path:
    """``root`` with ``sys/bus/pci/devices`` holding ``gpus`` NVIDIA GPUs and, beside them,
    one NVIDIA audio function and one other vendor's GPU, which are not counted."""
    devices = root / "sys" / "bus" / "pci" / "devices"
    entries = [(f"0000:{0x18 + i:02x}:00.0", "0x10de", "0x030200") for i in range(gpus)]
    entries += [("0000:18:00.1", "0x10de", "0x040300"), ("0000:03:00.0", "0x1002", "0x030000")]
    for address, vendor, device_class in entries:
        device = devices / address
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(device_class + "\n")
    return root


def failing_nvml(directory: Path) -> Path:
    """Build the failing ``libnvidia-ml.so.1`` in ``directory``; returns the directory."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "a C compiler is needed to build the failing NVML (apt-get install gcc)"
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "nvml_failing.c"
    source.write_text(_SOURCE)
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(directory / "libnvidia-ml.so.1"), str(source)], check=True
    )
    return directory
