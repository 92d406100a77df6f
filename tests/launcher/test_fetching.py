"""Fetching a task's sources (``tasks[].fetch``) with real processes: a real git
repository, archives served over HTTP by a server in a thread, ``file://`` copies, the
unsafe archives and the escapes refused, and the reasons a failed fetch gives.

Run through ``fetch_sources`` as the node agent calls it before a spawn; the agent's own
path (its report and classification in Postgres) is in ``test_fetching_agent.py``.
"""

from __future__ import annotations

import http.server
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.launcher.agent.fetching import (
    FETCH_FAILED,
    FETCH_REFUSED,
    FetchFailure,
    FetchSettings,
    failure_of,
    fetch_sources,
)
from services.launcher.agent.sandbox.sandbox import Sandbox
from services.launcher.agent.tasks import Task
from shared.fetch_spec import Fetch

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")


def git(repo: Path, *argv: str) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1"}
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]
    done = subprocess.run(
        ["git", *identity, *argv], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def make_repo(repo: Path) -> tuple[str, str]:
    """A repository with two commits (the first tagged v1); their hashes."""
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet")
    (repo / "train.py").write_text("print('one')\n")
    git(repo, "add", "train.py")
    git(repo, "commit", "--quiet", "-m", "one")
    first = git(repo, "rev-parse", "HEAD")
    git(repo, "tag", "v1")
    (repo / "train.py").write_text("print('two')\n")
    git(repo, "commit", "--quiet", "-am", "two")
    return first, git(repo, "rev-parse", "HEAD")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A directory served over HTTP on a free loopback port: (base URL, directory)."""
    root = tmp_path / "served"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()
    server.server_close()
    thread.join()


def tarball(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


async def fetched(
    tmp_path: Path, items: list[dict[str, Any]], settings: FetchSettings | None = None
) -> tuple[Task, Path, str | None]:
    """Fetch as an unsandboxed agent does: (the task, its working directory, the failure)."""
    task = Task(f"att-{uuid.uuid4().hex[:12]}", job_id="job-test")
    cwd = tmp_path / "work" / "job-test"
    specs = [Fetch.model_validate(item) for item in items]
    failed = await fetch_sources(task, specs, "alice", cwd, None, settings or FetchSettings())
    return task, cwd, None if failed is None else failed.reason


async def test_a_git_fetch_checks_out_the_commit_asked_for(tmp_path: Path) -> None:
    first, second = make_repo(tmp_path / "repo")
    uri = f"file://{tmp_path / 'repo'}"
    items = [
        {"uri": uri, "kind": "git", "version": first, "path": "at-commit"},
        {"uri": uri, "kind": "git", "version": "v1", "path": "at-tag"},
        {"uri": uri, "kind": "git", "path": "at-head"},
    ]
    _, cwd, failed = await fetched(tmp_path, items)
    assert failed is None
    assert git(cwd / "at-commit", "rev-parse", "HEAD") == first
    assert (cwd / "at-commit" / "train.py").read_text() == "print('one')\n"
    assert git(cwd / "at-tag", "rev-parse", "HEAD") == first
    assert git(cwd / "at-head", "rev-parse", "HEAD") == second
    assert git(cwd / "at-head", "rev-list", "--count", "HEAD") == "1"  # shallow
    assert not list(cwd.glob(".corral-fetch-*"))  # its staging went


async def test_an_abbreviated_commit_is_found_in_the_whole_history(tmp_path: Path) -> None:
    first, _ = make_repo(tmp_path / "repo")
    _, cwd, failed = await fetched(
        tmp_path,
        [{"uri": f"file://{tmp_path / 'repo'}", "kind": "git", "version": first[:10], "path": "code"}],
    )
    assert failed is None
    assert git(cwd / "code", "rev-parse", "HEAD") == first


async def test_archives_over_http_are_unpacked(tmp_path: Path, served: tuple[str, Path]) -> None:
    base, root = served
    tarball(root / "data.tar.gz", {"data/train.csv": b"a,b\n1,2\n"})
    with zipfile.ZipFile(root / "model.zip", "w") as zipped:
        zipped.writestr("weights/model.pt", b"weights")
    (root / "config.yaml").write_text("lr: 0.1\n")
    items = [
        {"uri": f"{base}/data.tar.gz", "kind": "archive", "path": "data_corpus"},
        {"uri": f"{base}/model.zip", "kind": "archive", "path": "data_model"},
        {"uri": f"{base}/config.yaml", "kind": "file", "path": "conf/config.yaml"},
    ]
    _, cwd, failed = await fetched(tmp_path, items)
    assert failed is None
    assert (cwd / "data_corpus" / "data" / "train.csv").read_bytes() == b"a,b\n1,2\n"
    assert (cwd / "data_model" / "weights" / "model.pt").read_bytes() == b"weights"
    assert (cwd / "conf" / "config.yaml").read_text() == "lr: 0.1\n"


async def test_file_uris_are_copied_a_directory_as_a_tree(tmp_path: Path) -> None:
    source = tmp_path / "dataset"
    (source / "part").mkdir(parents=True)
    (source / "part" / "0.bin").write_bytes(b"\0" * 100)
    (source / "labels.txt").write_text("cat\n")
    items = [
        {"uri": f"file://{source}", "kind": "file", "path": "data"},
        {"uri": f"file://{source / 'labels.txt'}", "kind": "file", "path": "labels.txt"},
    ]
    _, cwd, failed = await fetched(tmp_path, items)
    assert failed is None
    assert (cwd / "data" / "part" / "0.bin").read_bytes() == b"\0" * 100
    assert (cwd / "labels.txt").read_text() == "cat\n"


async def test_a_path_already_there_is_kept(tmp_path: Path) -> None:
    """Another task of the job on this node (or an earlier attempt) fetched it first."""
    (tmp_path / "new.txt").write_text("new\n")
    cwd = tmp_path / "work" / "job-test"
    cwd.mkdir(parents=True)
    (cwd / "kept.txt").write_text("in use\n")
    _, _, failed = await fetched(
        tmp_path, [{"uri": f"file://{tmp_path / 'new.txt'}", "kind": "file", "path": "kept.txt"}]
    )
    assert failed is None
    assert (cwd / "kept.txt").read_text() == "in use\n"


async def test_a_link_planted_on_the_way_is_refused(tmp_path: Path) -> None:
    """A task of the job could leave ``data -> /somewhere`` in the shared working directory
    for a later fetch to follow: the fetch runs outside the task's sandbox, so it refuses."""
    (tmp_path / "new.txt").write_text("new\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cwd = tmp_path / "work" / "job-test"
    cwd.mkdir(parents=True)
    (cwd / "data").symlink_to(elsewhere)
    task, _, failed = await fetched(
        tmp_path, [{"uri": f"file://{tmp_path / 'new.txt'}", "kind": "file", "path": "data/new.txt"}]
    )
    assert (
        failed == f"could not fetch file://{tmp_path / 'new.txt'}: data is a link; fetch to a real directory"
    )
    assert task.platform == FETCH_REFUSED
    assert list(elsewhere.iterdir()) == []


def test_a_failure_line_that_is_not_the_workers_is_read_as_output() -> None:
    """In a pod the worker runs on the task image's Python: its last line may be anything."""
    for said in (b"CORRAL-FETCH-FAILED x", b'CORRAL-FETCH-FAILED {"uri": 1}', b"CORRAL-FETCH-FAILED []"):
        failure = failure_of(said + b"\n", 3)
        assert failure.uri == "its sources"
        assert failure.permanent is False
    good = b'CORRAL-FETCH-FAILED {"uri": "https://x/y", "what": "HTTP 404", "permanent": true}\n'
    assert failure_of(good, 3) == FetchFailure("https://x/y", "HTTP 404", True)


@pytest.mark.parametrize(
    ("members", "links", "refusal"),
    [
        ({"../evil": b"x"}, {}, "refused: the archive's member '../evil' would land outside its directory"),
        (
            {"/etc/evil": b"x"},
            {},
            "refused: the archive's member '/etc/evil' would land outside its directory",
        ),
        ({}, {"escape": "/etc/passwd"}, "refused: 'escape' is a link to an absolute path"),
        ({}, {"up": "../../outside"}, "refused: 'up' would link to"),
    ],
)
async def test_an_archive_reaching_outside_is_refused(
    tmp_path: Path, members: dict[str, bytes], links: dict[str, str], refusal: str
) -> None:
    archive = tarball(tmp_path / "evil.tar.gz", members, links)
    task, cwd, failed = await fetched(
        tmp_path, [{"uri": f"file://{archive}", "kind": "archive", "path": "data"}]
    )
    assert failed is not None
    assert failed.startswith(f"could not fetch file://{archive}: {refusal}"), failed
    assert task.platform == FETCH_REFUSED
    assert not (tmp_path / "work" / "evil").exists()
    assert not (cwd / "data").exists()
    assert not list(cwd.glob(".corral-fetch-*"))


async def test_a_zip_reaching_outside_is_refused(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as zipped:
        zipped.writestr("../../evil", b"x")
    task, _, failed = await fetched(
        tmp_path, [{"uri": f"file://{tmp_path / 'evil.zip'}", "kind": "archive", "path": "d"}]
    )
    assert failed is not None
    assert "refused: the archive's member '../../evil' would land outside its directory" in failed
    assert task.platform == FETCH_REFUSED


async def test_failures_name_the_uri_and_what_failed(tmp_path: Path, served: tuple[str, Path]) -> None:
    base, root = served
    make_repo(tmp_path / "repo")
    (root / "notes.txt").write_text("not an archive\n")
    closed = socketless_port()
    cases: list[tuple[dict[str, Any], str, str]] = [
        (
            {"uri": f"file://{tmp_path / 'repo'}", "kind": "git", "version": "no-such-tag", "path": "c"},
            f"could not fetch file://{tmp_path / 'repo'}: "
            "version 'no-such-tag' is not a commit, tag or branch of it",
            FETCH_REFUSED,
        ),
        (
            {"uri": f"file://{tmp_path / 'nothing'}", "kind": "git", "path": "c"},
            f"could not fetch file://{tmp_path / 'nothing'}: git clone failed: "
            f"fatal: '{tmp_path / 'nothing'}' does not appear to be a git repository",
            FETCH_REFUSED,
        ),
        (
            {"uri": f"{base}/missing.tar.gz", "kind": "archive", "path": "d"},
            f"could not fetch {base}/missing.tar.gz: the server answered HTTP 404 File not found",
            FETCH_REFUSED,
        ),
        (
            {"uri": f"{base}/notes.txt", "kind": "archive", "path": "d"},
            f"could not fetch {base}/notes.txt: not an archive Corral unpacks (.tar.gz, .tgz, .tar, .zip)",
            FETCH_REFUSED,
        ),
        (
            {"uri": f"http://127.0.0.1:{closed}/x.tgz", "kind": "archive", "path": "d"},
            f"could not fetch http://127.0.0.1:{closed}/x.tgz: "
            "could not download it: [Errno 111] Connection refused",
            FETCH_FAILED,
        ),
        (
            {"uri": f"file://{tmp_path / 'nowhere.txt'}", "kind": "file", "path": "f"},
            f"could not fetch file://{tmp_path / 'nowhere.txt'}: no such file or directory on this node",
            FETCH_REFUSED,
        ),
    ]
    for item, reason, platform in cases:
        task, _, failed = await fetched(tmp_path, [item])
        assert failed is not None
        assert failed.startswith(reason), (failed, reason)
        assert task.platform == platform, item


async def test_a_fetch_larger_than_the_node_allows_is_refused(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"\0" * (2 * 1024 * 1024))
    item = {"uri": f"file://{tmp_path / 'big.bin'}", "kind": "file", "path": "big.bin"}
    task, cwd, failed = await fetched(tmp_path, [item], FetchSettings(max_mb=1))
    assert (
        failed
        == f"could not fetch file://{tmp_path / 'big.bin'}: larger than the 1048576 bytes a task may fetch"
    )
    assert task.platform == FETCH_REFUSED
    assert not (cwd / "big.bin").exists()


async def test_a_repository_larger_than_the_node_allows_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    (repo / "weights.bin").write_bytes(os.urandom(3 * 1024 * 1024))  # (random: packs as large)
    git(repo, "add", "weights.bin")
    git(repo, "commit", "--quiet", "-m", "weights")
    item = {"uri": f"file://{repo}", "kind": "git", "path": "code"}
    task, cwd, failed = await fetched(tmp_path, [item], FetchSettings(max_mb=1))
    assert failed == f"could not fetch file://{repo}: larger than the 1048576 bytes a task may fetch"
    assert task.platform == FETCH_REFUSED
    assert not (cwd / "code").exists()


async def test_a_fetch_that_outruns_its_time_is_stopped(tmp_path: Path) -> None:
    """A server that accepts and never answers: the fetch gives up at its deadline."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        item = {"uri": f"http://127.0.0.1:{port}/slow.tgz", "kind": "archive", "path": "d"}
        task, _, failed = await fetched(tmp_path, [item], FetchSettings(timeout_s=1.5))
    finally:
        listener.close()
    assert failed is not None
    assert failed.startswith(f"could not fetch http://127.0.0.1:{port}/slow.tgz: could not download it:"), (
        failed
    )
    assert task.platform == FETCH_FAILED


def socketless_port() -> int:
    """A loopback port nothing listens on."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- as the task's own identity --------------------------------------------------------


@pytest.fixture
def outside() -> Iterator[Path]:
    """World-readable sources outside root's private test directories."""
    directory = Path(tempfile.mkdtemp(prefix="corral-fetch-", dir="/var/lib"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@root_only
async def test_a_sandboxed_fetch_reads_with_the_tasks_rights_only(
    sandbox: Sandbox, outside: Path, served: tuple[str, Path]
) -> None:
    """``file:///root/...`` is root's: the task's uid may not read it, so neither may its
    fetch. What it may read lands owned by its uid (each kind, after the worker has
    given up root: nothing it needs is left to import from root's interpreter)."""
    base, root = served
    tarball(root / "data.tar.gz", {"corpus/a.txt": b"a"})
    with zipfile.ZipFile(root / "model.zip", "w") as zipped:
        zipped.writestr("model.pt", b"weights")
    secret = Path(tempfile.mkdtemp(prefix="corral-secret-", dir="/root"))
    try:
        (secret / "key").write_text("root's own\n")
        (outside / "public.txt").write_text("anyone's\n")
        make_repo(outside / "repo")
        job_id = f"job-{uuid.uuid4().hex[:8]}"
        # Under a directory of root's alone, as a node's home may be: git still gets there.
        (outside / "work").mkdir(mode=0o700)
        cwd = outside / "work" / job_id
        settings = FetchSettings()

        task = Task(f"att-{uuid.uuid4().hex[:12]}", job_id=job_id)
        sandbox.hold(job_id, task.attempt_id)  # (as the agent does before a start's steps)
        stolen = [Fetch(uri=f"file://{secret / 'key'}", kind="file", path="stolen")]
        failed = await fetch_sources(task, stolen, "alice", cwd, sandbox, settings)
        assert failed is not None
        assert (
            failed.reason
            == f"could not fetch file://{secret / 'key'}: permission denied: the task's user may not read it"
        )
        assert task.platform == FETCH_REFUSED
        assert not (cwd / "stolen").exists()
        sandbox.forget(job_id, task.attempt_id)  # (the agent's take-down of a failed start)
        assert job_id not in sandbox.identities.held()  # its uid went back with the failure

        task = Task(f"att-{uuid.uuid4().hex[:12]}", job_id=job_id)
        sandbox.hold(job_id, task.attempt_id)
        allowed = [
            Fetch(uri=f"file://{outside / 'public.txt'}", kind="file", path="public.txt"),
            Fetch(uri=f"file://{outside / 'repo'}", kind="git", version="v1", path="code"),
            Fetch(uri=f"{base}/data.tar.gz", kind="archive", path="data_corpus"),
            Fetch(uri=f"{base}/model.zip", kind="archive", path="data_model"),
        ]
        assert await fetch_sources(task, allowed, "alice", cwd, sandbox, settings) is None
        uid = sandbox.identities.held()[job_id].uid  # held until the task is taken down
        assert (cwd / "public.txt").read_text() == "anyone's\n"
        assert (cwd / "data_model" / "model.pt").read_bytes() == b"weights"
        fetched = [
            "public.txt",
            "code",
            "code/.git",
            "code/train.py",
            "data_corpus/corpus/a.txt",
            "data_model",
        ]
        for path in [cwd, *(cwd / name for name in fetched)]:
            assert path.stat().st_uid == uid, path
        sandbox.forget(job_id, task.attempt_id)
        assert job_id not in sandbox.identities.held()
    finally:
        shutil.rmtree(secret, ignore_errors=True)
