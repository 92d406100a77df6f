"""The launcher's Role grants exactly the verbs its Kubernetes driver uses.

The verbs are derived from the driver's source, not restated: every ``CoreV1Api``
method it calls (``create_namespaced_pod`` → create pods, ``read_namespaced_pod_log`` →
get pods/log, ``list_namespaced_pod(..., watch=True)`` → watch pods...), and every
request it makes through ``ApiClient.call_api`` by path and HTTP method (``GET
.../pods/{name}/log`` → get pods/log), as the API server authorises them. A new call
without its rule fails here, and so does a rule no call needs.
"""

from __future__ import annotations

import ast
import re

from kubernetes_asyncio.client import CoreV1Api

from services.launcher.kubernetes.exec import UPGRADED_SUBRESOURCES
from tests.deploy.render import OVERLAYS, ROOT, named, of_kind, render

DRIVER = ROOT / "services" / "launcher" / "kubernetes"
CORE_METHODS = {name for name in dir(CoreV1Api) if not name.startswith("_")}
# The HTTP verbs' RBAC names, as the API server maps them.
VERBS = {
    "create": "create",
    "read": "get",
    "list": "list",
    "delete_collection": "deletecollection",
    "delete": "delete",
    "patch": "patch",
    "replace": "update",
}
NAMESPACED = re.compile(
    r"^(?P<verb>create|read|list|delete_collection|delete|patch|replace)_namespaced_(?P<what>\w+)$"
)
SUBRESOURCES = {
    "log",
    "status",
    "exec",
    "attach",
    "portforward",
    "proxy",
    "binding",
    "eviction",
    "ephemeralcontainers",
}

Grant = tuple[str, str]  # (resource, verb), in the core API group

# A raw request's path in the core group, in one namespace: the resource, perhaps an
# object of it, perhaps a subresource of that object.
CORE_PATH = re.compile(
    r"^/api/v1/namespaces/\{namespace\}/(?P<resource>[a-z]+)(?:/\{name\}(?:/(?P<sub>[a-z]+))?)?$"
)
HTTP_VERBS = {  # (method, names one object) -> verb
    ("GET", True): "get",
    ("GET", False): "list",
    ("POST", False): "create",
    ("PUT", True): "update",
    ("PATCH", True): "patch",
    ("DELETE", True): "delete",
    ("DELETE", False): "deletecollection",
}


def resource_of(what: str) -> str:
    """``pod`` → ``pods``; ``pod_log`` → ``pods/log``; ``persistent_volume_claim`` → ..."""
    head, _, tail = what.rpartition("_")
    if head and tail in SUBRESOURCES:
        return f"{resource_of(head)}/{tail}"
    plural = what.replace("_", "")
    return plural if plural.endswith("s") else plural + "s"


def _literal(node: ast.expr | None, what: str, where: str) -> str:
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        raise AssertionError(f"{where}: call_api's {what} is not a literal: teach this test to read it")
    return node.value


def grant_requested(call: ast.Call, where: str) -> Grant:
    """What ``api_client.call_api(path, method, ...)`` needs, from its literal arguments."""
    path = _literal(call.args[0] if call.args else None, "path", where)
    method = _literal(call.args[1] if len(call.args) > 1 else None, "method", where)
    match = CORE_PATH.match(path)
    assert match, f"{where} requests {path}: teach this test that path"
    resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
    watching = any(k.arg == "query_params" and "watch" in ast.unparse(k.value) for k in call.keywords)
    verb = HTTP_VERBS[(method.upper(), "{name}" in path)]
    return resource, "watch" if watching and verb == "list" else verb


def grants_called(source: str, filename: str = "<source>") -> set[Grant]:
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "kubernetes_asyncio.client":
            apis = {a.name for a in node.names if a.name.endswith("Api") and a.name != "CoreV1Api"}
            assert not apis, f"{filename} uses {apis}: teach this test their API groups"
        if isinstance(node, ast.ImportFrom | ast.Import):
            modules = (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            )
            assert not any(m.startswith("kubernetes_asyncio.watch") for m in modules), (
                f"{filename} uses kubernetes_asyncio.watch: teach this test its watch calls"
            )
    grants: set[Grant] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method = node.func.attr
        if method == "call_api":
            grants.add(grant_requested(node, f"{filename}:{node.lineno}"))
            continue
        if method not in CORE_METHODS:
            continue
        match = NAMESPACED.match(method)
        assert match, f"{filename}:{node.lineno} calls {method}, which a namespaced Role cannot grant"
        verb = VERBS[match["verb"]]
        watching = any(
            k.arg == "watch" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
            for k in node.keywords
        )
        grants.add((resource_of(match["what"]), "watch" if watching and verb == "list" else verb))
    return grants


