"""Spelling suggestions for unknown tool names (`search/_spelling.py`): difflib's answer, at bounded cost."""

from __future__ import annotations

import difflib
import random
from pathlib import Path

import pytest

from orchestrator import ToolCatalog, ToolSearchEngine
from orchestrator.protocols.mcp._catalog import read_snapshot
from orchestrator.search._spelling import MAX_CANDIDATES, NameSpellings


def typos(names: list[str], count: int, seed: int) -> list[str]:
    """Names with one character added, dropped or replaced (some with non-ASCII or a lone surrogate)."""
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        base = rng.choice(names)
        at, op = rng.randrange(len(base)), rng.random()
        found.append(base[:at] + (rng.choice("abxz_-é\ud800") if op < 0.6 else "") + base[at + (op > 0.3) :])
    return found


def test_suggestions_are_difflibs_own_for_a_catalog_of_real_size(shared_data: Path) -> None:
    catalog = ToolCatalog.from_lists(read_snapshot(shared_data / "catalogs"))
    for names in ([entry.name for entry in catalog], list(dict.fromkeys(entry.tool for entry in catalog))):
        spellings = NameSpellings(names)
        for name in typos(names, 80, seed=len(names)):
            assert spellings.close_matches(name, 3, 0.6) == difflib.get_close_matches(name, names, 3, 0.6), name


def test_a_large_catalog_compares_an_unknown_name_with_few_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by red-teaming: difflib read every name, so one mistyped name cost 1 s of a shared worker thread
    at 10,000 tools and 8 s at 100,000 (14 s for a name built to pass difflib's quick filters)."""
    rng = random.Random(7)
    words = ["get", "list", "create", "user", "repo", "issue", "file", "time", "search", "update", "delete"]
    lists: dict[str, list[dict[str, object]]] = {}
    for n in range(20_000):
        tool = {"name": f"{'_'.join(rng.sample(words, 3))}_{n}", "inputSchema": {"type": "object"}}
        lists.setdefault(f"srv-{n % 500}", []).append(tool)
    engine = ToolSearchEngine(ToolCatalog.from_lists(lists), ranking="lexical")
    names = [entry.name for entry in engine.catalog]
    compared = 0
    ratio = difflib.SequenceMatcher.ratio

    def counted(self: difflib.SequenceMatcher[str]) -> float:
        nonlocal compared
        compared += 1
        return ratio(self)

    monkeypatch.setattr(difflib.SequenceMatcher, "ratio", counted)
    assert engine.closest(names[12_345][:-1] + "q")[0] == names[12_345]
    engine.closest("".join(sorted(names[0])))  # every character of a typical name: passes difflib's quick filters
    # Two names, each looked up among qualified and bare names, at most MAX_CANDIDATES each time; difflib
    # computes `ratio` twice for a name it keeps.
    assert compared <= 2 * 2 * 2 * MAX_CANDIDATES < len(names)


def test_expand_tools_names_the_closest_tools_of_a_changed_catalog() -> None:
    lists = {"git": [{"name": "git_status", "inputSchema": {"type": "object"}}]}
    engine = ToolSearchEngine(lambda: catalog)
    catalog = ToolCatalog.from_lists(lists)
    assert engine.closest("git_statsu") == ["git__git_status"]
    catalog = ToolCatalog.from_lists({**lists, "gh": [{"name": "git_stats", "inputSchema": {"type": "object"}}]})
    assert set(engine.closest("git_statsu")[:2]) == {"git__git_status", "gh__git_stats"}  # counted again
