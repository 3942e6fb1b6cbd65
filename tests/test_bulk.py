"""Bulk construction: the collector paused while building, what was built handed to the oldest generation."""

from __future__ import annotations

import gc

from orchestrator._bulk import collector_paused


class _Node:
    """A tracked object with a cycle: only the collector can free it."""

    def __init__(self) -> None:
        self.me = self


def test_what_a_build_made_is_old_and_the_collector_runs_again() -> None:
    with collector_paused():
        assert not gc.isenabled()
        made = [_Node() for _ in range(100)]
    assert gc.isenabled()
    oldest = {id(item) for item in gc.get_objects(generation=2)}
    assert all(id(node) in oldest for node in made)
    assert gc.get_freeze_count() == 0
    del made
    assert gc.collect() >= 100  # cycles made in the block are still collected


def test_objects_frozen_by_someone_else_stay_frozen() -> None:
    marker = _Node()
    gc.freeze()
    try:
        with collector_paused():
            [_Node() for _ in range(10)]
        # Frozen objects are in no generation (the freeze count itself moves when other threads free some).
        assert all(item is not marker for item in gc.get_objects())
    finally:
        gc.unfreeze()
    assert any(item is marker for item in gc.get_objects())


def test_a_block_that_finds_the_collector_paused_leaves_it_paused() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
