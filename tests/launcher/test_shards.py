"""Several launcher processes split the jobs and the outbox partitions between them
(services/launcher/shards.py): each exactly once, and about evenly."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import ValidationError

from services.launcher.settings import LauncherSettings
from services.launcher.shards import WHOLE, Shard
from shared.ids import new_job_id
from shared.outbox.rows import partitions_of, sources_published_with

LAUNCHER_PARTITIONS = partitions_of(sources_published_with("corral/launcher"))  # the agents' too


@pytest.mark.parametrize("count", [2, 3, 8])
def test_every_job_and_partition_has_exactly_one_launcher_and_each_a_fair_share(count: int) -> None:
    shards = [Shard(index, count) for index in range(count)]
    jobs = [f"job-{n:06d}" for n in range(4000)]  # (fixed ids: a bound on a fixed split, not on luck)
    owners: Counter[int] = Counter()
    for job_id in jobs:
        owning = [shard.index for shard in shards if shard.owns(job_id)]
        assert len(owning) == 1, (job_id, owning)
        owners[owning[0]] += 1
    fair = len(jobs) / count
    assert all(0.8 * fair < owners[index] < 1.2 * fair for index in range(count)), owners
    answering: Counter[int] = Counter()
    for part in LAUNCHER_PARTITIONS:
        owning = [shard.index for shard in shards if shard.owns_partition(part)]
        assert len(owning) == 1, (part, owning)
        answering[owning[0]] += 1
    assert max(answering.values()) - min(answering.values()) <= 1, answering


def test_a_lone_launcher_owns_everything() -> None:
    assert WHOLE.owns(new_job_id())
    assert WHOLE.first
    assert all(WHOLE.owns_partition(part) for part in LAUNCHER_PARTITIONS)


def test_only_the_first_launcher_runs_what_must_run_once() -> None:
    assert [Shard(index, 3).first for index in range(3)] == [True, False, False]


def test_an_index_beyond_the_processes_is_refused_naming_both_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CORRAL_LAUNCHER_PROCESSES", "2")
    monkeypatch.setenv("CORRAL_LAUNCHER_PROCESS_INDEX", "2")
    with pytest.raises(ValidationError, match="CORRAL_LAUNCHER_PROCESS_INDEX is 2, but there are only 2"):
        LauncherSettings()
    monkeypatch.setenv("CORRAL_LAUNCHER_PROCESS_INDEX", "1")
    assert LauncherSettings().shard == Shard(1, 2)
    with pytest.raises(ValueError, match="launcher index 3 is not one of 0 to 1"):
        Shard(3, 2)
