"""Tool entries counted for the lexical index: each distinct (term, tool) pair with its weighted frequency
(`tool_document`'s numbers, computed with array operations), and each tool's weighted length.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from ._analysis import FIELD_COUNT, Analyzer, FieldWeights, schema_texts
from ._postings import Batch, server_numbers

if TYPE_CHECKING:
    from ..protocols.mcp._catalog import ToolEntry

__all__ = ["count", "gather"]


def count(
    entries: Sequence[ToolEntry], analyzer: Analyzer, weights: FieldWeights, form_weight: float, depth: int
) -> Batch:
    """Distinct (term, document) pairs of `entries` (document i = entries[i]) with weighted frequencies,
    term-major with documents ascending, and each document's weighted length.

    Tools that differ only in their server (the same definition on many servers: replicas, a registry's
    deployments of one server) are counted once and their server's words added per tool, when the weights
    keep every sum exact (then the order words are added in cannot change a frequency).
    """
    bits = _fraction_bits((*weights.values(), form_weight))
    if bits is not None:
        found = _count_shared(entries, analyzer, weights, form_weight, depth, bits)
        if found is not None:
            return found
    terms, docs, freqs = _tokens(*gather(entries, analyzer, depth), weights)
    return _pairs(terms, docs, freqs, len(entries), analyzer, form_weight)


def gather(
    entries: Sequence[ToolEntry], analyzer: Analyzer, depth: int, *, servers: bool = True
) -> tuple[list[np.ndarray], list[int], np.ndarray]:
    """Every tool's texts as term-id arrays, in document and field order (server, name, title,
    description, parameter names, parameter descriptions), their sizes, and how many texts each field has
    per tool. Without `servers`, the server field is left empty."""
    parts: list[np.ndarray] = []
    sizes: list[int] = []
    counts: list[tuple[int, int]] = []
    known = analyzer._texts.get  # the hot loop of an index build: most texts are cached
    for entry in entries:
        names, descriptions = schema_texts(entry.input_schema, depth)
        texts = [
            entry.server if servers else "",
            entry.tool,
            entry.title or "",
            entry.description,
            *names,
            *descriptions,
        ]
        found: list[Any] = list(map(known, texts))
        try:
            lengths = list(map(len, found))
        except TypeError:  # len(None): a text not analysed yet (often only the tool's name)
            found = [part if part is not None else analyzer.ids(text) for part, text in zip(found, texts, strict=True)]
            lengths = list(map(len, found))
        parts += found
        sizes += lengths
        counts.append((len(names), len(descriptions)))
    texts_per_field = np.ones((len(entries), FIELD_COUNT), np.int64)
    if counts:
        texts_per_field[:, 4:] = counts
    return parts, sizes, texts_per_field


def _tokens(
    parts: list[np.ndarray], part_sizes: list[int], texts_per_field: np.ndarray, weights: FieldWeights
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every word's (term id, document, field weight), in document and field order."""
    size = len(texts_per_field)
    sizes = np.array(part_sizes, dtype=np.int64)
    flat = np.concatenate(parts) if parts else np.empty(0, np.int32)
    # float32 holds every sum of eighths below 2**21 exactly, and moves half the bytes of float64.
    part_weights = np.repeat(np.tile(np.array(weights.values(), np.float32), size), texts_per_field.ravel())
    part_docs = np.repeat(np.arange(size, dtype=np.int32), texts_per_field.sum(axis=1))
    return flat, np.repeat(part_docs, sizes), np.repeat(part_weights, sizes)


def _pairs(
    terms: np.ndarray, docs: np.ndarray, freqs: np.ndarray, size: int, analyzer: Analyzer, form_weight: float
) -> Batch:
    """Words (or partial sums) in document order summed per (term, document), exact forms scaled by
    `form_weight`.

    A stable sort by term id alone orders them by (term, document) and puts each pair's words next to each
    other, in the order they came in; their weights are summed per pair (exactly: sums of halves).
    """
    terms_by_id = analyzer.terms_by_id
    terms, docs, frequencies = _aggregated(terms, docs, freqs, len(terms_by_id))
    # Per term id, what its sums are multiplied by: form_weight for an exact form, else 1 (x * 1.0 is x).
    scale = np.where(analyzer.form_flags().astype(bool), form_weight, 1.0)
    frequencies = frequencies.astype(np.float64) * scale[terms]
    starts = np.flatnonzero(_changes(terms))  # a term starts where its id changes
    return Batch(
        terms=[terms_by_id[term] for term in terms[starts].tolist()],
        starts=starts,
        docs=docs.astype(np.int32),
        freqs=frequencies,
        lengths=np.bincount(docs, weights=frequencies, minlength=size),
    )


