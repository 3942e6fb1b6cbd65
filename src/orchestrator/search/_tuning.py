"""Every tuned ranking parameter, in one place, with where its value comes from.

These values were chosen together, on the four development sets in `../shared/data/retrieval`
(StableToolBench, API-Bank, MetaTool and requests written for the 590 real MCP tools), by leave-one-set-out
cross-validation: each set's value is chosen on the other three, and a default is kept only when every
held-out set does at least as well with it as with its fold's own choice. Change one and re-run the
scripts named beside it; the figures are in `benchmarks/RESULTS.md`.

    lexical (BM25 over weighted fields)     BM25_K1, BM25_B, WORD_FORM_WEIGHT   benchmarks/retrieval.py --cv
    hybrid (BM25 blended with the models)   BLEND_BM25_K1, MULTILINGUAL_SHARE,   benchmarks/hybrid_cv.py
                                            HYBRID_WEIGHT, SEMANTIC_FLOOR
    preferences on top of the blend         NAMED_SERVER_BONUS                   benchmarks/retrieval.py --hybrid
    long requests (pasted tasks)            STEP_STRENGTH_POWER, LONG_BLEND_SHARE benchmarks/retrieval.py --long
    learned evidence (traces, _evidence.py) EVIDENCE_*                           benchmarks/retrieval.py --traces

`HYBRID_WEIGHT` and `SEMANTIC_FLOOR` are the defaults of the `mcp.tool_search.hybrid_weight` and
`semantic_floor` settings; the others are fixed (the multilingual share is baked into cached vectors).
"""

from __future__ import annotations

__all__ = [
    "BLEND_BM25_K1",
    "BM25_B",
    "BM25_K1",
    "EVIDENCE_CENTROID_WEIGHT",
    "EVIDENCE_HYBRID_LEXICAL_WEIGHT",
    "EVIDENCE_LEXICAL_FLOOR",
    "EVIDENCE_LEXICAL_WEIGHT",
    "EVIDENCE_NEIGHBOURS",
    "EVIDENCE_VOTE_FLOOR",
    "EVIDENCE_VOTE_WEIGHT",
    "HYBRID_WEIGHT",
    "LONG_BLEND_SHARE",
    "MULTILINGUAL_SHARE",
    "NAMED_SERVER_BONUS",
    "SEMANTIC_FLOOR",
    "STEP_STRENGTH_POWER",
    "WORD_FORM_WEIGHT",
]

BM25_K1 = 3.0
"""Term-frequency saturation of lexical ranking, above rank-bm25's 1.5: a word repeated in a tool's name
and prose keeps more weight, and weighted frequencies run higher than word counts (a name word counts 2,
its exact form WORD_FORM_WEIGHT more). Chosen with BM25_B and the field weights by the mean of hit@1 and
hit@5 over the held-out sets."""
BM25_B = 0.75
"""Length normalisation, rank-bm25's default. Full normalisation lets five-word tools win on one incidental
word over the well-documented tool a request asks for; the folds chose 0.75 to 0.9, never 1.0."""
WORD_FORM_WEIGHT = 0.375
"""Weight of a word's exact form next to its stem's 1: stemming finds "issue" for "issues", the exact form
ranks the tool that says "issues" first. Every fold chose 0.25 to 0.5. A multiple of 1/8, like every field
weight, so weighted frequencies are exact sums in floating point."""
BLEND_BM25_K1 = 1.5
"""k1 of the BM25 scores hybrid ranking blends with the models (rank-bm25's default; lexical ranking and
hybrid's fail-open answers keep BM25_K1). Next to a model, the lexical part helps most by counting a
request's distinct words a tool has, and a lower k1 saturates repeats sooner; every k1 from 1.2 to 2.0
meets the targets at the same share, weight and floor."""
MULTILINGUAL_SHARE = 0.4
"""USE multilingual v3's part of every cosine (all-MiniLM-L6-v2 has the rest). It is baked into each cached
vector and its cache key, so it is not a setting."""
HYBRID_WEIGHT = 0.60
"""Weight of the embedding similarity in the blend (the rest is BM25; both normalised by the query's best)."""
SEMANTIC_FLOOR = 0.15
"""A request sharing no word with any tool is a miss unless its best cosine reaches this, and the blend adds
no tool below it that lexical ranking did not match: non-English requests are still answered while
off-topic ones (of the development set, all but a nonsense string) stay misses."""
NAMED_SERVER_BONUS = 0.10
"""Added to the hybrid score (which tops out at 1) of every tool of a server the request names ("in Jira",
"on HubSpot"): between near-equivalent tools of several products, the one the user named comes first.
Lexical ranking does not get it (as a share of the best BM25 score it gained nothing)."""
STEP_STRENGTH_POWER = 0.5
"""How much a long request's step's own best BM25 score decides what its tools score: each tool scores
`max over steps of score / best(step) * (best(step) / best(any step)) ** power`. At 0 every step's best
tool ties at the top (filler sentences too); at 1 one step rich in rare words fills the results."""
LONG_BLEND_SHARE = 0.25
"""What the hybrid blend counts for in a long request's ranking (the rest is its step-by-step lexical score,
normalised by its best): the models see only a few steps, and filler sentences score moderate cosines
with many tools."""
EVIDENCE_LEXICAL_FLOOR = 0.2
"""Request similarity (the binary tf-idf cosine of two requests' stems) an earlier request must pass to be
evidence for the tools it led to; its evidence grows linearly from here to 1 (the same words)."""
EVIDENCE_LEXICAL_WEIGHT = 1.0
"""Lexical ranking: full lexical evidence adds this share of the query's best BM25 score."""
EVIDENCE_HYBRID_LEXICAL_WEIGHT = 1.5
"""Hybrid ranking (scores near 0..1): what full lexical evidence adds. Above the blend's own top of 1: a near
repeat of a request that led to a tool is the strongest evidence there is. Chosen with
EVIDENCE_CENTROID_WEIGHT on the four development sets' future halves (benchmarks/retrieval.py --traces)."""
EVIDENCE_CENTROID_WEIGHT = 1.75
"""Hybrid ranking: a tool with evidence is compared with the query as its own vector plus this times the
mean vector of the earlier requests that led to it, less the mean of all earlier requests (renormalised):
the tool as its users ask for it. Without the centring, StableToolBench's templated tasks ("I'm planning a
trip... can you help me") pulled every tool with evidence towards every request."""
EVIDENCE_NEIGHBOURS = 20
"""Hybrid ranking: the earlier requests nearest to the query (by sentence cosine) that vote for their tools."""
EVIDENCE_VOTE_FLOOR = 0.2
"""Share of the neighbours' votes (each weighted by its cosine) a tool must pass before the vote counts:
neighbours that agree say more than one that happens to be near (multi-part tasks scatter their votes)."""
EVIDENCE_VOTE_WEIGHT = 1.6
"""Hybrid ranking: what a unanimous vote adds (scaled from the floor up)."""
