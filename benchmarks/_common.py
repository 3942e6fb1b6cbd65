"""What the tool-search benchmarks share: data paths, the plain BM25 baseline, replicated catalogs, verdicts."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from orchestrator.protocols.mcp._catalog import ToolCatalog, ToolEntry  # noqa: E402

DATA = Path(os.environ.get("ORCHESTRATOR_SHARED_DATA", REPO.parent / "shared" / "data"))
CATALOGS = DATA / "catalogs"
RETRIEVAL = DATA / "retrieval"
SETS = ("stabletoolbench", "api-bank", "metatool")

_PLAIN_WORD = re.compile(r"[A-Z]{2,}(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def plain_tokens(text: str) -> list[str]:
    """The baseline's analysis: words split on case and non-letters, lowercased; no stopwords, no stemming."""
    return [word.lower() for word in _PLAIN_WORD.findall(text)]


def plain_text(entry: ToolEntry) -> str:
    """The baseline document: server, tool name, description, parameter names and descriptions, once each."""
    parts = [entry.server, entry.tool, entry.description]
    properties = entry.input_schema.get("properties")
    if isinstance(properties, dict):
        for name, prop in properties.items():
            parts.append(str(name))
            if isinstance(prop, dict) and isinstance(prop.get("description"), str):
                parts.append(prop["description"])
    return " ".join(parts)


class PlainBM25:
    """The baseline: rank-bm25's BM25Okapi with its defaults over `plain_text`."""

    def __init__(self, catalog: ToolCatalog) -> None:
        self.names = [entry.name for entry in catalog]
        self.bm25 = BM25Okapi([plain_tokens(plain_text(entry)) for entry in catalog])
        self._containing: dict[str, set[int]] = {}
        for doc_id, frequencies in enumerate(self.bm25.doc_freqs):
            for term in frequencies:
                self._containing.setdefault(term, set()).add(doc_id)

    def ranking(self, query: str, depth: int) -> list[str]:
        """Documents sharing a word with the query, best first (ties by name), at most `depth`."""
        terms = plain_tokens(query)
        candidates = sorted(set().union(*(self._containing.get(term, ()) for term in terms)))
        # get_batch_scores: the library's own scores, for the documents that can rank at all.
        scores = dict(zip(candidates, self.bm25.get_batch_scores(terms, candidates), strict=True)) if candidates else {}
        candidates.sort(key=lambda i: (-scores[i], i))
        return [self.names[i] for i in candidates[:depth]]


def replicated_lists(size: int) -> dict[str, list[dict[str, Any]]]:
    """`size` tools made from the 590 real ones: copy r of server S is server `S-r<r>` with tool names
    suffixed `_r<r>` (normalization would collapse exact copies), taken in server order, copy by copy."""
    real = {path.stem: json.loads(path.read_text()) for path in sorted(CATALOGS.glob("*.json"))}
    lists: dict[str, list[dict[str, Any]]] = {}
    total = copy = 0
    while total < size:
        for server, tools in real.items():
            for tool in tools:
                if total == size:
                    return lists
                name = server if copy == 0 else f"{server}-r{copy}"
                renamed = tool if copy == 0 else {**tool, "name": f"{tool['name']}_r{copy}"}
                lists.setdefault(name, []).append(renamed)
                total += 1
        copy += 1
    return lists


def fallbacks(reader: Any, name: str) -> dict[str, int]:
    """Searches answered lexically, by fallback kind, from the search counter `name` in an InMemoryMetricReader."""
    found: dict[str, int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        kind = dict(point.attributes or {}).get("fallback")
                        if kind and point.value:
                            found[str(kind)] = found.get(str(kind), 0) + int(point.value)
    return found


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report_targets(checks: Sequence[tuple[str, bool]]) -> int:
    """Print each target with PASS/FAIL; the exit code is 0 only when every target holds."""
    print("\nTargets")
    for label, ok in checks:
        print(f"  {verdict(ok)}  {label}")
    return 0 if all(ok for _label, ok in checks) else 1


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain aligned table on stdout."""
    cells = [[str(cell) for cell in header], *[[str(cell) for cell in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def same_scores(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b))


# --------------------------------------------------------------------------- development sets and anchors

DEV_SETS = (*SETS, "mcp-catalogs")
"""Every development set: SETS plus the requests written for the 590 real tools (with a `style` each)."""
BASELINES = DATA.parent / "baselines"
"""../shared/baselines: `anchor_rankers.py`, the reference rankers the project is measured against."""


def anchor_rankers() -> ModuleType:
    """../shared/baselines/anchor_rankers.py (its `engines(tools)` and `metrics(lists, queries)`), imported
    from where it is kept, so every run scores the anchors as published there."""
    path = BASELINES / "anchor_rankers.py"
    spec = importlib.util.spec_from_file_location("anchor_rankers", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise SystemExit(f"{path}: the anchors' rankers are missing (set ORCHESTRATOR_SHARED_DATA)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
