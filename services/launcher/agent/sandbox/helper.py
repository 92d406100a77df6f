"""The sandbox helper program (``corral_sandbox.c``): built once per machine, checked.

The helper does in one exec what would otherwise take a chain of util-linux tools
(``unshare``, ``mount``, ``setpriv``) and a shell to join the cgroups: each of those is
a fork and an exec per task, and the agent starts a hundred tasks a second. It is
compiled from the source next to this file with the machine's C compiler, into a
directory of root's alone named after the source's hash, so a changed source is
rebuilt and nobody but root can run or replace the binary. ``CORRAL_AGENT_SANDBOX_HELPER`` names a
prebuilt one instead (a container image builds it when the image is built).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("corral_sandbox.c")
BUILD_ROOT = Path("/var/lib/corral")


class HelperProblem(Exception):
    """The helper cannot be built or does not work here; the message says why."""


def helper_binary(prebuilt: Path | None = None, build_root: Path = BUILD_ROOT) -> Path:
    if prebuilt is not None:
        if not os.access(prebuilt, os.X_OK):
            raise HelperProblem(f"CORRAL_AGENT_SANDBOX_HELPER={prebuilt} is not an executable file")
        return prebuilt
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    target = build_root / f"sandbox-{digest}" / "corral-sandbox"
    if target.is_file():
        return target
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise HelperProblem(
            "no C compiler (cc) to build the task sandbox helper from "
            f"{SOURCE}: install one (Debian: apt-get install gcc) or set CORRAL_AGENT_SANDBOX_HELPER "
            "to a prebuilt corral-sandbox"
        )
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(target.parent, 0o700)  # root's alone: only the agent runs it
    # Built beside its final name, then renamed: agents starting together never run a
    # half-written binary.
    fd, partial = tempfile.mkstemp(dir=target.parent, prefix=".build-")
    os.close(fd)
    try:
        # Static where the C library's static archive exists: no dynamic loader in a
        # process root starts (nothing of its environment is read: it gets none either),
        # and a quicker start per task. Dynamic otherwise.
        for linking in (["-static"], []):
            built = subprocess.run(
                [compiler, "-O2", "-Wall", *linking, "-o", partial, str(SOURCE)],
                capture_output=True,
                text=True,
                check=False,
            )
            if built.returncode == 0:
                break
        else:
            raise HelperProblem(f"{compiler} could not build {SOURCE}:\n{built.stderr.strip()}")
        os.chmod(partial, 0o700)
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)
    return target
