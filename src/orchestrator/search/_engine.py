"""Tool search: exact names and `select:`, BM25 ranking, the hybrid blend, and expand_tools.

    ToolSearchEngine(catalog).search(query)      exact name / `select:NAME` first, then BM25 (_lexical.py),
                                                 blended with embeddings for hybrid ranking (_embedding/)
    ToolSearchEngine(catalog).expand_tools(names) full definitions, refused over `max_expand`

The decision whether a spawn searches at all lives in `orchestrator._planning`; the index, analysis
and token counting in their own modules. CPU-bound and synchronous: the gateway calls it off its loop.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .._config import ToolSearchSettings
from .._errors import ExpandError, SearchQueryError, SemanticUnavailable, ToolNotFoundError
from .._telemetry import FALLBACK_KINDS, Telemetry
from ..protocols.mcp._catalog import ToolCatalog, ToolEntry
from ._blend import EvidenceBlend, ScoreBlend
from ._evidence import EvidenceSource, LearnedEvidence
from ._lexical import FORM_PREFIX, Analyzer, LexicalIndex
from ._spelling import NameSpellings
from ._tuning import BLEND_BM25_K1, LONG_BLEND_SHARE, NAMED_SERVER_BONUS, STEP_STRENGTH_POWER

if TYPE_CHECKING:
    from ._embedding import EmbeddingRuntime

__all__ = [
    "MAX_QUERY_CHARS",
    "SELECT_PREFIX",
    "Ranked",
    "SearchHit",
    "ToolSearchEngine",
]

MAX_QUERY_CHARS = 8000
"""Longest tool_search query answered: room for a task an agent pastes whole (a page or two); longer is
refused with a one-line message."""
LONG_QUERY_CHARS = 1000
"""Queries up to this length are ranked whole, as the development sets were measured (all but two of their
4,071 requests are shorter). Longer ones are ranked step by step (`request_steps`)."""
STEP_WORDS = 24
"""A step of a long request is a sentence or line, cut every this many words when longer: one step names
about one thing to do, and a run-on paragraph without punctuation still splits into steps."""
MAX_STEPS = 96
"""Steps of a long request scored separately (MAX_QUERY_CHARS of prose is about 60 steps); beyond this
adjacent steps are merged, so scoring costs a bounded number of passes (each well under a millisecond at
2,500 tools)."""
LONG_QUERY_READS = 2_000_000
"""Most postings entries the steps of one long request read together (about 8 ms here). Past it adjacent
steps are merged, pair by pair, until they fit: 96 different steps of common words read 57 million at
100,000 tools (171 ms of a worker thread per call). 8,000 characters of StableToolBench's requests read 1.4
million at 50,000 tools, so real requests are ranked as before up to about 70,000."""
MAX_EMBEDDED_STEPS = 5
"""Steps of a long request the hybrid blend embeds: the ones matching some tool best lexically. Each step of
STEP_WORDS words costs about 7 ms of model time here (benchmarks/speed.py), so five keep a request of
4,000 characters under 60 ms."""
SCORE_DECIMALS = 3
"""Decimals of a score in an agent's search results (`SearchHit.to_result`)."""
SELECT_PREFIX = "select:"
"""`select:NAME[,NAME...]` returns exactly those tools, unranked (the convention Claude's tool search uses)."""
GROUP_DEPTH_FACTOR = 3
"""With equivalents folded, the ranking is read this many result lists deep to fill the results."""
EQUIVALENT_OVERLAP = 0.55
"""Share of the shorter description's words (idf-weighted) two same-named tools must share to count as one
capability: github with its legacy npm server or gitlab, filesystem with desktop-commander's file tools,
while supabase's create_branch stays apart. Weighted by idf so that one vendor's sports or country APIs
("baseball" / "rugby" team media), which share their boilerplate, stay apart."""
EQUIVALENT_MIN_WORDS = 4
"""Descriptions shorter than this (after stopwords) say too little to call two tools the same: on
StableToolBench "Search airplane by name" and "Search Book by its name" share two of three words."""
EQUIVALENT_WORDS = 60
"""Description terms compared (the opening, where a tool says what it does)."""
_IDF_FLOOR = 0.05
STALE_VOCABULARY = 4
"""When the analyzer knows this many times the terms the index holds (plus STALE_VOCABULARY_SLACK), the next
change builds fresh with a new analyzer: terms only ever join a vocabulary, and a server re-listing new
words each time (nonces, timestamps) grew it to 2 million terms in 200 re-lists, 341 MB, every update
paying for its size (found by red-teaming)."""
STALE_VOCABULARY_SLACK = 50_000
SUGGESTIONS = 3
"""Closest names listed when expand_tools gets a name that does not exist."""
_SUGGESTION_CUTOFF = 0.6
"""difflib similarity below which a name is not offered as a correction."""

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- search


