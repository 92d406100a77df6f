"""The process that fetches a task's sources (``tasks[].fetch``) into its working
directory, as the task's own identity.

Standard library only, and run as a script (``python -I -S -c <this file's text>``): on a
node by the agent (``fetching.py``), in a pod as its init container
(``kubernetes/manifests.py``). Neither place has Corral's packages to import.

Who it runs as: on a sandboxed node the agent starts it as root, because the agent's
interpreter may live where no task uid can read it (a Python in root's home). It imports
every module it will use, then drops to the task's uid and gid with no supplementary
groups (``drop_to``) before it touches anything a job names: every URI is read, every
file written, every ``git`` run with the task's rights alone. So ``file:///root/...``
fails as it would for the task, and what lands is the task's own. Whatever a hostile
job makes of this process, it could have done in its own command.

Where it lands: each source is fetched into a private staging directory beside the
working directory's contents (``.corral-fetch-<token>``), then renamed into place; a
path that already exists is kept (another task of the job on this node fetched it
first, or an earlier attempt did: tasks of a job share the directory), never replaced
under a task that may be using it.

Bounds: one byte budget for all the sources of the task (downloads counted as they
arrive, archives by their members' declared sizes before anything is unpacked, a git
clone by a watch on its directory, and ``RLIMIT_FSIZE`` under all of it) and one
deadline. Archives are unpacked with tarfile's ``data`` filter (no absolute paths, no
``..``, no links leaving the directory, no devices); a zip's names are checked alike.

A failure is the last line of stderr, ``CORRAL-FETCH-FAILED {json}`` naming the URI,
what failed and whether trying again could help (``permanent``); the exit status is 3.
"""

from __future__ import annotations

import bz2
import contextlib
import ctypes
import encodings.ascii
import encodings.cp437
import encodings.idna
import encodings.latin_1
import gzip
import json
import lzma
import os
import resource
import shutil
import signal
import ssl
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

# Loaded before the privilege drop, as they would be lazily after it (from where the task's
# uid may not read): tarfile's decompressors, and the codecs of a zip's names, of host
# names in URLs and of HTTP headers (utf-8 is loaded at the interpreter's start).
LOADED_BEFORE_THE_DROP = (
    bz2,
    gzip,
    lzma,
    encodings.ascii,
    encodings.cp437,
    encodings.idna,
    encodings.latin_1,
)
FAILED_MARK = "CORRAL-FETCH-FAILED "
FAILED_EXIT = 3
_CHUNK = 1 << 20
_LOCAL_UPLOAD_PACK = "git -c 'safe.directory=*' upload-pack"
_GIT_PERMANENT = (
    "not found",
    "does not appear to be a git repository",
    "did not match any",
    "couldn't find remote ref",
    "not a valid",
    "does not exist",
    "authentication failed",
    "terminal prompts disabled",
    "unknown revision",
)


class FetchError(Exception):
    def __init__(self, uri: str, what: str, *, permanent: bool) -> None:
        super().__init__(what)
        self.uri, self.what, self.permanent = uri, what, permanent


