"""The scheduler's garbage collector: start-up frozen, young collections rare (shared/gc_tuning.py)."""

from __future__ import annotations

import gc

import pytest

from shared.gc_tuning import YOUNG_THRESHOLD, tune_garbage_collector


@pytest.mark.usefixtures("restored_gc")
def test_start_up_is_frozen_and_young_collections_are_rare() -> None:
    _, middle, old = gc.get_threshold()
    tune_garbage_collector()
    assert gc.get_freeze_count() > 0  # the imported modules, classes and functions
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)  # older generations as they were


@pytest.mark.usefixtures("restored_gc")
def test_reference_cycles_made_later_are_still_collected() -> None:
    tune_garbage_collector()

    class Node:
        other: object = None

    first, second = Node(), Node()
    first.other, second.other = second, first
    freed = []
    gc.callbacks.append(lambda phase, info: freed.append(info["collected"]) if phase == "stop" else None)
    try:
        del first, second
        gc.collect()
    finally:
        gc.callbacks.pop()
    assert sum(freed) >= 2  # the two nodes (and their dicts): frozen is only what start-up made
