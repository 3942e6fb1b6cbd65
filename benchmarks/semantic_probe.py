"""Hybrid ranking replayed outside the engine: weight and floor grids over its own BM25, development sets only.

    .venv/bin/python benchmarks/semantic_probe.py [--cache DIR] [--quick]

For each development set (../shared/data/retrieval) the engine's lexical index (`LexicalIndex`, the tuned
BM25 of ranking.py) scores every query, at BM25_K1 for the lexical ranking and at BLEND_BM25_K1 for the
blend (`with_blend_k1` tries another), and the embedding model scores every tool text (`entry_text`)
against the query's sentences (`query_sentences`); hybrid rankings are then made as the engine makes them
(`blend`, `admitted`, `LexicalIndex.top`, plus NAMED_SERVER_BONUS for a named server) for a grid of weights
and floors, and scored with evaluation.py (hit@5, MRR over the top 100). A query over MAX_QUERY_CHARS
counts as a miss; the engine ranks the few development requests over LONG_QUERY_CHARS step by step,
which this replay does not. `hybrid_cv.py` builds on `score_set`, `at_share` and `report` here to choose
the defaults. This script's own weight rule (the MiniLM-era choice) is also run on random halves of every
set, chosen on one half and measured on the other, to show how it carries over to unseen queries. Then
the floor is checked against off-topic requests and paraphrases on the 590 real tools
(../shared/data/catalogs).

Tool and query vectors are cached in --cache (default: the user cache dir's `orchestrator/probe`), so a
second run takes seconds. The end-to-end figures (the engine itself, next to lexical and rank-bm25) are
`benchmarks/retrieval.py --hybrid` and `benchmarks/speed.py --hybrid`.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import platformdirs

from _common import CATALOGS, RETRIEVAL, SETS, add_results_flag, run_recorded, table
from orchestrator import SemanticScorer, ToolCatalog, ToolSearchSettings, ToolVectors
from orchestrator.search._embedding.model import MINILM_DIMENSION
from orchestrator.search._embedding.rules import admitted, blend, entry_text, query_sentences
from orchestrator.search._engine import LONG_QUERY_CHARS, MAX_QUERY_CHARS
from orchestrator.search._evaluation import MRR_DEPTH, EvalQuery, EvalReport, evaluate_rankings, load_queries
from orchestrator.search._lexical import LexicalIndex
from orchestrator.search._tuning import BLEND_BM25_K1, MULTILINGUAL_SHARE, NAMED_SERVER_BONUS

K = 5
WEIGHTS = [round(w, 2) for w in np.arange(0.0, 1.0001, 0.05)]
FLOORS = [-1.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5]

# Off-topic requests for the real developer catalog (none of its 590 tools can serve them) and
# paraphrases that share few words with the tool that serves them: they place the floor.
OFF_TOPIC = [
    "what is a good recipe for banana bread",
    "tell me a joke about cats",
    "who won the football world cup in 1998",
    "translate good morning into italian",
    "how tall is mount everest",
    "suggest a name for my new puppy",
    "write a poem about autumn leaves",
    "what are the symptoms of the flu",
    "how do I knit a scarf",
    "recommend a romantic movie for tonight",
    "what is the capital of australia",
    "plan a vegetarian dinner for six people",
    "how many calories are in an avocado",
    "best exercises for lower back pain",
    "explain the rules of cricket",
    "qwzx blorft snargle",
    "book a table for two at an italian restaurant tonight",
    "order a large pepperoni pizza",
    "play some relaxing jazz music",
    "find me a cheap flight to London",
    "what is the meaning of life",
]
PARAPHRASES = [
    ("report a bug in the repository", "create_issue"),
    ("how many documents are in orders", "count"),
    ("what time is it in Tokyo", "get_current_time"),
    ("open the website example.com in the browser", "browser_navigate"),
    ("save a picture of what the page looks like", "browser_take_screenshot"),
    ("show me the differences I have not staged", "git_diff_unstaged"),
    ("remember that Alice works at Acme", "create_entities"),
    ("look up restaurants near the Eiffel tower", "maps_search_places"),
]


@dataclass
class Scored:
    """One set, scored once: per query the engine's BM25 (dense), its matches, and the cosines."""

    name: str
    catalog: ToolCatalog
    queries: list[EvalQuery]
    index: LexicalIndex
    lexical: list[np.ndarray | None]  # None: over the length limit (the engine refuses it)
    """Per query, the lexical ranking's BM25 (BM25_K1)."""
    blend_lexical: list[np.ndarray | None]
    """Per query, the BM25 hybrid ranking blends (BLEND_BM25_K1; `with_blend_k1` tries another)."""
    matched: list[np.ndarray | None]
    cosines: list[np.ndarray | None]
    named: list[np.ndarray | None]
    """Per query, the tools of a server it names (`LexicalIndex.named`): the engine's NAMED_SERVER_BONUS."""
    parts: list[tuple[np.ndarray, np.ndarray] | None]
    """Per query, each model's cosines (all-MiniLM-L6-v2, USE multilingual v3), sentences x tools: what
    `at_share` mixes to try another MULTILINGUAL_SHARE without embedding again."""


