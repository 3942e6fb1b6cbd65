"""The embedding runtime behind hybrid tool search: one object, built from Settings, passed in.

    EmbeddingRuntime.from_settings(settings)   vectors in Redis when `store.url` is set (shared by every
                                               replica), else in `<mcp.cache_dir>/embeddings` (`mcp.embedding.cache_dir`)
    runtime.create_blend(search_settings)      the engine's ScoreBlend (HybridBlend), None for lexical, or
                                               SemanticUnavailable (logged once) when hybrid cannot run
    runtime.close()                            stop background embedding and save it (or `with ...:`)

The modules, one job each: `rules` (pure ranking rules), `model` (hash-checked model loading and the
onnxruntime scorer), `store` (vectors as the store's binary records), `warmer` (background embedding),
`vectors` (one store: cached, else the model, now or in the background) and `blend` (`HybridBlend`). Everything that can go
wrong raises `SemanticUnavailable` with a `kind` for the search metric, so the engine answers with the
lexical ranking instead (fail open). Nothing is fetched at run time, and nothing is written outside the
cache folder (or the Redis store).
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..._errors import SemanticUnavailable
from .blend import HybridBlend
from .model import EXTRA_MODULES, SemanticScorer
from .multilingual import MultilingualEncoder
from .vectors import ToolVectors

if TYPE_CHECKING:
    from ..._config import Settings, ToolSearchSettings
    from ..._store import Store
    from .._blend import ScoreBlend

__all__ = [
    "EmbeddingRuntime",
    "HybridBlend",
    "MultilingualEncoder",
    "SemanticScorer",
    "SemanticUnavailable",
    "ToolVectors",
]

log = logging.getLogger(__name__)

CLOSE_JOIN_S = 5.0
"""How long `close` waits for background steps (about half a second each) to finish and be saved."""


class EmbeddingRuntime:
    """The one loaded model (or why it failed), a `ToolVectors` per cache folder, and the fallback reasons
    already logged: everything hybrid ranking keeps between searches, owned by whoever builds it.

    Share one runtime between the engines of a process (the gateway passes it to every profile's engine)
    so the model loads once. Cheap to build: the model loads on the first hybrid search (or `warm`).
    Thread-safe. Close it (or use it as a context manager) to stop background embedding and save what it
    embedded; afterwards searches through it answer lexically (`disabled`).

    Args:
        cache_dir: folder of the vector cache (pack files in `vectors/`, shared by the processes of one
            machine); None keeps vectors in memory only, unless `store` is given.
        store: a Store to share vectors through instead of the folder (Redis: every replica embeds each
            tool text once per deployment); the caller closes it.
        model: an already loaded model to use (benchmarks and tests share one between runtimes).
        load_model: how to load the model on first use (default: the pinned files, `SemanticScorer.load`).
    """

    def __init__(
        self,
        cache_dir: Path | str | None,
        *,
        store: Store | None = None,
        model: SemanticScorer | None = None,
        load_model: Callable[[], SemanticScorer] | None = None,
    ) -> None:
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.store = store
        self._owned_store: Store | None = None
        self._model = model
        self._load_model = load_model if load_model is not None else SemanticScorer.load
        self._lock = threading.Lock()
        self._vectors: dict[Path | None, ToolVectors] = {}
        self._logged: set[tuple[str, int]] = set()
        self._closed = False
        self.error: SemanticUnavailable | None = None
        """Why the model failed to load; set once, then every hybrid search answers lexically."""

    @classmethod
    def from_settings(cls, settings: Settings) -> EmbeddingRuntime:
        """Vectors in the Redis store when `store.url` is set (opened here, closed with the runtime), else
        in `mcp.embedding_cache_dir()` (default `<mcp.cache_dir>/embeddings`, the cache root being the user
        cache dir's `orchestrator`).

        Raises:
            ConfigError: `store.url` is set but redis-py is not installed.
        """
        if settings.store.url is None:
            return cls(settings.mcp.embedding_cache_dir())
        from ..._store import open_store

        store = open_store(settings)
        runtime = cls(None, store=store)
        runtime._owned_store = store
        return runtime

    @property
    def model(self) -> SemanticScorer | None:
        """The loaded model; None until the first hybrid search (or when it failed)."""
        return self._model

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ the engine's blend

    def create_blend(self, search_settings: ToolSearchSettings) -> ScoreBlend | None:
        """The hybrid ScoreBlend for `search_settings.ranking` (what `ToolSearchEngine` calls for hybrid).
        Cheap: nothing is loaded here; the model loads on the first ranked search.

        Returns:
            None for `lexical` ranking; otherwise a `HybridBlend` over this runtime.

        Raises:
            SemanticUnavailable: hybrid ranking cannot run with this runtime: `disabled` (the runtime was
                closed), `missing_extra`, or the model already failed to load. Logged once per runtime, as
                a warning; the engine answers lexically and counts the kind on each search.
        """
        requested = search_settings.ranking
        if requested == "lexical":
            return None
        try:
            self._check_available()
        except SemanticUnavailable as exc:
            self.note(exc)
            raise
        return HybridBlend(self, search_settings)

    def _check_available(self) -> None:
        if self._closed:
            raise SemanticUnavailable("disabled", "the embedding runtime was closed")
        missing = [name for name in EXTRA_MODULES if _find_spec(name) is None]
        if missing:
            raise SemanticUnavailable(
                "missing_extra",
                f"{', '.join(missing)} not installed; they are part of orchestrator's base install: reinstall it",
            )
        if self.error is not None:  # the model already failed to load
            raise self.error

    def vectors(self, cache_dir: Path | str | None = None) -> ToolVectors:
        """The tool vectors of a cache folder (default: this runtime's store or folder), over the model
        (loaded here once).

        Raises:
            SemanticUnavailable: the model cannot load (the same error on every later call), or the
                runtime is disabled or closed (`disabled`).
        """
        directory = Path(cache_dir).expanduser() if cache_dir is not None else self.cache_dir
        with self._lock:
            if self._closed:
                raise SemanticUnavailable("disabled", "the embedding runtime is closed")
            if self.error is not None:
                raise self.error
            if self._model is None:
                try:
                    self._model = self._load_model()
                except SemanticUnavailable as exc:
                    self.error = exc
                    raise
            vectors = self._vectors.get(directory)
            if vectors is None:
                store = self.store if cache_dir is None else None
                vectors = self._vectors[directory] = ToolVectors(self._model, directory, store=store)
            return vectors

    def note(self, exc: SemanticUnavailable) -> None:
        """Log a fallback once per runtime per reason: a warning, except `warming` (expected while a new
        catalog is embedded), which is info."""
        level = logging.INFO if exc.kind == "warming" else logging.WARNING
        key = (exc.kind, level)
        with self._lock:
            if key in self._logged:
                return
            self._logged.add(key)
        log.log(level, "tool search answers with lexical ranking (%s): %s", exc.kind, exc.reason)

    # ------------------------------------------------------------------ lifecycle

    def close(self, timeout: float = CLOSE_JOIN_S) -> None:
        """Stop background embedding after its current step and save its vectors; idempotent.

        Waits at most `timeout` seconds in all; a step still running then saves when it ends.
        """
        with self._lock:
            self._closed = True
            folders = list(self._vectors.values())
        deadline = time.monotonic() + timeout
        for vectors in folders:  # every thread told first, so they finish their steps in parallel
            vectors.stop()
        for vectors in folders:
            if not vectors.close(max(0.0, deadline - time.monotonic())):
                log.warning("background embedding into %s still running after close", vectors.where)
        if self._owned_store is not None:
            self._owned_store.close()
            self._owned_store = None

    def __enter__(self) -> EmbeddingRuntime:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def _find_spec(name: str) -> Any:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
