"""What the benchmarks share: data paths, the plain BM25 baseline, replicated catalogs, verdicts, and
`--write-results`, which records what a run printed in benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import io
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

import numpy as np
from rank_bm25 import BM25Okapi

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from orchestrator import ToolCatalog, ToolEntry  # noqa: E402
from orchestrator.search._evaluation import EvalQuery, evaluate_rankings  # noqa: E402

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


# --------------------------------------------------------------------------- benchmarks/RESULTS.md

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
"""The one file of measured figures: a section per benchmark command, each written by its own run."""
RESULTS_FLAG = "--write-results"
NEW_SECTIONS_MARK = "<!-- new sections are added above this line -->"
"""Sections a file does not hold yet go just above this line (the hand-written history stays below it)."""
_RESULTS_HEADER = f"""\
# Benchmark results

Measured figures, one section per benchmark command. `python benchmarks/<name>.py {RESULTS_FLAG}` runs as
usual and then replaces its command's section with what it printed, stamped with the date, the machine,
the Python version and the commit. Timings depend on the machine and its load: compare sections measured
on the same machine.

{NEW_SECTIONS_MARK}
"""


def add_results_flag(parser: argparse.ArgumentParser) -> None:
    """Declare `--write-results` (read by `run_recorded`, which wraps the script's `main`)."""
    parser.add_argument(
        RESULTS_FLAG,
        action="store_true",
        help=f"also write what this run prints to {RESULTS.relative_to(REPO)} (its command's section)",
    )


def run_recorded(main: Callable[[], int | None]) -> int:
    """Run a benchmark's `main`; with `--write-results` on the command line, what it printed to stdout
    becomes its command's section of RESULTS.md (only when `main` returns: a run that fails to measure
    writes nothing). The section is named by the script and its other arguments, so each variant of a
    benchmark (`retrieval.py --hybrid`, `retrieval.py --long --hybrid`) keeps its own."""
    arguments = sys.argv[1:]
    if RESULTS_FLAG not in arguments:
        return main() or 0
    name = " ".join([Path(sys.argv[0]).name, *(argument for argument in arguments if argument != RESULTS_FLAG)])
    load_before = _load_average()
    started = datetime.datetime.now().astimezone()
    printed = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, printed)):
        code = main() or 0
    stamp = f"{started:%Y-%m-%d %H:%M %Z}, load average {load_before} at the start and {_load_average()} at the end"
    path = results_section(name, printed.getvalue(), when=stamp)
    print(f"\nwrote the section `{name}` of {path}")
    return code


def results_section(name: str, text: str, *, when: str | None = None, path: Path = RESULTS) -> Path:
    """Replace the section between `<!-- begin NAME -->` and `<!-- end NAME -->` of `path` with `text`
    as a code block under a stamp (date, machine, Python, commit); a missing file or section is created.

    Args:
        name: the section's name (by convention the command: `speed.py --hybrid`).
        text: what the run printed, kept as it is.
        when: the stamp's date text (default: now).
        path: the results file (default: benchmarks/RESULTS.md).
    """
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    when = when or f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}"
    body = "\n".join(
        [
            begin,
            f"## `{name}`",
            "",
            f"`python benchmarks/{name}`: {when}; {_machine()}; Python {platform.python_version()}; {_commit()}.",
            "",
            "```text",
            text.strip("\n"),
            "```",
            end,
        ]
    )
    current = path.read_text(encoding="utf-8") if path.exists() else _RESULTS_HEADER
    start, stop = current.find(begin), current.find(end)
    if start >= 0 and stop > start:
        updated = current[:start] + body + current[stop + len(end) :]
    elif NEW_SECTIONS_MARK in current:
        updated = current.replace(NEW_SECTIONS_MARK, f"{body}\n\n{NEW_SECTIONS_MARK}", 1)
    else:
        updated = f"{current.rstrip()}\n\n{body}\n"
    temporary = path.with_suffix(".md.tmp")
    temporary.write_text(updated, encoding="utf-8")
    temporary.replace(path)
    return path


class _Tee(io.TextIOBase):
    """Writes go to the terminal (or wherever stdout went) and into a buffer."""

    def __init__(self, shown: TextIO, kept: io.StringIO) -> None:
        self._shown, self._kept = shown, kept

    def write(self, text: str) -> int:
        self._kept.write(text)
        return self._shown.write(text)

    def flush(self) -> None:
        self._shown.flush()

    def isatty(self) -> bool:
        return bool(self._shown.isatty())


def _machine() -> str:
    """CPU model, logical cores and memory, from /proc (Linux), else what `platform` knows."""
    model, cores, memory = platform.processor() or platform.machine(), os.cpu_count() or 0, ""
    with contextlib.suppress(OSError):
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
        models = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        model = models[0] if models else model
        cores = sum(1 for line in lines if line.startswith("processor")) or cores
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                memory = f", {int(line.split()[1]) / 1024**2:.1f} GiB RAM"
    return f"{model}, {cores} cores{memory}"


def _load_average() -> str:
    with contextlib.suppress(OSError):
        return f"{os.getloadavg()[0]:.2f}"
    return "unknown"


def _commit() -> str:
    """The checked-out commit, and whether tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "commit unknown"
    return f"commit {head}" + (" with uncommitted changes" if changed else "")


@dataclass(frozen=True)
class Figures:
    """hit@1, hit@k and MRR of one ranking on one set or style."""

    hit1: float
    hit5: float
    mrr: float

    def cell(self) -> str:
        return f"{self.hit1:.3f} / {self.hit5:.3f} / {self.mrr:.3f}"


def figures_by_style(
    catalog: ToolCatalog, queries: Sequence[EvalQuery], rankings: Sequence[Sequence[str] | None], k: int
) -> dict[str | None, Figures]:
    """The figures of `rankings` for the whole set (key None) and each style."""
    report = evaluate_rankings(catalog, queries, rankings, k)
    out: dict[str | None, Figures] = {None: Figures(report.hit_at_1, report.hit_at_k, report.mrr)}
    for style, part in report.styles.items():
        out[style] = Figures(part.hit_at_1, part.hit_at_k, part.mrr)
    return out
