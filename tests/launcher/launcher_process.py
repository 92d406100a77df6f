"""The real launcher process, run with the Kubernetes driver against the fake API server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def kubernetes_launcher_env(
    home: Path, kube_url: str, token: str, database_url: str, nats_url: str
) -> dict[str, str]:
    """The launcher's environment: the driver on, a kubeconfig (written under ``home``)
    naming the fake API server and ``token``, nothing of this process's CORRAL_*."""
    kubeconfig = home / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{kube_url}'}}}}]\n"
        f"users: [{{name: fake, user: {{token: {token}}}}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: corral}}]\n"
    )
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "KUBERNETES_"))},
        "CORRAL_DATABASE_URL": database_url,
        "CORRAL_NATS_URL": nats_url,
        "CORRAL_HOME": str(home),
        "CORRAL_LAUNCHER_DRIVER": "kubernetes",
        "CORRAL_LAUNCHER_RECONCILE_INTERVAL_S": "0.2",
        "CORRAL_KUBERNETES_NODE_PATTERN": "^k8s-",
        "KUBECONFIG": str(kubeconfig),
    }


def start_launcher(env: dict[str, str], output: Path) -> subprocess.Popen[bytes]:
    with output.open("wb") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "services.launcher"], env=env, stdout=log, stderr=log)
