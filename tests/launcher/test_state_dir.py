"""Where a node agent keeps its tasks' pid and exit files by default: a directory of its
home's own in shared memory, private to its user; the home's when shared memory cannot
be trusted with it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.launcher import settings as launcher_settings
from services.launcher.settings import Settings, tidy_state_dir


def _settings(monkeypatch: pytest.MonkeyPatch, home: Path) -> Settings:
    monkeypatch.setenv("CORRAL_HOME", str(home))
    monkeypatch.setenv("CORRAL_AGENT_NODE_ID", "node-a")
    monkeypatch.delenv("CORRAL_AGENT_STATE_DIR", raising=False)
    return Settings()


@pytest.fixture
def shared_memory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A stand-in for /dev/shm that this test alone writes in."""
    directory = tmp_path / "shm"
    directory.mkdir()
    monkeypatch.setattr(launcher_settings, "SHARED_MEMORY", directory)
    return directory


def test_the_default_is_private_to_the_home_in_shared_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shared_memory: Path
) -> None:
    one = _settings(monkeypatch, tmp_path / "one").state_dir
    assert one.parent.parent == shared_memory
    assert one.name == "node-a"
    assert one.parent.stat().st_mode & 0o777 == 0o700
    assert one.stat().st_mode & 0o777 == 0o700
    assert _settings(monkeypatch, tmp_path / "one").state_dir == one  # the same home, the same place
    assert _settings(monkeypatch, tmp_path / "two").state_dir.parent != one.parent  # another home: its own

    # Set explicitly, it is used as it is.
    monkeypatch.setenv("CORRAL_AGENT_STATE_DIR", str(tmp_path / "mine"))
    assert Settings().state_dir == tmp_path / "mine"


@pytest.mark.usefixtures("shared_memory")
def test_a_name_taken_in_shared_memory_or_no_shared_memory_falls_back_to_the_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    state_dir = _settings(monkeypatch, home).state_dir
    private = state_dir.parent
    state_dir.rmdir()
    private.rmdir()
    # Someone made it a link to a place of their choosing.
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", private)
    assert _settings(monkeypatch, home).state_dir == home.resolve() / "agent" / "node-a"
    # Or left it readable by others.
    private.unlink()
    private.mkdir(mode=0o755)
    private.chmod(0o755)
    assert _settings(monkeypatch, home).state_dir == home.resolve() / "agent" / "node-a"

    monkeypatch.setattr(launcher_settings, "SHARED_MEMORY", tmp_path / "none")
    assert (
        _settings(monkeypatch, tmp_path / "other").state_dir
        == (tmp_path / "other").resolve() / "agent" / "node-a"
    )


def test_a_clean_stop_removes_the_default_directories_only_where_nothing_is_left_in_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shared_memory: Path
) -> None:
    home = tmp_path / "home"
    node_a = _settings(monkeypatch, home).state_dir
    assert node_a.is_dir()  # made when read, so another agent's stop leaves the home's in place
    monkeypatch.setenv("CORRAL_AGENT_NODE_ID", "node-b")  # a second simulated node on the same home
    node_b = Settings().state_dir
    assert node_b.parent == node_a.parent
    (node_b / "attempt-1.pid").write_text("4242")  # a task still running there

    tidy_state_dir(node_a)
    assert not node_a.exists()
    assert node_b.exists()  # the home's directory stays while another node's is in it
    tidy_state_dir(node_b)
    assert (node_b / "attempt-1.pid").exists()  # the next agent re-adopts that task

    (node_b / "attempt-1.pid").unlink()
    tidy_state_dir(node_b)
    assert list(shared_memory.iterdir()) == []

    # A directory the operator chose, or the home's own, is never removed.
    for chosen in (tmp_path / "mine" / "node-a", home / "agent" / "node-a"):
        chosen.mkdir(parents=True)
        tidy_state_dir(chosen)
        assert chosen.is_dir()
