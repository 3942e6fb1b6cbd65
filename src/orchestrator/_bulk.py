"""Bulk construction: the cyclic garbage collector paused while a catalog or an index is built."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block, when it runs.

    Building a 100,000-tool catalog and its index allocates a few million objects that all live on; each
    allocation-triggered collection walks every object made so far, and those walks took half the time of
    parsing, normalizing and indexing such a catalog. Reference counting still frees everything at once;
    only cycles wait for the next collection. A block that finds the collector already paused (another
    thread's build, or the program's choice) leaves it as it found it.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
