"""Learning from use, measured (`retrieval.py --traces`): each development set split into past and future.

A request is *past* when the SHA-1 of its `id` (UTF-8, hex, read as an integer) is even, *future* otherwise;
future requests whose text equals a past one are dropped. Each past request becomes one trace (its own
spawn, `ok: true`) for each of its gold tools, stored as a gateway stores them (`TraceStore` with the
default settings: redacted, at most `max_per_tool` per tool). The future half is ranked without and with
those traces, lexical and hybrid, in one run; a last check ranks it with 1,000 traces of a single spawn,
which must change nothing.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from _common import Figures, figures_by_style
from orchestrator import (
    EmbeddingRuntime,
    SearchQueryError,
    ToolCatalog,
    ToolSearchEngine,
    ToolSearchSettings,
    Trace,
    TraceEvidence,
    TraceSettings,
    TraceStore,
)
from orchestrator._store import MemoryStore
from orchestrator.search._evaluation import MRR_DEPTH, EvalQuery
from orchestrator.search._evidence import trace_vectors

K = 5
NOW = 1_800_000_000.0
"""The traces' time, and the evidence's clock: every trace is fresh (no decay)."""
EMBEDDING_TIMEOUT_MS = 10_000.0
"""No query falls back to lexical because the shared machine was busy: with and without traces are
compared on the same footing."""
ONE_SPAWN_TRACES = 1_000

TARGETS_HYBRID = {"metatool": 0.92, "api-bank": 0.98}
"""Issue 23: hybrid hit@5 on the future half with traces; the other sets: no worse than without."""


def is_past(query_id: str) -> bool:
    return int(hashlib.sha1(query_id.encode("utf-8")).hexdigest(), 16) % 2 == 0


def split(queries: Sequence[EvalQuery]) -> tuple[list[EvalQuery], list[EvalQuery]]:
    """(past, future): future without the requests whose text a past request has."""
    past = [query for query in queries if is_past(query.id)]
    seen = {query.query for query in past}
    future = [query for query in queries if not is_past(query.id) and query.query not in seen]
    return past, future


def past_traces(past: Sequence[EvalQuery]) -> list[Trace]:
    """One trace per past request and gold tool, each request its own spawn."""
    return [Trace(query.query, server, tool, query.id, NOW) for query in past for server, tool in query.gold]


def stored(traces: Sequence[Trace], settings: TraceSettings) -> list[Trace]:
    """The traces as a gateway's store keeps them (redacted, bounded)."""
    store = TraceStore(MemoryStore(), settings, clock=lambda: NOW)
    store.record(traces)
    return store.load()


def one_spawn_traces(past: Sequence[EvalQuery]) -> list[Trace]:
    """ONE_SPAWN_TRACES traces of a single spawn, cycling through the past requests and their tools."""
    pairs = [(query.query, server, tool) for query in past for server, tool in query.gold]
    return [
        Trace(text, server, tool, "the-one-spawn", NOW - i)
        for i, (text, server, tool) in enumerate(pairs[i % len(pairs)] for i in range(ONE_SPAWN_TRACES))
    ]


Rankings = list[list[str] | None]


def rank_all(engine: ToolSearchEngine, queries: Sequence[EvalQuery]) -> Rankings:
    rankings: Rankings = []
    for query in queries:
        try:
            rankings.append([hit.name for hit in engine.search(query.query, MRR_DEPTH)])
        except SearchQueryError:
            rankings.append(None)
    return rankings


def cells(catalog: ToolCatalog, queries: Sequence[EvalQuery], rankings: Rankings) -> dict[str | None, Figures]:
    """hit@1 / hit@5 / MRR for the whole half (None) and per style."""
    return figures_by_style(catalog, queries, rankings, K)


@dataclass
class Outcome:
    """One set's figures: ranking -> with/without -> style (None: the whole half) -> cell."""

    name: str
    past: int
    future: int
    traces: int
    figures: dict[str, dict[str, dict[str | None, Figures]]]
    seconds: dict[str, float]
    one_spawn_identical: dict[str, bool]