@dataclass(frozen=True)
class SearchHit:
    """One tool_search result: enough to choose a tool, never its schema."""

    name: str
    server: str
    tool: str
    summary: str
    score: float
    alternatives: tuple[str, ...] = ()
    """Qualified names of the same tool on other servers (same name, near-identical description), ranked
    lower and folded into this hit so they do not crowd out other capabilities; any of them can be expanded."""

    def to_dict(self) -> dict[str, Any]:
        """Every field, for people and scripts (`orchestrator tools search --json`)."""
        found: dict[str, Any] = {
            "name": self.name,
            "server": self.server,
            "tool": self.tool,
            "summary": self.summary,
            "score": self.score,
        }
        if self.alternatives:
            found["alternatives"] = list(self.alternatives)
        return found

    def to_result(self) -> dict[str, Any]:
        """What `tool_search` hands an agent: the name to expand or call (it starts with the server's), the
        summary to choose by, the score to SCORE_DECIMALS places (scores only order the hits), alternatives.

        Everything a search returns stays in the agent's context for the rest of its session: the server
        and tool fields repeat the name, and a full-precision float costs about six tokens.
        """
        found: dict[str, Any] = {"name": self.name, "summary": self.summary, "score": round(self.score, SCORE_DECIMALS)}
        if self.alternatives:
            found["alternatives"] = list(self.alternatives)
        return found


@dataclass(frozen=True)
class Ranked:
    """One search's hits, best first, with the ranking that chose them."""

    hits: list[SearchHit]
    ranking: Literal["lexical", "hybrid"]
    fallback: str | None = None
    """Why hybrid ranking was asked for and lexical answered (one of telemetry's FALLBACK_KINDS)."""


@dataclass(frozen=True)
class _State:
    """The index for one catalog version: searches read one state, and a new catalog version replaces the
    whole state at once (never a mix of two versions). Document ids are the index's slots."""

    catalog: ToolCatalog
    index: LexicalIndex
    blend_index: LexicalIndex
    """The same index scoring with BLEND_BM25_K1: what hybrid ranking blends (`index` when there is no blend)."""
    twins: dict[int, frozenset[int]]
    """Each tool's equivalents on other servers (`_equivalents`), for tools that have any."""


