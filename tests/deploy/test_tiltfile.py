"""The Tiltfile, read as the Starlark it is (Starlark's syntax is Python's), against the
files it names: no Tilt binary runs here. It must build the Dockerfile's dev stage from
a context holding everything that stage copies, sync the sources to where the image
installed them, deploy the dev overlay, and forward the API's port."""

from __future__ import annotations

import ast
from typing import Any

from tests.deploy.dockerfile import copied as copied_by
from tests.deploy.dockerfile import effective, exec_form, stage
from tests.deploy.render import ROOT, named, render, workloads

TILTFILE = ROOT / "Tiltfile"


def calls(name: str) -> list[ast.Call]:
    tree = ast.parse(TILTFILE.read_text(), "Tiltfile")
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
    ]


def constant(name: str) -> Any:
    tree = ast.parse(TILTFILE.read_text(), "Tiltfile")
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"Tiltfile defines no {name}")


def keyword(call: ast.Call, name: str) -> Any:
    (value,) = [k.value for k in call.keywords if k.arg == name]
    return ast.literal_eval(value)


def test_builds_the_dev_stage_from_a_context_with_all_it_copies() -> None:
    (build,) = calls("docker_build_with_restart")
    assert [ast.literal_eval(a) for a in build.args] == ["corral", "."]
    assert keyword(build, "dockerfile") == "deploy/Dockerfile"
    target = stage(keyword(build, "target"))
    assert target.name == "dev"
    only = set(keyword(build, "only"))
    copied = copied_by(stage("build"))
    assert copied <= only, f"outside Tilt's build context: {copied - only}"
    # The restart wrapper replaces the entrypoint: it must run the same command.
    assert keyword(build, "entrypoint") == exec_form(effective(target, "ENTRYPOINT") or "[]")


def test_live_update_syncs_the_sources_to_where_the_dev_image_lets_them_be_written() -> None:
    site_packages = constant("SITE_PACKAGES")
    python = stage("base").base.split(":")[1].split("-")[0]  # python:3.11-slim → 3.11
    assert site_packages == f"/usr/local/lib/python{python}/site-packages"
    sources = constant("SOURCES")
    assert all((ROOT / package / "__init__.py").is_file() for package in sources)
    # The dev stage hands exactly these directories to the container's user.
    (chown,) = stage("dev").all("RUN")
    assert sorted(chown.split()[-len(sources) :]) == sorted(f"{site_packages}/{p}" for p in sources)


def test_deploys_the_dev_overlay_and_names_every_workload() -> None:
    (kustomize,) = calls("kustomize")
    assert ast.literal_eval(kustomize.args[0]) == "deploy/k8s/overlays/dev"
    named_in_tiltfile = {
        ast.literal_eval(c.args[0]) for c in calls("k8s_resource") if isinstance(c.args[0], ast.Constant)
    }
    for loop in [n for n in ast.walk(ast.parse(TILTFILE.read_text())) if isinstance(n, ast.For)]:
        named_in_tiltfile |= set(ast.literal_eval(loop.iter))
    rendered = {w["metadata"]["name"] for w in workloads(render("dev"))}
    assert named_in_tiltfile == rendered


def test_forwards_the_api_port() -> None:
    (api,) = [
        c
        for c in calls("k8s_resource")
        if isinstance(c.args[0], ast.Constant) and c.args[0].value == "corral-api"
    ]
    (forward,) = keyword(api, "port_forwards")
    local, _, remote = forward.partition(":")
    (container,) = named(render("dev"), "Deployment", "corral-api")["spec"]["template"]["spec"]["containers"]
    assert int(remote) in [p["containerPort"] for p in container["ports"]]
    assert local == remote


def test_dev_dependencies_apply_the_dev_postgres() -> None:
    (deps,) = [c for c in calls("local_resource") if ast.literal_eval(c.args[0]) == "dev-deps"]
    for path in keyword(deps, "deps"):
        assert (ROOT / path).is_file()