def measure(
    name: str,
    catalog: ToolCatalog,
    queries: Sequence[EvalQuery],
    runtime: EmbeddingRuntime | None,
    log: Callable[[str], None] = print,
) -> Outcome:
    """Rank the future half without and with the past half's traces (and with one spawn's 1,000)."""
    past, future = split(queries)
    traces = past_traces(past)
    settings = ToolSearchSettings(embedding_timeout_ms=EMBEDDING_TIMEOUT_MS)
    learning = TraceSettings(refresh_s=1e9)
    kept = stored(traces, learning)
    outcome = Outcome(name, len(past), len(future), len(kept), {}, {}, {})
    for ranking in ("lexical", "hybrid") if runtime is not None else ("lexical",):
        vectors = (lambda: trace_vectors(runtime)) if ranking == "hybrid" and runtime is not None else None
        figures: dict[str, dict[str | None, Figures]] = {}
        baseline: Rankings = []
        flood = stored(one_spawn_traces(past), learning)
        for label, source in (("without", None), ("with", kept), ("one spawn", flood)):
            evidence = None
            if source is not None:
                evidence = TraceEvidence(lambda source=source: source, learning, vectors=vectors, clock=lambda: NOW)
                evidence.warm()
            engine = ToolSearchEngine(catalog, settings, ranking=ranking, embeddings=runtime, evidence=evidence)
            if not engine.warm() or engine.ranking_used != ranking:
                raise SystemExit(f"{ranking} ranking is not available (see the log)")
            started = time.perf_counter()
            rankings = rank_all(engine, future)
            outcome.seconds[f"{ranking} {label}"] = time.perf_counter() - started
            if label == "one spawn":
                outcome.one_spawn_identical[ranking] = rankings == baseline
                continue
            if label == "without":
                baseline = rankings
            figures[label] = cells(catalog, future, rankings)
            log(f"{name} {ranking} {label}: hit@5 {figures[label][None].hit5:.3f}")
        outcome.figures[ranking] = figures
    return outcome


def report(outcomes: Sequence[Outcome], table: Callable[[list[str], list[list[str]]], None]) -> list[tuple[str, bool]]:
    """Print the with/without table (hit@1 / hit@5 / MRR) per set and style, and return the verdicts."""
    rankings = [r for r in ("lexical", "hybrid") if all(r in o.figures for o in outcomes)]
    headers = ["set / style (future half)"] + [f"{r} {label}" for r in rankings for label in ("without", "with")]
    rows: list[list[str]] = []
    verdicts: list[tuple[str, bool]] = []
    for outcome in outcomes:
        styles = [style for style in outcome.figures[rankings[0]]["without"] if style is not None]
        for style in [None, *styles]:
            label = (
                f"{outcome.name} ({outcome.future} requests; {outcome.traces} traces of {outcome.past})"
                if style is None
                else f"  {style}"
            )
            row = [label]
            for ranking in rankings:
                row += [outcome.figures[ranking][which][style].cell() for which in ("without", "with")]
            rows.append(row)
        for ranking in rankings:
            without, with_ = (outcome.figures[ranking][which][None].hit5 for which in ("without", "with"))
            verdicts.append(
                (f"{outcome.name} {ranking} hit@5 with traces {with_:.3f} >= without {without:.3f}", with_ >= without)
            )
            verdicts.append(
                (
                    f"{outcome.name} {ranking}: 1,000 traces of one spawn leave every ranking as without",
                    outcome.one_spawn_identical[ranking],
                )
            )
        target = TARGETS_HYBRID.get(outcome.name)
        if target is not None and "hybrid" in rankings:
            found = outcome.figures["hybrid"]["with"][None].hit5
            verdicts.append((f"{outcome.name} hybrid hit@5 with traces {found:.3f} >= {target:.2f}", found >= target))
    print("\nLearning from use: the future half without and with the past half's traces (hit@1 / hit@5 / MRR)")
    table(headers, rows)
    timing = ", ".join(
        f"{o.name} {key} {seconds:.1f}s" for o in outcomes for key, seconds in o.seconds.items() if "one" not in key
    )
    print(f"ranking time: {timing}")
    return verdicts
