"""A second core for one search: work handed to a process-wide thread pool and waited for later.

A hybrid search is a few large numpy and onnxruntime calls, which release the GIL: the query's two models
run side by side (`SemanticScorer.embed_query`), and the evidence's vote over earlier requests runs while
the blend is made (`LearnedEvidence.hybrid_with_vectors`).

    later = Background(work)      starts work() on a pool thread (inline once the pool refuses work)
    later.result()                waits for it (or runs it here if it has not started); its exception is raised here
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["Background"]

_T = TypeVar("_T")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _shared_pool() -> ThreadPoolExecutor:
    """One thread per core, made on first use and kept for the process."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(os.cpu_count() or 2, thread_name_prefix="orchestrator-search")
        return _pool


class Background(Generic[_T]):
    """`work()` on a pool thread, started at once; `result()` waits for it and re-raises its error.

    `result()` runs `work` itself when no pool thread has started it yet: with the pool busy with other
    searches' work (a gateway's workers all searching), waiting would leave this thread idle in a queue
    for work it can do now. Also inline when the pool no longer takes work (the interpreter is shutting
    down)."""

    def __init__(self, work: Callable[[], _T]) -> None:
        self._work = work
        self._future: Future[_T] | None
        try:
            self._future = _shared_pool().submit(work)
        except RuntimeError:
            self._future = None

    def result(self) -> _T:
        if self._future is None or self._future.cancel():  # cancel() succeeds only if it has not started
            return self._work()
        return self._future.result()