def _aggregated(
    terms: np.ndarray, docs: np.ndarray, freqs: np.ndarray, vocabulary: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(term, document, summed weight) per distinct pair, term-major, documents ascending."""
    order = _stable_order(terms, vocabulary)
    terms, docs, freqs = terms[order], docs[order], freqs[order]
    firsts = _changes(terms)
    firsts[1:] |= docs[1:] != docs[:-1]
    firsts = np.flatnonzero(firsts)
    if firsts.size:
        freqs = np.add.reduceat(freqs, firsts)
    return terms[firsts], docs[firsts], freqs


def _changes(values: np.ndarray) -> np.ndarray:
    """True where a value differs from the one before it (and at the first)."""
    changed = np.empty(values.size, dtype=bool)
    changed[:1] = True
    np.not_equal(values[1:], values[:-1], out=changed[1:])
    return changed


def _count_shared(
    entries: Sequence[ToolEntry],
    analyzer: Analyzer,
    weights: FieldWeights,
    form_weight: float,
    depth: int,
    bits: int,
) -> Batch | None:
    """`count` for tools sharing their definition: each distinct one's words summed once (server left
    out), then per tool its server's words followed by those sums, summed per pair as `_pairs` sums words.
    None when too few tools share a definition to gain, or a sum might not be exact."""
    shared: dict[tuple[Any, ...], int] = {}
    models: list[ToolEntry] = []
    of_entry: list[int] = []
    for entry in entries:
        # The same objects (a build shares a definition's texts and schema between its tools), same words.
        key = (entry.tool, id(entry.title), id(entry.description), id(entry.input_schema))
        model = shared.setdefault(key, len(models))
        if model == len(models):
            models.append(entry)
        of_entry.append(model)
    if len(models) * 2 > len(entries):
        return None
    tokens = _tokens(*gather(models, analyzer, depth, servers=False), weights)
    m_terms, m_docs, m_sums = _aggregated(*tokens, len(analyzer.terms_by_id))
    by_model = np.argsort(m_docs, kind="stable")  # each model's pairs together, in term order
    m_terms, m_sums = m_terms[by_model], m_sums[by_model]
    m_lengths = np.bincount(m_docs, minlength=len(models))
    servers, entry_server = server_numbers(entries)
    s_ids = [tuple(analyzer.term_ids(server)) for server in servers]
    s_lengths = np.fromiter(map(len, s_ids), np.int64, len(s_ids))
    server_weight = weights.values()[0]
    if (float(m_sums.max(initial=0.0)) + float(s_lengths.max(initial=0)) * server_weight) * 2.0**bits >= 2.0**24:
        return None  # a float32 sum might round: count word by word
    s_total = int(s_lengths.sum())
    source_terms = np.concatenate(
        [np.fromiter(chain.from_iterable(s_ids), np.int32, s_total), m_terms.astype(np.int32)]
    )
    source_weights = np.concatenate([np.full(s_total, server_weight, np.float32), m_sums])
    entry_model = np.asarray(of_entry, dtype=np.int64)
    # Per tool two blocks of the sources: its server's words, then its model's sums.
    starts = np.empty(2 * len(entries), dtype=np.int64)
    lengths = np.empty(2 * len(entries), dtype=np.int64)
    starts[0::2] = (np.cumsum(s_lengths) - s_lengths)[entry_server]
    lengths[0::2] = s_lengths[entry_server]
    starts[1::2] = s_total + (np.cumsum(m_lengths) - m_lengths)[entry_model]
    lengths[1::2] = m_lengths[entry_model]
    picked = _ranges(starts, lengths)
    docs = np.repeat(np.arange(len(entries), dtype=np.int32), lengths[0::2] + lengths[1::2])
    return _pairs(source_terms[picked], docs, source_weights[picked], len(entries), analyzer, form_weight)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of range(start, start + length) for each block."""
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)


def _fraction_bits(weights: tuple[float, ...]) -> int | None:
    """The fewest binary fraction digits that write every weight exactly (at most 8), else None."""
    for bits in range(9):
        if all((weight * 2**bits).is_integer() for weight in weights):
            return bits
    return None


_RADIX_LIMIT = 1 << 16
"""numpy's stable argsort is a radix sort for 16-bit integers (linear time), a merge sort above."""


def _stable_order(term_ids: np.ndarray, vocabulary: int) -> np.ndarray:
    """The permutation sorting `term_ids` stably: by 16-bit digits, low then high (LSD radix), when the
    vocabulary needs more than one."""
    if vocabulary <= _RADIX_LIMIT:
        return np.argsort(term_ids.astype(np.uint16), kind="stable")
    order = np.argsort((term_ids & 0xFFFF).astype(np.uint16), kind="stable")
    high = (term_ids[order] >> 16).astype(np.uint16 if vocabulary <= _RADIX_LIMIT**2 else np.int64)
    return order[np.argsort(high, kind="stable")]
