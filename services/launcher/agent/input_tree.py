"""Placing a job's inputs in its working directory on a node, read-only, from the node's
blob cache; and handing a task its output directory.

The cache holds each blob once per node, under its sha256, verified when it was fetched
(``artifacts.py``): files owned by the agent's user, mode 0444, in a directory a task
cannot see (under the agent's work directory, which the sandbox hides). An input's files
are hard links to the cache's (one copy on disk however many jobs read a model; a copy
where the work directory is on another filesystem), in directories of mode 0555 owned
by the agent's user: when the agent runs as root, a task (another uid) can neither
change an input's bytes nor add, remove or rename anything under ``$CORRAL_INPUT_DIR``.

A job's tasks on one node share its working directory, so its inputs are placed once:
a later task (or attempt) finds them in place and checks they still are the cache's
files (same inode, nothing else there), else places them afresh. The tree is built
beside its final place and renamed into it, so a task never sees half of it.

Everything here blocks (file system walks and links): the agent calls it in a thread.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import uuid
from pathlib import Path

from shared.artifacts.manifest import ManifestEntry, check_entry_path
from shared.artifacts.transport import PlacedInput

READ_ONLY_FILE = 0o444
READ_ONLY_DIR = 0o555


def blob_path(cache_dir: Path, sha256: str) -> Path:
    return cache_dir / sha256[:2] / sha256


def expected_files(inputs: list[PlacedInput]) -> dict[str, str]:
    """Relative path under the input directory → sha256, for every file of every input."""
    files: dict[str, str] = {}
    for placed in inputs:
        base = check_entry_path(placed.path)
        for entry in placed.manifest:
            files[f"{base}/{entry.path}"] = entry.sha256
    return files


def _in_place(cache_dir: Path, input_dir: Path, files: dict[str, str]) -> bool:
    """Whether ``input_dir`` holds exactly ``files``, each the cache's own file, in
    directories nobody but the agent's user may change."""
    me = os.geteuid()
    try:
        info = input_dir.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != me or info.st_mode & 0o222:
        return False
    found = 0
    for directory, dirnames, filenames in os.walk(input_dir):
        for name in dirnames:
            sub = Path(directory, name).lstat()
            if not stat.S_ISDIR(sub.st_mode) or sub.st_uid != me or sub.st_mode & 0o222:
                return False
        for name in filenames:
            path = Path(directory, name)
            sha256 = files.get(path.relative_to(input_dir).as_posix())
            if sha256 is None:
                return False
            try:
                have, want = path.lstat(), blob_path(cache_dir, sha256).lstat()
            except FileNotFoundError:
                return False
            if (have.st_dev, have.st_ino) != (want.st_dev, want.st_ino):
                return False
            found += 1
    return found == len(files)


def place_inputs(cache_dir: Path, input_dir: Path, inputs: list[PlacedInput]) -> None:
    """Make ``input_dir`` hold ``inputs`` (their blobs already in the cache), read-only."""
    files = expected_files(inputs)
    if _in_place(cache_dir, input_dir, files):
        return
    building = input_dir.parent / f".inputs-{uuid.uuid4().hex}"
    building.mkdir(mode=0o700, parents=True)
    try:
        for relative, sha256 in files.items():
            target = building / relative
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            source = blob_path(cache_dir, sha256)
            try:
                os.link(source, target)
            except OSError:  # another filesystem (EXDEV), or links refused: a copy
                shutil.copyfile(source, target)
                os.chmod(target, READ_ONLY_FILE)
        for directory, _, _ in os.walk(building, topdown=False):
            os.chmod(directory, READ_ONLY_DIR)
        if input_dir.exists() or input_dir.is_symlink():
            _remove(input_dir)
        os.rename(building, input_dir)
    except BaseException:
        _remove(building)
        raise


def _remove(path: Path) -> None:
    """Remove a tree (read-only directories included), never following a link."""
    old = path.parent / f".removing-{uuid.uuid4().hex}"
    try:
        os.rename(path, old)
    except FileNotFoundError:
        return
    if old.is_symlink() or not old.is_dir():
        old.unlink()
        return
    for directory, _, _ in os.walk(old):
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o700)
    shutil.rmtree(old, ignore_errors=True)


def restore_checkpoint(cache_dir: Path, output_dir: Path, checkpoint: list[ManifestEntry] | None) -> None:
    """Empty ``output_dir`` and copy in what the task left in its latest earlier attempt
    (copies, not links: the task writes here)."""
    if output_dir.exists() or output_dir.is_symlink():
        _remove(output_dir)
    output_dir.mkdir(mode=0o755, parents=True)
    for entry in checkpoint or []:
        target = output_dir / entry.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(blob_path(cache_dir, entry.sha256), target)
        os.chmod(target, 0o644)


def hand_over(output_dir: Path, uid: int, gid: int) -> None:
    """Make the output directory and all in it the task's (its sandbox identity)."""
    for directory, dirnames, filenames in os.walk(output_dir):
        os.lchown(directory, uid, gid)
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(directory, name), uid, gid)
