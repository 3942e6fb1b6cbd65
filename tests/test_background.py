"""A search's second half (search/_background.py): on a free pool thread, or on the searching thread itself
when every pool thread is taken, instead of waiting in a queue behind other searches."""

from __future__ import annotations

import os
import threading
import time

import pytest

from orchestrator.search._background import Background, _shared_pool

HELD_S = 5.0
"""How long the test holds every pool thread: long enough that waiting for one would fail the test."""


def test_work_no_pool_thread_has_started_runs_on_the_calling_thread() -> None:
    release = threading.Event()
    busy = [_shared_pool().submit(release.wait, HELD_S) for _ in range(os.cpu_count() or 2)]
    try:
        started = time.monotonic()
        later = Background(threading.get_ident)
        assert later.result() == threading.get_ident()  # not queued behind the held threads: run here
        assert time.monotonic() - started < HELD_S / 2
    finally:
        release.set()
        for held in busy:
            held.result()


def test_work_a_pool_thread_has_started_is_waited_for_and_its_error_raised_here() -> None:
    running = threading.Event()

    def work() -> int:
        running.set()
        time.sleep(0.05)
        return threading.get_ident()

    later = Background(work)
    assert running.wait(HELD_S)
    assert later.result() != threading.get_ident()
    with pytest.raises(ZeroDivisionError):
        Background(lambda: 1 // 0).result()
