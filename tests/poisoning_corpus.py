"""The tool-poisoning corpora's format (one attack a line, tests/data/poisoning/README.md), read the same way
by tests/test_poisoning.py and benchmarks/poisoning.py."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from orchestrator.protocols.mcp._poisoning import scan_tool

CORPUS_KEYS = frozenset(
    {
        "id",
        "attack_class",
        "payload_location",
        "source",
        "notes",
        "payload_in_description",
        "extra_fields",
        "server",
        "siblings",
    }
)
"""The corpus's own keys: every other key of a line is part of the tool."""
ATTACK_SETS = ("heldout", *(f"blind{n}" for n in ("", *range(2, 18))))
"""The attack sets written for this project (tests/data/poisoning/<name>.jsonl), in the order they were written."""
BENIGN_SETS = tuple(f"hard-benign{n}" for n in ("", *range(2, 16)))
"""The legitimate near-miss sets written with them."""


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def tool_of(row: dict[str, Any]) -> dict[str, Any]:
    """The tool as a server would list it: every key but the corpus's own, extra top-level keys included."""
    tool = {key: value for key, value in row.items() if key not in CORPUS_KEYS}
    tool.update(row.get("extra_fields") or {})
    return tool


def row_findings(row: dict[str, Any]) -> tuple[Any, ...]:
    """The detector's findings for one line's tool, listed with the names of its `siblings` (the other tools
    its server lists, which its description may refer to)."""
    return scan_tool(tool_of(row), own=row.get("siblings", ()))


def detection(rows: list[dict[str, Any]]) -> tuple[dict[str, tuple[int, int]], dict[str, list[str]]]:
    """(found, total) per attack class, and the ids missed per class."""
    found: Counter[str] = Counter()
    total: Counter[str] = Counter()
    missed: dict[str, list[str]] = {}
    for row in rows:
        total[row["attack_class"]] += 1
        if row_findings(row):
            found[row["attack_class"]] += 1
        else:
            missed.setdefault(row["attack_class"], []).append(row["id"])
    return {kind: (found[kind], total[kind]) for kind in sorted(total)}, missed
