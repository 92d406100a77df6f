"""The job specs ``corral notebook start`` and ``corral tensorboard`` submit.

Each is an ordinary one-task job (the scheduler, quotas, logs and ``corral cancel`` treat
it like any other) with one labelled port that the app listens on, on the task's
loopback only. People reach it through the API's proxy,
``/proxy/<job>/<role>-0/<label>/``, which checks who is asking; the role keeps that
prefix on the path (``proxy_prefix: keep``) because both apps are told it as their base
URL (``$CORRAL_PROXY_PATH_<LABEL>``) and write their own links with it.

JupyterLab is also guarded by a token of its own, random per notebook and given in the
job's environment (Jupyter reads ``JUPYTER_TOKEN`` itself, so it is never on a command
line that the task's other processes could list): the proxy decides which people may
reach the port, the token keeps out other processes on the node that can reach the
task's loopback port.

Each command first checks that its program is installed where the task runs, and
otherwise ends with 127 and says what to install, rather than a shell's bare
"not found" in the log.
"""

from __future__ import annotations

import secrets
from typing import Any

NOTEBOOK = "notebook"  # the job's name and role
JUPYTER = "jupyter"  # its port label
TENSORBOARD = "tensorboard"  # the job's name, role and port label
TOKEN_VARIABLE = "JUPYTER_TOKEN"  # noqa: S105 (the name of the variable, not a secret)

# How long a notebook may sit idle before Jupyter stops its kernels and then itself (the
# job then ends SUCCEEDED and its GPUs go back): an hour. Determined's reference is off
# (its master setting `notebook_timeout` "Defaults to null, i.e. disabled";
# docs.determined.ai, Master Configuration Reference; its TensorBoards'
# `tensorboard_timeout` is 300 s). Corral stops idle notebooks by default because on a
# shared cluster a forgotten one holds its GPUs; `--idle-timeout 0` keeps one for ever.
DEFAULT_IDLE_TIMEOUT_S = 3600
# How often Jupyter looks for idle kernels: a tenth of the timeout, at least once a minute.
MAX_CULL_INTERVAL_S = 60


def port_variable(label: str) -> str:
    """The variable holding a task's first port of ``label`` (``jupyter`` → ``…_JUPYTER``)."""
    return "CORRAL_PORT_" + _token(label)


def proxy_path_variable(label: str) -> str:
    """The variable holding the proxy's path to the task's port ``label``."""
    return "CORRAL_PROXY_PATH_" + _token(label)


def new_token() -> str:
    return secrets.token_urlsafe(24)


def _token(label: str) -> str:
    return label.upper().replace("-", "_")


def _require(program: str, purpose: str) -> str:
    message = (
        f"corral {purpose}: {program} is not installed where this task runs (node $(hostname));"
        f" install it there with: pip install 'corral[notebook]'"
    )
    return f'command -v {program} >/dev/null 2>&1 || {{ echo "{message}" >&2; exit 127; }}'


def notebook_command(idle_timeout_s: int) -> str:
    cull_interval = max(1, min(MAX_CULL_INTERVAL_S, idle_timeout_s // 10 or MAX_CULL_INTERVAL_S))
    options = [
        "--no-browser",
        "--ip=127.0.0.1",
        f'--port="${port_variable(JUPYTER)}"',
        f'--ServerApp.base_url="${proxy_path_variable(JUPYTER)}"',
        # Links and redirects as the browser sees them: the proxy's host and scheme.
        "--ServerApp.trust_xheaders=True",
        # The Host header is the API's, not 127.0.0.1: the proxy has already decided who
        # may reach this port, which is what Jupyter's Host check stands in for.
        "--ServerApp.allow_remote_access=True",
        f"--ServerApp.shutdown_no_activity_timeout={idle_timeout_s}",
        f"--MappingKernelManager.cull_idle_timeout={idle_timeout_s}",
        f"--MappingKernelManager.cull_interval={cull_interval}",
    ]
    return f"{_require('jupyter', 'notebook')}\nexec jupyter lab {' '.join(options)}\n"


def notebook_spec(
    *, gpus: float, virtual_cluster: str | None, idle_timeout_s: int, token: str, memory_mb: int | None
) -> dict[str, Any]:
    resources: dict[str, Any] = {"gpus": gpus}
    if memory_mb is not None:
        resources["memory_mb"] = memory_mb
    spec: dict[str, Any] = {
        "name": NOTEBOOK,
        "tasks": [
            {
                "name": NOTEBOOK,
                "command": notebook_command(idle_timeout_s),
                "resources": resources,
                "ports": {JUPYTER: 1},
                "proxy_prefix": "keep",
                "env": {TOKEN_VARIABLE: token},
            }
        ],
    }
    if virtual_cluster:
        spec["virtual_cluster"] = virtual_cluster
    return spec


def tensorboard_command() -> str:
    prefix = proxy_path_variable(TENSORBOARD)
    return (
        f"{_require('tensorboard', 'tensorboard')}\n"
        "mkdir -p events\n"
        # TensorBoard wants the prefix without its trailing slash.
        f'exec tensorboard --logdir events --host 127.0.0.1 --port "${port_variable(TENSORBOARD)}"'
        f' --path_prefix "${{{prefix}%/}}"\n'
    )


def tensorboard_spec(source_job: str, *, virtual_cluster: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": TENSORBOARD,
        "tasks": [
            {
                "name": TENSORBOARD,
                "command": tensorboard_command(),
                "ports": {TENSORBOARD: 1},
                "proxy_prefix": "keep",
                # The node copies the source job's event files into events/ as they grow.
                "event_files_from": source_job,
            }
        ],
    }
    if virtual_cluster:
        spec["virtual_cluster"] = virtual_cluster
    return spec