class Budget:
    """What is left of the task's bytes and time."""

    def __init__(self, max_bytes: int, timeout_s: float) -> None:
        self.max_bytes = self.left = max_bytes
        self.deadline = time.monotonic() + timeout_s
        self.timeout_s = timeout_s

    def spend(self, uri: str, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise FetchError(uri, f"larger than the {self.max_bytes} bytes a task may fetch", permanent=True)

    def seconds_left(self, uri: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise FetchError(uri, f"not fetched within {self.timeout_s:g} s", permanent=False)
        return left


# mount(2) and unshare(2) flags (linux/mount.h, sched.h).
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
_CLONE_NEWNS = 0x00020000
REACHABLE_DEST = "/tmp/dest"  # noqa: S108 - on a tmpfs of this process's own mount namespace


def reachable_dest(dest: Path, hidden: list[str]) -> Path:
    """``dest`` at a path the task's uid can walk to (root only; anyone else keeps it).

    The working directory may lie where the task's uid cannot pass (a home of root's,
    mode 0700), which git refuses (it resolves every parent of where it clones). The
    task's sandbox shows it the directory through parents it may pass; so does this
    process, in a mount namespace of its own: a tmpfs over /tmp and the directory bound
    at ``REACHABLE_DEST``. Nothing outside this process sees either. What the sandbox
    hides from the task (``hidden``: Corral's home, the agent's state, the node's logs
    and work directories) and the host's /tmp, /var/tmp and /dev/shm are covered here
    too: a ``file://`` source there is out of reach, as it is from the task."""
    if os.geteuid() != 0:
        return dest
    libc = ctypes.CDLL(None, use_errno=True)

    def call(result: int, what: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), f"could not {what}")

    call(libc.unshare(_CLONE_NEWNS), "make a mount namespace")
    call(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make its mounts private")
    # (opened in the new namespace, before /tmp is covered: the directory may be in it)
    held = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    call(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=0755,size=64k"), "mount /tmp")
    os.mkdir(REACHABLE_DEST)
    source = f"/proc/self/fd/{held}".encode()
    call(libc.mount(source, REACHABLE_DEST.encode(), None, _MS_BIND, None), "bind the working directory")
    os.close(held)
    for path in [*hidden, "/var/tmp", "/dev/shm"]:  # noqa: S108 - covered, not used
        if os.path.isdir(path) and not os.path.islink(path):
            call(
                libc.mount(b"tmpfs", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=0755,size=4k"),
                f"cover {path}",
            )
    os.chdir(REACHABLE_DEST)
    return Path(REACHABLE_DEST)


def drop_to(uid: int, gid: int) -> None:
    """Become the task's user for good (root only; anyone else already is)."""
    if os.geteuid() != 0:
        return
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        raise SystemExit("could not drop root")


def fetch_all(
    items: list[dict[str, Any]], dest_root: Path, budget: Budget, ssl_context: Any, token: str
) -> None:
    for item in items:
        fetch_one(item, dest_root, budget, ssl_context, token)


def check_no_links(uri: str, dest_root: Path, path: str) -> None:
    """Refuse a ``path`` with a link on the way to it: the working directory is the job's,
    its tasks may have planted one pointing out of it (the fetch runs outside the task's
    sandbox, so a link could lead where the task itself could not write)."""
    here = dest_root
    for part in Path(path).parts[:-1]:
        here = here / part
        if here.is_symlink():
            raise FetchError(
                uri, f"{here.relative_to(dest_root)} is a link; fetch to a real directory", permanent=True
            )


def fetch_one(item: dict[str, Any], dest_root: Path, budget: Budget, ssl_context: Any, token: str) -> None:
    uri, kind = item["uri"], item["kind"]
    check_no_links(uri, dest_root, item["path"])
    dest = dest_root / item["path"]
    if os.path.lexists(dest):
        return  # fetched already (module docstring)
    staging = dest_root / f".corral-fetch-{token}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o700)
    try:
        scheme = urllib.parse.urlsplit(uri).scheme.lower()
        if kind == "git":
            fetched = staging / "tree"
            clone(uri, item.get("version"), fetched, budget)
        elif scheme == "git":
            raise FetchError(uri, "a git:// URI is fetched with kind `git`", permanent=True)
        elif kind == "archive":
            archive = (
                local_path(uri)
                if scheme == "file"
                else download(uri, staging / "download", budget, ssl_context)
            )
            fetched = staging / "tree"
            unpack(uri, archive, fetched, budget)
        else:
            fetched = staging / "copy"
            if scheme == "file":
                copy(uri, local_path(uri), fetched, budget)
            else:
                download(uri, fetched, budget, ssl_context)
        dest.parent.mkdir(parents=True, exist_ok=True)
        check_no_links(uri, dest_root, item["path"])  # (again: the job's tasks run meanwhile)
        place(fetched, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def place(fetched: Path, dest: Path) -> None:
    """Move into place unless something is there by now (never replacing it)."""
    if fetched.is_dir() and not fetched.is_symlink():
        try:
            os.rename(fetched, dest)  # (fails on a non-empty directory or a file there)
        except OSError:
            if not os.path.lexists(dest):
                raise
        return
    with contextlib.suppress(FileExistsError):
        os.link(fetched, dest)  # (atomic, and never over an existing name)


def local_path(uri: str) -> Path:
    parts = urllib.parse.urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise FetchError(
            uri, f"a file:// URI names this node's files, not host {parts.netloc!r}", permanent=True
        )
    path = Path(urllib.parse.unquote(parts.path))
    try:
        path.stat()
    except PermissionError:
        raise FetchError(uri, "permission denied: the task's user may not read it", permanent=True) from None
    except FileNotFoundError:
        raise FetchError(uri, "no such file or directory on this node", permanent=True) from None
    except OSError as exc:
        raise FetchError(uri, f"cannot read it: {exc.strerror}", permanent=True) from None
    return path


def copy(uri: str, source: Path, target: Path, budget: Budget) -> None:
    def copy_file(src: str, dst: str) -> None:
        budget.seconds_left(uri)
        budget.spend(uri, os.stat(src).st_size)
        shutil.copy2(src, dst)

    try:
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, copy_function=copy_file)
        else:
            copy_file(str(source), str(target))
    except PermissionError as exc:
        raise FetchError(
            uri, f"permission denied: the task's user may not read {exc.filename}", permanent=True
        ) from None
    except shutil.Error as exc:
        raise FetchError(uri, f"could not copy: {exc.args[0][0][2]}", permanent=True) from None


def download(uri: str, target: Path, budget: Budget, ssl_context: Any) -> Path:
    # (http and https only: the caller sends file:// to ``local_path`` and git:// to git)
    request = urllib.request.Request(uri, headers={"User-Agent": "corral-fetch"})  # noqa: S310
    try:
        with (
            urllib.request.urlopen(  # noqa: S310 - http(s), as above
                request, timeout=min(60.0, budget.seconds_left(uri)), context=ssl_context
            ) as answer,
            target.open("wb") as out,
        ):
            declared = answer.headers.get("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > budget.left:
                budget.spend(uri, int(declared))
            while chunk := answer.read(_CHUNK):
                budget.spend(uri, len(chunk))
                budget.seconds_left(uri)
                out.write(chunk)
    except urllib.error.HTTPError as exc:
        permanent = exc.code in (400, 401, 403, 404, 405, 410, 414, 451)
        raise FetchError(
            uri, f"the server answered HTTP {exc.code} {exc.reason}", permanent=permanent
        ) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        why = getattr(exc, "reason", exc)
        raise FetchError(uri, f"could not download it: {why}", permanent=False) from None
    return target


def unpack(uri: str, archive: Path, target: Path, budget: Budget) -> None:
    try:
        if zipfile.is_zipfile(archive):
            unpack_zip(uri, archive, target, budget)
        elif tarfile.is_tarfile(archive):
            unpack_tar(uri, archive, target, budget)
        else:
            raise FetchError(uri, "not an archive Corral unpacks (.tar.gz, .tgz, .tar, .zip)", permanent=True)
    except PermissionError as exc:
        raise FetchError(uri, f"permission denied: {exc.filename}", permanent=True) from None
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, lzma.LZMAError, OSError) as exc:
        raise FetchError(uri, f"a damaged archive: {exc}", permanent=True) from None


def _refuse_name(uri: str, name: str) -> None:
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or ".." in parts or (len(name) > 1 and name[1] == ":"):
        raise FetchError(
            uri, f"refused: the archive's member {name!r} would land outside its directory", permanent=True
        )


def unpack_tar(uri: str, archive: Path, target: Path, budget: Budget) -> None:
    if not hasattr(tarfile, "data_filter"):
        raise FetchError(
            uri, "this Python cannot unpack a tar safely (3.11.4 or later is needed)", permanent=True
        )
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for member in members:
            _refuse_name(uri, member.name)
        budget.spend(uri, sum(m.size for m in members if m.isfile()))
        budget.seconds_left(uri)
        target.mkdir()
        try:
            tar.extractall(target, filter="data")
        except tarfile.FilterError as exc:
            raise FetchError(uri, f"refused: {exc}", permanent=True) from None


def unpack_zip(uri: str, archive: Path, target: Path, budget: Budget) -> None:
    with zipfile.ZipFile(archive) as zipped:
        infos = zipped.infolist()
        for info in infos:
            _refuse_name(uri, info.filename)
        budget.spend(uri, sum(i.file_size for i in infos))
        budget.seconds_left(uri)
        target.mkdir()
        zipped.extractall(target)  # noqa: S202 - every name checked above


def tree_size(root: Path) -> int:
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):  # (gone meanwhile: git's own temporary files)
                total += os.lstat(os.path.join(directory, name)).st_size
    return total


def git(uri: str, argv: list[str], budget: Budget, watched: Path) -> subprocess.CompletedProcess[str]:
    """One git command, killed when it outruns the deadline or its tree the budget."""
    with subprocess.Popen(
        ["git", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        restore_signals=False,  # (SIGXFSZ stays ignored: a write past the limit says so)
    ) as proc:
        over = threading.Event()

        def watch() -> None:
            while proc.poll() is None:
                if tree_size(watched) > budget.left:
                    over.set()
                    proc.kill()
                    return
                time.sleep(0.5)

        threading.Thread(target=watch, daemon=True).start()
        try:
            _, err = proc.communicate(timeout=budget.seconds_left(uri))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            budget.seconds_left(uri)  # raises: out of time
            raise
        if over.is_set() or (proc.returncode != 0 and "file too large" in err.lower()):
            budget.spend(uri, budget.left + 1)  # raises: too large
        return subprocess.CompletedProcess(proc.args, proc.returncode, "", err)


def _git_failure(uri: str, what: str, err: str) -> FetchError:
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    marked = [line for line in lines if line.startswith(("fatal:", "error:"))]
    said = (marked or lines or ["no reason given"])[0][:500]
    permanent = any(mark in said.lower() for mark in _GIT_PERMANENT)
    return FetchError(uri, f"{what}: {said}", permanent=permanent)


def clone(uri: str, version: str | None, target: Path, budget: Budget) -> None:
    """A shallow clone at a branch or tag; a commit is fetched by itself where the
    server allows, else with the whole history."""
    # A file:// repository is someone else's, which git refuses to read unless told (its
    # own environment does not reach the local upload-pack). What that guards against,
    # the repository's config running commands, runs as the task: its own business.
    local = ["--upload-pack", _LOCAL_UPLOAD_PACK] if uri.lower().startswith("file:") else []
    if version is None:
        done = git(uri, ["clone", "--quiet", *local, "--depth", "1", "--", uri, str(target)], budget, target)
        if done.returncode != 0:
            raise _git_failure(uri, "git clone failed", done.stderr)
        return
    done = git(
        uri,
        ["clone", "--quiet", *local, "--depth", "1", "--branch", version, "--", uri, str(target)],
        budget,
        target,
    )
    if done.returncode == 0:
        return
    if "not found in upstream" not in done.stderr:
        raise _git_failure(uri, "git clone failed", done.stderr)
    shutil.rmtree(target, ignore_errors=True)  # not a branch or tag: a commit, perhaps
    in_repo = ["-C", str(target)]
    setup = [["init", "--quiet", str(target)], [*in_repo, "remote", "add", "origin", uri]]
    if local:
        setup.append([*in_repo, "config", "remote.origin.uploadpack", _LOCAL_UPLOAD_PACK])
    for argv in setup:
        if (done := git(uri, argv, budget, target)).returncode != 0:
            raise _git_failure(uri, "git init failed", done.stderr)
    if (
        git(uri, [*in_repo, "fetch", "--quiet", "--depth", "1", "origin", version], budget, target).returncode
        == 0
    ):
        checkout = git(uri, [*in_repo, "checkout", "--quiet", "--detach", "FETCH_HEAD"], budget, target)
    else:
        everything = git(
            uri,
            [*in_repo, "fetch", "--quiet", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*"],
            budget,
            target,
        )
        if everything.returncode != 0:
            raise _git_failure(uri, "git fetch failed", everything.stderr)
        checkout = git(uri, [*in_repo, "checkout", "--quiet", "--detach", version], budget, target)
        if checkout.returncode != 0:
            raise FetchError(uri, f"version {version!r} is not a commit, tag or branch of it", permanent=True)
    if checkout.returncode != 0:
        raise _git_failure(uri, f"git checkout of {version!r} failed", checkout.stderr)


def main(argv: list[str]) -> int:
    """``argv``: one JSON object: items, dest, max_bytes, timeout_s, token, and uid and gid
    to drop to when started as root."""
    order = json.loads(argv[0])
    ssl_context = ssl.create_default_context()  # (its certificates are read before the drop)
    dest = Path(order["dest"])
    if order.get("uid") is not None:
        dest = reachable_dest(dest, list(order.get("hidden", [])))
        drop_to(int(order["uid"]), int(order["gid"]))
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    cap = int(order["max_bytes"]) if hard == resource.RLIM_INFINITY else min(hard, int(order["max_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (EFBIG instead of a silent death)
    os.umask(0o022)
    budget = Budget(int(order["max_bytes"]), float(order["timeout_s"]))
    try:
        fetch_all(order["items"], dest, budget, ssl_context, str(order["token"]))
    except FetchError as exc:
        print(
            FAILED_MARK + json.dumps({"uri": exc.uri, "what": exc.what, "permanent": exc.permanent}),
            file=sys.stderr,
        )
        return FAILED_EXIT
    except subprocess.TimeoutExpired:
        return FAILED_EXIT
    except Exception as exc:  # (said as the failure: the task's reason shows it)
        what = f"the fetcher failed: {type(exc).__name__}: {exc}"
        print(
            FAILED_MARK + json.dumps({"uri": "its sources", "what": what, "permanent": False}),
            file=sys.stderr,
        )
        return FAILED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
