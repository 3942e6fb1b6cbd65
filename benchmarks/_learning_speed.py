"""Learning from use at scale (`speed.py --traces`): ranking with TRACES traces stored, next to the same
catalog without them, in one run.

The traces are the development sets' requests (each made distinct by a number, so there are TRACES distinct
texts), spread over the catalog's tools, every trace its own spawn (so every tool has evidence). Lexical at
10,000 tools; hybrid at 2,500, where the requests' vectors come from a stand-in for the trace vector cache
holding every request (random unit vectors: a search's cost does not depend on their values, and
embedding 20,000 requests takes minutes of CPU once, in the background, in a real gateway).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from _common import RETRIEVAL, median, percentile, replicated_lists, table
from orchestrator import ToolCatalog, ToolSearchEngine, ToolSearchSettings, Trace, TraceEvidence, TraceSettings
from orchestrator.search._embedding.model import DIMENSION
from orchestrator.search._evaluation import load_queries

TRACES = 20_000
NOW = 1_800_000_000.0
LEXICAL_SIZE = 10_000
HYBRID_SIZE = 2_500
TARGET_LEXICAL_MS = 1.0
TARGET_HYBRID_MS = 30.0


def request_pool() -> list[str]:
    return [
        q.query
        for name in ("stabletoolbench", "api-bank", "metatool", "mcp-catalogs")
        for q in load_queries(RETRIEVAL / name / "queries.jsonl")
        if len(q.query) <= 1000
    ]


def synthetic(catalog: ToolCatalog, count: int) -> list[Trace]:
    pool = request_pool()
    entries = catalog.entries
    return [
        Trace(
            f"{pool[i % len(pool)]} ({i})",
            entries[i % len(entries)].server,
            entries[i % len(entries)].tool,
            f"s{i}",
            NOW,
        )
        for i in range(count)
    ]


class CachedRequests:
    """Stands in for the trace vector cache (`ToolVectors`) with every request already embedded."""

    generation = 0
    warming = False

    def __init__(self, texts: Sequence[str]) -> None:
        rng = np.random.default_rng(17)
        vectors = rng.standard_normal((len(texts), DIMENSION)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        self._rows = {self._key(text): vectors[i] for i, text in enumerate(texts)}

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.sha256(text.encode()).digest()

    def keys(self, texts: Sequence[str]) -> list[bytes]:
        return [self._key(text) for text in texts]

    def cached(self, keys: Sequence[bytes]) -> tuple[Any, list[int]]:
        missing = [i for i, key in enumerate(keys) if key not in self._rows]
        return (None, missing) if missing else (np.stack([self._rows[key] for key in keys]), [])

    def warm(self, texts: Mapping[bytes, str]) -> None:
        return None

    def wait(self, keys: Sequence[bytes], timeout: float | None = None) -> bool:
        return True


def compare(plain: ToolSearchEngine, learned: ToolSearchEngine, texts: list[str]) -> tuple[list[float], list[float]]:
    for text in texts[:10]:  # warm-up
        plain.search(text, 8)
        learned.search(text, 8)
    without, with_ = [], []
    for text in texts:
        for engine, times in ((plain, without), (learned, with_)):
            started = time.perf_counter()
            engine.search(text, 8)
            times.append(time.perf_counter() - started)
    return without, with_


def built(engine: ToolSearchEngine) -> float:
    started = time.perf_counter()
    engine.search("warm the evidence", 8)
    return time.perf_counter() - started


def measure(texts: list[str], hybrid: Callable[[], Any] | None) -> list[tuple[str, bool]]:
    """Lexical at LEXICAL_SIZE tools and (given a runtime factory) hybrid at HYBRID_SIZE, with and without."""
    print(
        f"\nLearning from use: {TRACES:,} traces stored (load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores)"
    )
    learning = TraceSettings(refresh_s=1e9)
    rows: list[list[str]] = []
    checks: list[tuple[str, bool]] = []
    catalog = ToolCatalog.from_lists(replicated_lists(LEXICAL_SIZE))
    traces = synthetic(catalog, TRACES)
    plain = ToolSearchEngine(catalog, ranking="lexical")
    learned = ToolSearchEngine(
        catalog, ranking="lexical", evidence=TraceEvidence(lambda: traces, learning, clock=lambda: NOW)
    )
    first = built(learned)
    without, with_ = compare(plain, learned, texts)
    p50 = median(with_) * 1000
    rows.append(
        [
            "lexical",
            f"{len(catalog):,}",
            f"{median(without) * 1000:.3f}",
            f"{p50:.3f}",
            f"{percentile(with_, 0.9) * 1000:.3f}",
            f"{first:.2f}",
        ]
    )
    checks.append(
        (
            f"lexical p50 at {len(catalog):,} tools with {TRACES:,} traces {p50:.3f} ms <= {TARGET_LEXICAL_MS:g} ms",
            p50 <= TARGET_LEXICAL_MS,
        )
    )
    if hybrid is not None:
        runtime = hybrid()
        catalog = ToolCatalog.from_lists(replicated_lists(HYBRID_SIZE))
        traces = synthetic(catalog, TRACES)
        cache = CachedRequests(list(dict.fromkeys(trace.query for trace in traces)))
        settings = ToolSearchSettings(ranking="hybrid")
        plain = ToolSearchEngine(catalog, settings, embeddings=runtime)
        evidence = TraceEvidence(lambda: traces, learning, vectors=lambda: cache, clock=lambda: NOW)  # type: ignore[arg-type,return-value]
        learned = ToolSearchEngine(catalog, settings, embeddings=runtime, evidence=evidence)
        if not (plain.warm() and learned.warm()):
            raise SystemExit("hybrid ranking is not available (see the log)")
        first = built(learned)
        without, with_ = compare(plain, learned, texts)
        p50 = median(with_) * 1000
        rows.append(
            [
                "hybrid",
                f"{len(catalog):,}",
                f"{median(without) * 1000:.2f}",
                f"{p50:.2f}",
                f"{percentile(with_, 0.9) * 1000:.2f}",
                f"{first:.2f}",
            ]
        )
        checks.append(
            (
                f"hybrid p50 at {len(catalog):,} tools with {TRACES:,} traces {p50:.1f} ms <= {TARGET_HYBRID_MS:g} ms",
                p50 <= TARGET_HYBRID_MS,
            )
        )
    table(["ranking", "tools", "p50 ms without traces", "p50 ms with", "p90 ms with", "first build s"], rows)
    return checks