def split_cosines(query: np.ndarray, tools: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each model's own cosines (sentences x tools) out of the joined vectors, undoing the share scaling."""
    minilm = np.atleast_2d(query)[:, :MINILM_DIMENSION] @ tools[:, :MINILM_DIMENSION].T
    multilingual = np.atleast_2d(query)[:, MINILM_DIMENSION:] @ tools[:, MINILM_DIMENSION:].T
    return minilm / (1.0 - MULTILINGUAL_SHARE), multilingual / MULTILINGUAL_SHARE


def at_share(scored: Scored, share: float) -> Scored:
    """The set's cosines as if MULTILINGUAL_SHARE were `share` (each tool's best sentence, as the engine)."""
    cosines = [
        None if part is None else ((1.0 - share) * part[0] + share * part[1]).max(axis=0) for part in scored.parts
    ]
    return replace(scored, cosines=cosines)


def with_blend_k1(scored: Scored, k1: float) -> Scored:
    """The set as if BLEND_BM25_K1 were `k1` (same documents and terms, so the same matches)."""
    index = scored.index.with_k1(k1)
    blend_lexical = [
        None if lexical is None else index.scores(index.query_terms(query.query.strip()))[0]
        for query, lexical in zip(scored.queries, scored.lexical, strict=True)
    ]
    return replace(scored, blend_lexical=blend_lexical)


def score_set(name: str, scorer: ToolVectors, quick: bool) -> Scored:
    catalog = ToolCatalog.from_snapshot(RETRIEVAL / name / "tools.json")
    queries = load_queries(RETRIEVAL / name / "queries.jsonl")
    if quick:
        queries = queries[:300]
    index = LexicalIndex(catalog.entries)
    tools = scorer.embed_tools({entry.name: entry_text(entry) for entry in catalog})
    accepted = [q.query.strip() for q in queries if len(q.query.strip()) <= MAX_QUERY_CHARS]
    # Each query as the engine embeds it: sentence by sentence (batched and cached here).
    sentences = sorted({part for text in accepted for part in query_sentences(text)})
    vectors = dict(zip(sentences, scorer.embed_tools(dict(enumerate(sentences))), strict=True))
    lexical, matched, cosines, named, parts = [], [], [], [], []
    for query in queries:
        text = query.query.strip()
        if len(text) > MAX_QUERY_CHARS:
            lexical.append(None), matched.append(None), cosines.append(None), named.append(None), parts.append(None)
            continue
        terms = index.query_terms(text)
        scores, candidates = index.scores(terms)
        named.append(index.named(terms) if len(text) <= LONG_QUERY_CHARS else np.zeros(len(catalog), dtype=bool))
        mask = np.zeros(len(catalog), dtype=bool)
        mask[candidates] = True
        query_vectors = np.stack([vectors[part] for part in query_sentences(text)])
        lexical.append(scores), matched.append(mask), cosines.append(scorer.model.similarities(query_vectors, tools))
        parts.append(split_cosines(query_vectors, tools))
    scored = Scored(name, catalog, queries, index, lexical, lexical, matched, cosines, named, parts)
    return with_blend_k1(scored, BLEND_BM25_K1)


def report(scored: Scored, weight: float | None, floor: float) -> EvalReport:
    """weight None: the engine's lexical ranking; 1.0 with floor -1: the model alone."""
    names = [entry.name for entry in scored.catalog]
    rankings: list[list[str] | None] = []
    for lexical, blend_lexical, matched, cosines, named in zip(
        scored.lexical, scored.blend_lexical, scored.matched, scored.cosines, scored.named, strict=True
    ):
        if lexical is None or blend_lexical is None or matched is None or cosines is None or named is None:
            rankings.append(None)
            continue
        if weight is None:
            top = scored.index.top(lexical, np.flatnonzero(matched), MRR_DEPTH)
        else:
            scores = blend(blend_lexical, cosines, weight).astype(np.float64) + NAMED_SERVER_BONUS * named
            top = scored.index.top(scores, np.flatnonzero(admitted(matched, cosines, floor)), MRR_DEPTH)
        rankings.append([names[doc] for doc, _ in top])
    return evaluate_rankings(scored.catalog, scored.queries, rankings, K)


def choose_weight(sets: dict[str, Scored], floor: float) -> tuple[float, list[list[str]]]:
    """The rule for the default weight: the best mean hit@K over the sets among weights that leave no set
    below its lexical hit@K (`auto` turns hybrid on by itself, so it must not make a catalog worse).
    Returns the weight and the grid's table rows."""
    lexical = {name: report(scored, None, floor).hit_at_k for name, scored in sets.items()}
    rows, safe = [], (-1.0, -1.0, 0.0)
    for weight in WEIGHTS:
        reports = [report(scored, weight, floor) for scored in sets.values()]
        hit = float(np.mean([r.hit_at_k for r in reports]))
        mrr = float(np.mean([r.mrr for r in reports]))
        harmless = all(r.hit_at_k >= lexical[name] for name, r in zip(sets, reports, strict=True))
        cells = [f"{r.hit_at_k:.3f} / {r.mrr:.3f}" for r in reports] + [f"{hit:.3f} / {mrr:.3f}"]
        rows.append([f"w={weight:.2f}", *cells, "yes" if harmless else "no"])
        if harmless:
            safe = max(safe, (round(hit, 3), round(mrr, 3), weight))
    return safe[2], rows


def subset(scored: Scored, ids: list[int]) -> Scored:
    pick = lambda values: [values[i] for i in ids]  # noqa: E731
    return replace(
        scored,
        queries=pick(scored.queries),
        lexical=pick(scored.lexical),
        blend_lexical=pick(scored.blend_lexical),
        matched=pick(scored.matched),
        cosines=pick(scored.cosines),
        named=pick(scored.named),
        parts=pick(scored.parts),
    )


def halves(sets: dict[str, Scored], floor: float, splits: int = 3) -> list[list[str]]:
    """How well the rule carries over to queries it did not see: each set's queries split in random
    halves (fixed seeds); the weight is chosen on one half and measured on the other, both ways."""
    rows = []
    for seed in range(splits):
        rng = random.Random(seed)
        parts: dict[str, tuple[Scored, Scored]] = {}
        for name, scored in sets.items():
            ids = list(range(len(scored.queries)))
            rng.shuffle(ids)
            middle = len(ids) // 2
            parts[name] = (subset(scored, ids[:middle]), subset(scored, ids[middle:]))
        for chosen_on, measured_on in ((0, 1), (1, 0)):
            weight, _ = choose_weight({name: pair[chosen_on] for name, pair in parts.items()}, floor)
            held = [report(pair[measured_on], weight, floor).hit_at_k for pair in parts.values()]
            rows.append([f"split {seed}, half {chosen_on + 1}", f"{weight:.2f}", *(f"{h:.3f}" for h in held)])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=Path(platformdirs.user_cache_dir("orchestrator")) / "probe")
    parser.add_argument("--quick", action="store_true", help="first 300 queries of each set")
    add_results_flag(parser)
    args = parser.parse_args()
    defaults = ToolSearchSettings()
    scorer = ToolVectors(SemanticScorer.load(), args.cache)
    print(f"embedding tools and queries of {', '.join(SETS)} (vectors cached in {args.cache})")
    sets = {name: score_set(name, scorer, args.quick) for name in SETS}

    def cells(weight: float | None, floor: float) -> list[str]:
        reports = [report(scored, weight, floor) for scored in sets.values()]
        hit = float(np.mean([r.hit_at_k for r in reports]))
        mrr = float(np.mean([r.mrr for r in reports]))
        return [f"{r.hit_at_k:.3f} / {r.mrr:.3f}" for r in reports] + [f"{hit:.3f} / {mrr:.3f}"]

    floor = defaults.semantic_floor
    lexical = [report(scored, None, floor).hit_at_k for scored in sets.values()]
    print(f"\nweight grid at floor {floor}: hit@{K} / MRR. The choice: the best mean hit@{K} over the three sets")
    print(f"among weights that leave no set below its lexical hit@{K} ({', '.join(f'{h:.3f}' for h in lexical)}):")
    print("`auto` turns hybrid on by itself when the extra is installed, so it must not make a catalog worse")
    chosen, rows = choose_weight(sets, floor)
    table(["weight", *SETS, "mean", "no set below lexical"], rows)
    print(f"chosen: w={chosen:.2f}; configured default {defaults.hybrid_weight}")

    print(
        f"\nthe rule on unseen queries: weight chosen on a random half of every set, hit@{K} on the other half (floor {floor})"
    )
    table(["split", "chosen weight", *SETS], halves(sets, floor))

    weight = defaults.hybrid_weight
    print(
        f"\nfloor grid at w={weight} (-1: off; a tool joins hybrid results by a lexical match or a cosine at the floor)"
    )
    table(["floor", *SETS, "mean"], [[f"{f:.2f}", *cells(weight, f)] for f in FLOORS])

    real = ToolCatalog.from_snapshot(CATALOGS)
    real_index = LexicalIndex(real.entries).with_k1(BLEND_BM25_K1)
    real_tools = scorer.embed_tools({entry.name: entry_text(entry) for entry in real})
    tools = [entry.tool for entry in real]
    print(
        f"\nthe floor on the {len(real)} real tools: best cosine of each request, and what hybrid returns at floor {floor}"
    )
    rows = []
    for query, gold in [(q, None) for q in OFF_TOPIC] + PARAPHRASES:
        cosines = scorer.model.similarities(scorer.model.embed_query(query), real_tools)
        scores, candidates = real_index.scores(real_index.query_terms(query))
        mask = np.zeros(len(real), dtype=bool)
        mask[candidates] = True
        top = real_index.top(
            blend(scores, cosines, weight).astype(np.float64), np.flatnonzero(admitted(mask, cosines, floor)), K
        )
        got = [tools[doc] for doc, _ in top]
        verdict = (
            "miss"
            if not got
            else ("found" if gold in got else ("-" if gold is None else "not in top 5"))
            if gold
            else "returned tools"
        )
        rows.append(
            [query, gold or "(off-topic)", f"{cosines.max():.2f}", len(candidates), verdict, ", ".join(got[:3])]
        )
    table(["request", "serving tool", "best cosine", "BM25 matches", "hybrid", "top 3"], rows)

    print(f"\nat the defaults (weight {weight}, floor {floor}), hit@{K} / MRR:")
    rows = []
    for name, scored in sets.items():
        rows.append(
            [
                name,
                *(
                    f"{r.hit_at_k:.3f} / {r.mrr:.3f}"
                    for r in (report(scored, None, floor), report(scored, 1.0, -1.0), report(scored, weight, floor))
                ),
            ]
        )
    table(["set", "engine BM25", "model alone", "hybrid"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_recorded(main))