class ToolSearchEngine:
    """BM25 search and expand_tools over a catalog that may change.

    Args:
        catalog: a catalog, or a callable returning the current one (e.g. over a live manager). The
            index is rebuilt when the returned catalog's version changes, and only then.
        settings: `mcp.tool_search` (defaults when omitted).
        ranking: overrides `settings.ranking`. "lexical" is BM25. "hybrid" blends in the embedding
            models when they load, and is BM25 otherwise (`ranking_used` says which is in effect).
        blend: an explicit `ScoreBlend` (tests, custom scorers); otherwise found for hybrid.
        embeddings: the embedding runtime hybrid ranking uses (build one per process with
            `EmbeddingRuntime.from_settings(settings)` and share it: the model loads once). Default, for
            hybrid ranking: the engine builds its own from `Settings()` (bernstein.yaml and
            `BERNSTEIN_...` overrides apply; vectors by default in `<user cache dir>/orchestrator/embeddings`,
            never memory only) and owns it: call `close()` when done.
        telemetry: where search and expand spans go (default: OpenTelemetry's global providers); counting
            searches is the caller's: `MetaTools` counts them on this one unless given another.
        evidence: learned evidence from search traces (`_evidence.TraceEvidence`); None ranks by the
            tools' own text only. While no tool has evidence, rankings are exactly those without it.
    """

    def __init__(
        self,
        catalog: ToolCatalog | Callable[[], ToolCatalog],
        settings: ToolSearchSettings | None = None,
        *,
        ranking: str | None = None,
        blend: ScoreBlend | None = None,
        embeddings: EmbeddingRuntime | None = None,
        telemetry: Telemetry | None = None,
        evidence: EvidenceSource | None = None,
    ) -> None:
        self._settings = settings or ToolSearchSettings()
        self._evidence = evidence
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self._source: Callable[[], ToolCatalog] = _constant(catalog) if isinstance(catalog, ToolCatalog) else catalog
        requested = ranking or self._settings.ranking
        if requested not in ("lexical", "hybrid"):
            raise ValueError(f"ranking must be lexical or hybrid, not {requested!r}")
        self.ranking = requested
        """The ranking asked for."""
        self._blend, self._fallback, self._owned_embeddings = (
            (blend, None, None)
            if blend is not None or requested == "lexical"
            else _find_blend(self._settings, requested, embeddings)
        )
        # Learned evidence redoes the blend when it can (checked once: a runtime protocol check is slow).
        self._redoable = self._blend if isinstance(self._blend, EvidenceBlend) else None
        self._blend_failure_logged = False
        self._evidence_failure_logged = False
        self._state: _State | None = None
        self._analyzer = Analyzer()  # kept across rebuilds: a changed catalog re-analyses only new text
        self._lock = threading.Lock()
        self._spelled: tuple[_State, NameSpellings, NameSpellings] | None = None
        self._spelling_lock = threading.Lock()  # not `_lock`: counting names must not hold up searches
        self.index_builds = 0
        """How many times the index was built or updated (once per catalog version seen)."""

    @property
    def settings(self) -> ToolSearchSettings:
        return self._settings

    @property
    def ranking_used(self) -> Literal["lexical", "hybrid"]:
        """The ranking in effect: "hybrid" only when a blend is available (and its model did not fail)."""
        return "hybrid" if self._blend is not None and getattr(self._blend, "available", True) else "lexical"

    def warm(self, timeout: float | None = None) -> bool:
        """Build the index and, for hybrid ranking, embed the catalog's uncached tools now, waiting up to
        `timeout` seconds (None: as long as it takes).

        Searches never wait for embeddings (they answer lexically until ready); call this where waiting
        is right: before an evaluation or benchmark, or when a gateway starts. Returns True when searches
        will use the ranking in effect (`ranking_used`).
        """
        self._current()
        wait = getattr(self._blend, "wait_until_ready", None)
        if wait is None:
            return True
        try:
            return bool(wait(timeout))
        except Exception:  # boundary: warming is an optimisation and must not fail the caller
            log.warning("warming the hybrid ranking failed; searches answer lexically", exc_info=True)
            return False

    def close(self) -> None:
        """Close the embedding runtime this engine built for itself (not one passed in as `embeddings`):
        its background embedding stops after the current step and is saved. Idempotent; searches still
        work afterwards, answering lexically (`disabled`)."""
        if self._owned_embeddings is not None:
            self._owned_embeddings.close()

    @property
    def catalog(self) -> ToolCatalog:
        """The current catalog (indexed: the index is brought up to date first)."""
        return self._current().catalog

    def _current(self) -> _State:
        catalog = self._source()
        state = self._state
        if state is not None and state.catalog is catalog:
            return state
        with self._lock:
            state = self._state
            if state is None or state.catalog is not catalog:
                state = self._state = self._index(catalog, state)
        return state

    def _index(self, catalog: ToolCatalog, previous: _State | None) -> _State:
        """The state for `catalog`: the previous one when the content is the same, else the previous index
        updated with the entries that changed (`ToolCatalog.changes`), or a fresh index when there is no
        previous one or most entries changed."""
        change = previous.catalog.changes(catalog) if previous is not None else None
        if previous is not None and (
            change == ([], []) or (change is None and previous.catalog.version == catalog.version)
        ):
            return dataclasses.replace(previous, catalog=catalog)
        self.index_builds += 1
        index = None
        stale = previous is not None and len(self._analyzer.vocabulary) > (
            STALE_VOCABULARY * previous.index.terms() + STALE_VOCABULARY_SLACK
        )
        if stale:  # terms of texts long gone: a fresh analyzer numbers the live ones anew (same scores)
            self._analyzer = Analyzer()
        elif previous is not None and change is not None and len(change[0]) + len(change[1]) <= len(catalog) // 2:
            index = previous.index.updated(*change)  # None when a fresh build is cheaper
        if index is None:
            index = LexicalIndex(catalog.entries, self._analyzer)
        # Equivalent tools are only looked for when results fold them (a tenth of a 10,000-tool build).
        twins = _equivalents(index) if self._settings.group_equivalents else {}
        blend_index = index.with_k1(BLEND_BM25_K1) if self._blend is not None else index
        if self._blend is not None:
            index.server_names()  # what hybrid ranking's server preference reads, found now rather than in a search
            self._blend.prepare(catalog)
        return _State(catalog, index, blend_index, twins)

    # ------------------------------------------------------------------ search

    def search(self, query: str, k: int | None = None) -> list[SearchHit]:
        """The best `k` tools for `query` (default `search_limit`), best first; [] is a miss (`rank`)."""
        return self.rank(query, k).hits

    def rank(self, query: str, k: int | None = None) -> Ranked:
        """The best `k` tools for `query` (default `search_limit`), best first, and the ranking that chose them.

        An exact qualified or bare tool name comes first without ranking, and `select:A,B` returns exactly
        those tools. Otherwise BM25, blended with embeddings for hybrid ranking; ties are broken by
        qualified name. Counting searches is the caller's (`MetaTools` emits one event per search).

        Raises:
            SearchQueryError: the query is empty, over MAX_QUERY_CHARS, or k is below 1.
        """
        if not isinstance(query, str) or not query.strip():
            raise SearchQueryError("tool_search query is empty: describe the tool you need in a few words")
        if len(query) > MAX_QUERY_CHARS:
            raise SearchQueryError(
                f"tool_search query is {len(query):,} characters; the limit is {MAX_QUERY_CHARS:,}: "
                "describe the tool you need in a few words"
            )
        limit = self._settings.search_limit if k is None else k
        if limit < 1:
            raise SearchQueryError(f"tool_search limit must be at least 1, got {limit}")
        with self.telemetry.span("tool_search", limit=limit) as span:
            ranked = self._search(self._current(), query.strip(), limit)
            span.set_attribute("ranking", ranked.ranking)
        return ranked

    def _search(self, state: _State, query: str, limit: int) -> Ranked:
        """The hits, the ranking that produced them, and why hybrid ranking fell back (or None)."""
        index = state.index
        if query[: len(SELECT_PREFIX)].lower() == SELECT_PREFIX:
            names = [name.strip() for name in query[len(SELECT_PREFIX) :].split(",")]
            chosen = list(dict.fromkeys(doc for name in names if name for doc in self._exact(state, name)[:1]))
            return Ranked([_hit(index.entry(doc), 1.0) for doc in chosen[:limit]], "lexical", None)
        exact = self._exact(state, query)
        group = self._settings.group_equivalents and bool(state.twins)
        depth = limit + len(exact) + (limit * GROUP_DEPTH_FACTOR if group else 0)
        scores, candidates, ranking, fallback = self._scores(state, query, depth)
        ranked = [(doc, score) for doc, score in index.top(scores, candidates, depth) if doc not in exact]
        folded: dict[int, list[int]] = {doc: [] for doc in exact}
        rest: list[tuple[int, float]] = []
        for doc, score in ranked:
            twins = state.twins.get(doc, frozenset()) if group else frozenset()
            kept = next((other for other in folded if other in twins), None)
            if kept is not None:
                folded[kept].append(doc)
            elif len(folded) < limit:
                folded[doc] = []
                rest.append((doc, score))
        best = max((score for _doc, score in rest), default=0.0)
        # Exact matches outrank everything, and their score says so without leaving JSON's number range.
        first = [_hit(index.entry(doc), float(max(best, 0.0) + 1.0)) for doc in exact[:limit]]
        others = [
            _hit(index.entry(doc), score, [index.entry(twin).name for twin in folded[doc]]) for doc, score in rest
        ]
        return Ranked(first + others, ranking, fallback)

    @staticmethod
    def _exact(state: _State, name: str) -> list[int]:
        """Document ids of the tools `name` names exactly (qualified name, alias or bare name)."""
        slots = state.index.slots()
        return [int(slots[state.catalog.position(entry.name)]) for entry in state.catalog.matches(name)]

    def _scores(
        self, state: _State, query: str, depth: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, Literal["lexical", "hybrid"], str | None]:
        """Scores for every document, the ids that may be returned (among the best `depth`, if given), the
        ranking used and the fallback kind: the one place ranking happens. A blend that raises leaves the
        lexical ranking (fail open).

        A query over LONG_QUERY_CHARS is ranked step by step (`_long_scores`): each tool scores its best
        step, and the blend embeds only the steps that match some tool best. The blend gets BM25 with
        BLEND_BM25_K1 (`state.blend_index`); lexical ranking, fail-open included, is BM25 with BM25_K1."""
        learned = self._learned(state, query)
        if self._blend is None:
            return *self._lexical(state, query, learned, depth), "lexical", self._fallback
        scores, candidates, focus, terms = _lexical_scores(state.blend_index, query)
        # A blend (and learned evidence) reads the catalog's entries by position, the index by slot.
        slots = state.index.slots()
        ordered, near = scores[slots], np.sort(state.index.positions()[candidates])
        # Learned evidence with vectors moves tools' vectors before the blend: the blend hands it the embedded query.
        moving = self._redoable if learned is not None and learned.has_vectors else None
        try:
            if learned is not None and moving is not None:
                parts = moving.query_parts(focus, ordered.shape[0])
                blended, admitted = learned.hybrid_with_vectors(terms, parts, moving.reblend, ordered, near)
            else:
                blended, admitted = self._blend.blend(focus, ordered, near)
                if learned is not None:
                    blended, admitted = learned.hybrid(terms, blended, admitted)
        except SemanticUnavailable as exc:  # logged once by the scorer; counted here on every search
            kind = exc.kind if exc.kind in FALLBACK_KINDS else "blend_failed"
            return *self._lexical(state, query, learned, depth), "lexical", kind
        except Exception:  # boundary: a ranking failure must never reach the agent
            if not self._blend_failure_logged:
                self._blend_failure_logged = True
                log.warning("hybrid ranking failed; answering with lexical ranking", exc_info=True)
            return *self._lexical(state, query, learned, depth), "lexical", "blend_failed"
        by_slot = np.zeros(state.index.capacity, dtype=np.float64)
        by_slot[slots] = blended
        blended, admitted = by_slot, slots[admitted]
        if focus is not query:
            # A long request: the model saw only its best steps, so its opinion counts less here.
            top = float(scores[candidates].max()) if candidates.size else 0.0
            lexical = np.maximum(scores, 0.0) / top if top > 0 else np.zeros_like(scores)
            blended = (1.0 - LONG_BLEND_SHARE) * lexical + LONG_BLEND_SHARE * blended
        else:
            # The tools of a server the request names come first among near-equivalents (a long request
            # names many servers, one per step, so it gets no such preference).
            blended = blended + NAMED_SERVER_BONUS * state.index.named(terms)
        return blended, admitted, "hybrid", None

    def _learned(self, state: _State, query: str) -> LearnedEvidence | None:
        """The learned evidence for this search: None without a source, for a long request (ranked step by
        step on its own text), or while no tool has evidence. A failing source ranks without it."""
        if self._evidence is None or len(query) > LONG_QUERY_CHARS:
            return None
        try:
            return self._evidence.current(state.catalog, state.index, vectors=self._redoable is not None)
        except Exception:  # boundary: learned evidence is an addition; the tools' own text still ranks
            if not self._evidence_failure_logged:
                self._evidence_failure_logged = True
                log.warning("learned evidence failed; ranking by the tools' own text", exc_info=True)
            return None

    @staticmethod
    def _lexical(
        state: _State, query: str, learned: LearnedEvidence | None, depth: int | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """BM25 with BM25_K1 (lexical ranking and hybrid's fail-open answer), learned evidence added; the
        candidates are those that can be among the best `depth` (every one for None)."""
        # Learned evidence moves scores after BM25, so it needs every candidate.
        within = depth if learned is None else None
        scores, candidates, _focus, terms = _lexical_scores(state.index, query, within)
        if learned is not None:
            scores, candidates = learned.lexical(terms, scores, candidates, state.index.slots())
        return scores, candidates

    # ------------------------------------------------------------------ expand

    def expand_tools(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """Full definitions (`name`, `description`, `input_schema`) for `names`, in the order asked.

        Qualified names, aliases and bare tool names are accepted; repeats are ignored.

        Raises:
            ExpandError: no names, or more distinct names than `max_expand`.
            ToolNotFoundError: a name the catalog does not hold (lists the closest known names).
        """
        if isinstance(names, str):
            names = [names]
        wanted = list(dict.fromkeys(str(name).strip() for name in names if str(name).strip()))
        if not wanted:
            raise ExpandError("expand_tools needs at least one tool name")
        limit = self._settings.max_expand
        if len(wanted) > limit:
            raise ExpandError(
                f"expand_tools was asked for {len(wanted)} tools; the limit is {limit} per call "
                "(mcp.tool_search.max_expand): ask only for the tools you will call"
            )
        with self.telemetry.span("expand_tools", count=len(wanted)):
            state = self._current()
            chosen: dict[int, None] = {}
            for name in wanted:
                docs = self._exact(state, name)
                if not docs:
                    raise ToolNotFoundError(name, self._closest(state, name))
                chosen.setdefault(docs[0])
            return [state.index.entry(doc).definition() for doc in chosen]

    def _spellings(self, state: _State) -> tuple[NameSpellings, NameSpellings]:
        """The qualified and the bare tool names of `state`'s catalog, counted for spelling suggestions once
        per catalog version (on the first unknown name asked for)."""
        with self._spelling_lock:
            cached = self._spelled
            if cached is None or cached[0] is not state:
                entries = state.catalog.entries
                spellings = NameSpellings([entry.name for entry in entries]), NameSpellings([e.tool for e in entries])
                cached = self._spelled = (state, *spellings)
            return cached[1], cached[2]

    def closest(self, name: str) -> list[str]:
        """Known names nearest to an unknown `name`, for corrective errors (expand_tools, call_tool)."""
        return self._closest(self._current(), name)

    def _closest(self, state: _State, name: str) -> list[str]:
        """Known names nearest to `name`: by spelling, else by what its words are about."""
        qualified, tools = self._spellings(state)
        by_spelling = qualified.close_matches(name, SUGGESTIONS, _SUGGESTION_CUTOFF)
        bare = tools.close_matches(name, SUGGESTIONS, _SUGGESTION_CUTOFF)
        index = state.index
        suggestions = list(
            dict.fromkeys([*by_spelling, *(index.entry(self._exact(state, tool)[0]).name for tool in bare)])
        )
        if not suggestions:
            scores, candidates = index.scores(index.query_terms(name))
            suggestions = [index.entry(doc).name for doc, _ in index.top(scores, candidates, SUGGESTIONS)]
        return suggestions[:SUGGESTIONS]


_STEP_BREAK = re.compile(r"(?<=[.?!;])\s+|\n+")
"""Where a request's steps end: after sentence punctuation or a semicolon, and at line breaks."""


def request_steps(query: str) -> list[str]:
    """The steps of a long request: sentences and lines, each cut every STEP_WORDS words, one-word
    fragments ("Thanks.") dropped, at most MAX_STEPS (adjacent steps merged evenly beyond that)."""
    steps: list[str] = []
    for part in _STEP_BREAK.split(query):
        words = part.split()
        if len(words) < 2:
            continue
        steps.extend(" ".join(words[i : i + STEP_WORDS]) for i in range(0, len(words), STEP_WORDS))
    if not steps:
        return [" ".join(query.split())]
    if len(steps) > MAX_STEPS:
        size = -(-len(steps) // MAX_STEPS)
        steps = [" ".join(steps[i : i + size]) for i in range(0, len(steps), size)]
    return steps


def _lexical_scores(
    index: LexicalIndex, query: str, within: int | None = None
) -> tuple[np.ndarray, np.ndarray, str, list[str]]:
    """BM25 scores of `query` for every document, its candidates (with `within`, only those that can be
    among the best `within`), the text a blend embeds (a long request's best steps, `_long_scores`; else
    the query) and the query's terms ([] for a long request)."""
    if len(query) > LONG_QUERY_CHARS:
        return (*_long_scores(index, query), [])
    terms = index.query_terms(query)
    return (*index.scores(terms, within), query, terms)


def _long_scores(index: LexicalIndex, query: str) -> tuple[np.ndarray, np.ndarray, str]:
    """Lexical scores of a long request, its candidates, and the text the blend embeds.

    Each tool scores the BM25 of its best step: a pasted task whose tools are each named in one step
    finds every one of them, where the whole text's words would favour the tools its main topic repeats.
    Candidates are the tools sharing a word with any step. The blend gets the MAX_EMBEDDED_STEPS steps
    with the highest best score, in their order, one per line (the blend embeds line by line).
    """
    analysed = _within_reads(index, request_steps(query))
    steps = [step for step, _ in analysed]
    # Steps with the same words score the same: each is read once (a request repeating one line of common
    # words 96 times read their postings 96 times, 236 ms at 100,000 tools).
    scored: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}
    keys: list[tuple[str, ...]] = []
    for _, terms in analysed:
        key = tuple(sorted(terms))
        if key not in scored:
            scored[key] = index.scores(terms)
        keys.append(key)
    strength_of = {key: float(s[c].max()) if c.size else 0.0 for key, (s, c) in scored.items()}
    strength = [strength_of[key] for key in keys]
    top = max(strength)
    best = np.full(index.capacity, -np.inf)
    matched = np.zeros(index.capacity, dtype=bool)
    for (step_scores, step_candidates), step_best in zip(scored.values(), strength_of.values(), strict=True):
        if not step_candidates.size:
            continue
        matched[step_candidates] = True
        if step_best <= 0:  # words in most tools of a small catalog: BM25Okapi scores them <= 0
            continue
        weight = (step_best / top) ** STEP_STRENGTH_POWER / step_best
        best[step_candidates] = np.maximum(best[step_candidates], step_scores[step_candidates] * weight)
    scores = np.where(np.isfinite(best), best, 0.0)
    chosen = sorted(sorted(range(len(steps)), key=lambda i: -strength[i])[:MAX_EMBEDDED_STEPS])
    return scores, np.flatnonzero(matched), "\n".join(steps[i] for i in chosen)


def _within_reads(index: LexicalIndex, steps: list[str]) -> list[tuple[str, list[str]]]:
    """`steps` with their query terms, adjacent ones merged pair by pair until scoring them reads at most
    LONG_QUERY_READS postings entries (each step reads its words' postings once; merged, a word the two share
    is read once)."""
    while True:
        analysed = [(step, index.query_terms(step)) for step in steps]
        if len(steps) == 1 or sum(index.reads(terms) for _, terms in analysed) <= LONG_QUERY_READS:
            return analysed
        steps = [" ".join(steps[i : i + 2]) for i in range(0, len(steps), 2)]


def _constant(catalog: ToolCatalog) -> Callable[[], ToolCatalog]:
    """A catalog source that always gives `catalog` (a fixed catalog never re-indexes)."""

    def source() -> ToolCatalog:
        return catalog

    return source


def _hit(entry: ToolEntry, score: float, alternatives: Sequence[str] = ()) -> SearchHit:
    return SearchHit(entry.name, entry.server, entry.tool, entry.summary, score, tuple(alternatives))


def _equivalents(index: LexicalIndex) -> dict[int, frozenset[int]]:
    """Tools offered by several servers: same tool name on another server, and descriptions that share at
    least EQUIVALENT_OVERLAP of the shorter one's words (with or without parameter names), each word
    weighted by its idf in the catalog, so generic words ("get", "list", "specific") count little and the
    words that set two tools apart ("baseball" against "rugby") count most.

    Pairs, not groups: a hit folds only the lower-ranked tools equivalent to itself.
    """
    idf: dict[str, float] = dict(index.bm25.idf) if index.bm25 is not None else {}
    top = max(idf.values(), default=1.0)
    by_name: dict[str, list[int]] = {}
    entries = {doc: index.entry(doc) for doc in index.slots().tolist()}
    for doc, entry in entries.items():
        by_name.setdefault(entry.tool.lower(), []).append(doc)
    twins: dict[int, set[int]] = {}
    for docs in by_name.values():
        if len(docs) < 2:
            continue
        words = {doc: _description_words(entries[doc], index.analyzer) for doc in docs}
        for i, a in enumerate(docs):
            for b in docs[i + 1 :]:
                if entries[a].server != entries[b].server and any(
                    _overlap(x, y, idf, top) >= EQUIVALENT_OVERLAP for x, y in zip(words[a], words[b], strict=True)
                ):
                    twins.setdefault(a, set()).add(b)
                    twins.setdefault(b, set()).add(a)
    return {doc: frozenset(found) for doc, found in twins.items()}


def _description_words(entry: ToolEntry, analyzer: Analyzer) -> tuple[set[str], set[str]]:
    """A tool's description terms, alone and with its parameter names (stems only, no exact forms)."""
    properties = entry.input_schema.get("properties") if isinstance(entry.input_schema, dict) else None
    names = " ".join(map(str, properties)) if isinstance(properties, dict) else ""
    description = entry.description or ""
    return tuple(  # type: ignore[return-value]
        {term for term in analyzer.terms(text)[:EQUIVALENT_WORDS] if not term.startswith(FORM_PREFIX)}
        for text in (description, f"{description} {names}")
    )


def _overlap(a: set[str], b: set[str], idf: dict[str, float], top: float) -> float:
    """idf-weighted share of the shorter word set found in the other; 0 when a set is too short to say
    (EQUIVALENT_MIN_WORDS). BM25Okapi's idf can be 0 or negative for words in most tools: floored; a
    word the index does not know weighs `top`, the highest idf."""
    if min(len(a), len(b)) < EQUIVALENT_MIN_WORDS:
        return 0.0
    weight = lambda term: max(idf.get(term, top), _IDF_FLOOR)  # noqa: E731
    return sum(map(weight, a & b)) / min(sum(map(weight, a)), sum(map(weight, b)))


def _find_blend(
    settings: ToolSearchSettings, ranking: str, embeddings: EmbeddingRuntime | None
) -> tuple[ScoreBlend | None, str | None, EmbeddingRuntime | None]:
    """The embedding blend for hybrid ranking, or None and why searches stay lexical; and the
    runtime built here when none was given (the engine owns and closes it).

    `create_blend` returns the blend, or raises `SemanticUnavailable` (after logging why, once per
    runtime) when hybrid ranking cannot run (`disabled`, `missing_extra`, a model that failed to load):
    the engine answers lexically and counts that kind on every search.
    """
    owned = None
    try:
        if embeddings is None:
            from .._config import Settings
            from ._embedding import EmbeddingRuntime

            embeddings = owned = EmbeddingRuntime.from_settings(Settings())
        return embeddings.create_blend(settings.model_copy(update={"ranking": ranking})), None, owned
    except SemanticUnavailable as exc:
        return None, exc.kind if exc.kind in FALLBACK_KINDS else "blend_failed", owned
    except Exception:  # boundary: an optional ranking must never stop the engine from being built
        log.warning("hybrid ranking could not be set up; answering with lexical ranking", exc_info=True)
        return None, "load_failed", owned