def driver_grants() -> set[Grant]:
    grants: set[Grant] = set()
    for path in sorted(DRIVER.glob("*.py")):
        grants |= grants_called(path.read_text(), str(path.relative_to(ROOT)))
    # exec and port-forward are WebSocket upgrades (a GET, authorised as get and create),
    # not CoreV1Api calls, so the derivation above cannot see them.
    grants |= {(f"pods/{sub}", verb) for sub in UPGRADED_SUBRESOURCES for verb in ("get", "create")}
    return grants


def role_grants(role: dict[str, object]) -> set[Grant]:
    grants: set[Grant] = set()
    rules = role["rules"]
    assert isinstance(rules, list)
    for rule in rules:
        assert rule["apiGroups"] == [""], "only the core group is called"
        assert "resourceNames" not in rule
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                assert "*" not in (resource, verb)
                grants.add((resource, verb))
    return grants


def test_the_derivation_reads_calls_as_the_api_server_authorises_them() -> None:
    source = """
from kubernetes_asyncio.client import CoreV1Api
async def f(core: CoreV1Api) -> None:
    await core.create_namespaced_pod("ns", {})
    await core.list_namespaced_pod("ns", watch=True)
    await core.list_namespaced_service("ns")
    await core.read_namespaced_pod_log("p", "ns")
    await core.delete_collection_namespaced_config_map("ns")
    await core.replace_namespaced_pod_status("p", "ns", {})
    await core.patch_namespaced_persistent_volume_claim("c", "ns", {})
    await client.call_api("/api/v1/namespaces/{namespace}/pods/{name}/log", "GET", query_params=[])
    await client.call_api("/api/v1/namespaces/{namespace}/events", "POST", body={})
    await client.call_api("/api/v1/namespaces/{namespace}/secrets", "GET", query_params=[("watch", "1")])
    something.unrelated_call()
"""
    assert grants_called(source) == {
        ("pods", "create"),
        ("pods", "watch"),
        ("services", "list"),
        ("pods/log", "get"),
        ("configmaps", "deletecollection"),
        ("pods/status", "update"),
        ("persistentvolumeclaims", "patch"),
        ("events", "create"),
        ("secrets", "watch"),
    }


def test_the_driver_calls_what_its_docstring_says() -> None:
    # Guards the scan itself: these calls are in services/launcher/kubernetes/api.py.
    (follower,) = [
        node
        for node in ast.walk(ast.parse((DRIVER / "api.py").read_text()))
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "follow_pod_log"
    ]
    assert grants_called(ast.unparse(follower)) == {("pods/log", "get")}  # through call_api
    assert {
        ("pods", "create"),
        ("pods", "watch"),
        ("pods/log", "get"),
        ("services", "delete"),
    } <= driver_grants()


def test_the_launcher_role_grants_exactly_the_driver_calls() -> None:
    called = driver_grants()
    for overlay in OVERLAYS:
        granted = role_grants(named(render(overlay), "Role", "corral-launcher"))
        assert granted - called == set(), f"{overlay}: granted but never called: {sorted(granted - called)}"
        assert called - granted == set(), f"{overlay}: called but not granted: {sorted(called - granted)}"


def test_the_role_binds_only_the_launcher_and_only_in_its_namespace() -> None:
    for overlay in OVERLAYS:
        objects = render(overlay)
        assert of_kind(objects, "ClusterRole") == []
        assert of_kind(objects, "ClusterRoleBinding") == []
        launcher = named(objects, "Deployment", "corral-launcher")
        namespace = launcher["metadata"]["namespace"]
        pod = launcher["spec"]["template"]["spec"]
        (role,) = of_kind(objects, "Role")
        (binding,) = of_kind(objects, "RoleBinding")
        assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": namespace}
        ]
        others = [
            d for d in of_kind(objects, "Deployment") + of_kind(objects, "DaemonSet") if d is not launcher
        ]
        assert all(
            o["spec"]["template"]["spec"]["serviceAccountName"] != pod["serviceAccountName"] for o in others
        )
        # The driver works in the namespace its Role is in: the pod's own.
        (container,) = pod["containers"]
        (setting,) = [e for e in container["env"] if e["name"] == "CORRAL_KUBERNETES_NAMESPACE"]
        assert setting["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
