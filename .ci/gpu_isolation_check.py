"""The sandbox on a machine with a real NVIDIA GPU (run as root, where one is lent).

``python .ci/gpu_isolation_check.py`` starts two tasks through the node agent's own
sandbox (``Sandbox.prepare`` and the helper, on whatever cgroup version the machine has),
each printing ``nvidia-smi -L`` and ``torch.cuda.device_count()``:

- given no GPU: it must see none;
- given GPU 0: it must see exactly that one, and ``CUDA_VISIBLE_DEVICES`` is its UUID.

It prints what each task said and one JSON line of verdicts last; it exits 1 when one
fails. Nothing here needs Postgres or NATS: it is the sandbox alone.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.launcher.agent.processes import spawn_sandboxed
from services.launcher.agent.sandbox.sandbox import SandboxConfig, open_sandbox
from shared.jobs import Resources

PROBE = (
    "echo cuda=$CUDA_VISIBLE_DEVICES; nvidia-smi -L 2>&1 | head -3; "
    "{python} -c 'import torch; print(\"torch_devices\", torch.cuda.device_count())' 2>&1 | tail -1; "
    "grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status"
)


def main() -> int:
    if os.geteuid() != 0:
        print("run it as root: the sandbox needs it", file=sys.stderr)
        return 2
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="corral-gpu-check-") as directory:
        scratch = Path(directory)
        scratch.chmod(0o755)
        sandbox = open_sandbox(
            SandboxConfig(
                node_id="gpu-check",
                hidden=(),
                claims_dir=scratch / "claims",
                uid_range=(2130706432, 2130771967),
                run_as="dynamic",
                pids_max=4096,
                readable=tuple(dict.fromkeys(Path(p).resolve() for p in (sys.base_prefix, sys.prefix))),
            )
        )
        said: dict[str, str] = {}
        for name, gpus in (("no_gpu", []), ("gpu0", [0])):
            launch = sandbox.prepare(
                attempt_id=f"check-{name}",
                job_id=f"check-{name}",
                username="check",
                resources=Resources(cpus=2, memory_mb=8192, gpus=len(gpus)),
                gpu_indices=gpus,
                workdir=scratch / "work" / name,
                log_path=scratch / f"{name}.log",
                pid_file=scratch / f"{name}.pid",
                exit_file=scratch / f"{name}.exit",
                command=PROBE.format(python=python),
            )
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", **launch.env}
            spawn_sandboxed(launch.argv, env).wait(300)
            said[name] = (scratch / f"{name}.log").read_text()
            sandbox.finish(f"check-{name}", f"check-{name}")
            print(f"--- {name} (cgroup v{sandbox.tree.version}) ---\n{said[name]}")
        sandbox.close()
    verdicts = {
        "cgroup_version": sandbox.tree.version,
        "no_gpu_lists_none": "GPU 0" not in said["no_gpu"],
        "no_gpu_torch_0": "torch_devices 0" in said["no_gpu"],
        "gpu0_lists_one": said["gpu0"].count("GPU 0:") == 1 and "GPU 1:" not in said["gpu0"],
        "gpu0_torch_1": "torch_devices 1" in said["gpu0"],
        "gpu0_uuid": "cuda=GPU-" in said["gpu0"],
    }
    print(json.dumps(verdicts))
    return 0 if all(v for k, v in verdicts.items() if k != "cgroup_version") else 1


if __name__ == "__main__":
    sys.exit(main())
