"""Bulk construction: the cyclic garbage collector paused while a catalog or an index is built, and the
memory its temporaries used given back afterwards."""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
from collections.abc import Callable, Iterator

__all__ = ["collector_paused"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block, when it runs; then return freed heap memory.

    Building a 100,000-tool catalog and its index allocates a few million objects that all live on; each
    allocation-triggered collection walks every object made so far, and those walks took half the time of
    parsing, normalizing and indexing such a catalog. Reference counting still frees everything at once;
    only cycles wait for the next collection. A block that finds the collector already paused (another
    thread's build, or the program's choice) leaves it as it found it.

    On leaving, what the block made is handed to the oldest generation at once (`_made_old`): it lives on,
    and the first young collection after the block would otherwise walk every object of it (about 0.15 s
    after a 100,000-tool catalog, again after its index, and a full collection soon after).

    Then glibc's `malloc_trim` hands the heap pages the build's temporary arrays freed back to the
    system: glibc keeps them otherwise (its threshold for mapping large blocks separately rises with each
    one freed), which left an index build's temporaries (about 170 MB at 100,000 tools) in resident memory.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        _made_old()
        gc.enable()
        trim = _heap_trim()
        if trim is not None:
            trim(0)


def _made_old() -> None:
    """Every object the collector tracks moved to its oldest generation, without walking them: through the
    permanent generation (`gc.freeze`, then `gc.unfreeze`, which puts it back as the oldest). Cycles among
    them wait for the next full collection, which their arrival does not bring forward. Skipped when
    something else has frozen objects, which must stay frozen."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


@functools.cache
def _heap_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: only a build that finishes pays for the import

    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    return trim
