"""Leave-one-set-out check of the hybrid defaults (`BLEND_BM25_K1`, `MULTILINGUAL_SHARE`, `hybrid_weight`,
`semantic_floor`).

    .venv/bin/python benchmarks/hybrid_cv.py [--cache DIR]

Each set (stabletoolbench, api-bank, metatool, mcp-catalogs) is scored once as `semantic_probe.py` scores it
(the engine's BM25, the engine's tool texts and sentence vectors, exactly the engine's blend and floor);
each model's cosines are kept apart, so other shares of USE multilingual v3 are tried without embedding
again, and the blended BM25 is recomputed for each k1 (same terms, same matches). Then, for each set held
out, k1, share, weight and floor are chosen on the other three and measured on it. Three choice rules: the
best mean hit@5 over the three (the one the defaults follow), the best mean of hit@1 and hit@5, and the
best worst-set gain in hit@5 over lexical. The grid is printed too, so a choice can be checked against
every set's current figure, and what each rule picks on all four sets. About 4 minutes here."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import platformdirs

from _common import add_results_flag, run_recorded, table
from orchestrator import SemanticScorer, ToolSearchSettings, ToolVectors
from orchestrator.search._tuning import BLEND_BM25_K1, MULTILINGUAL_SHARE
from semantic_probe import Scored, at_share, report, score_set, with_blend_k1

SETS = ("stabletoolbench", "api-bank", "metatool", "mcp-catalogs")
K1S = [1.2, 1.5, 2.0, 3.0]
SHARES = [0.0, 0.3, 0.4, 0.5, 0.6]
WEIGHTS = [round(w, 2) for w in np.arange(0.45, 0.7501, 0.05)]
FLOORS = [0.1, 0.15, 0.2, 0.25, 0.3]
Setting = tuple[float, float, float, float]
"""(k1, share, weight, floor)"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=Path(platformdirs.user_cache_dir("orchestrator")) / "probe")
    add_results_flag(parser)
    args = parser.parse_args()
    scorer = ToolVectors(SemanticScorer.load(), args.cache)
    sets: dict[str, Scored] = {name: score_set(name, scorer, False) for name in SETS}
    lexical = {name: report(scored, None, 0.25) for name, scored in sets.items()}
    grid: dict[Setting, dict[str, tuple[float, float]]] = {}
    for k1 in K1S:
        rescored = {name: with_blend_k1(scored, k1) for name, scored in sets.items()}
        for share in SHARES:
            mixed = {name: at_share(scored, share) for name, scored in rescored.items()}
            for weight in WEIGHTS:
                for floor in FLOORS:
                    grid[(k1, share, weight, floor)] = {
                        name: (r.hit_at_1, r.hit_at_k)
                        for name, r in ((n, report(s, weight, floor)) for n, s in mixed.items())
                    }
    search = ToolSearchSettings()
    defaults = (BLEND_BM25_K1, MULTILINGUAL_SHARE, search.hybrid_weight, search.semantic_floor)
    rows = []
    for setting, found in grid.items():
        mark = " (default)" if setting == defaults else ""
        k1, share, weight, floor = setting
        rows.append(
            [
                f"k1 {k1:.1f} share {share:.1f} w {weight:.2f} floor {floor:.2f}{mark}",
                *(f"{found[n][0]:.3f} / {found[n][1]:.3f}" for n in SETS),
            ]
        )
    rows.append(["lexical", *(f"{lexical[n].hit_at_1:.3f} / {lexical[n].hit_at_k:.3f}" for n in SETS)])
    print("Grid (hit@1 / hit@5)")
    table(["setting", *SETS], rows)

    def mean_hit5(found: dict[str, tuple[float, float]], names: list[str]) -> float:
        return float(np.mean([found[n][1] for n in names]))

    def mean_rule(found: dict[str, tuple[float, float]], names: list[str]) -> float:
        return float(np.mean([(found[n][0] + found[n][1]) / 2 for n in names]))

    def worst_gain(found: dict[str, tuple[float, float]], names: list[str]) -> float:
        return min(found[n][1] - lexical[n].hit_at_k for n in names)

    rows = []
    rules = (
        ("mean hit@5", mean_hit5),
        ("mean of hit@1 and hit@5", mean_rule),
        ("worst-set hit@5 gain over lexical", worst_gain),
    )
    for rule_name, rule in rules:
        for held in SETS:
            train = [n for n in SETS if n != held]
            chosen = max(grid, key=lambda key: (round(rule(grid[key], train), 4), -abs(key[2] - 0.6)))
            h1, h5 = grid[chosen][held]
            d1, d5 = grid[defaults][held]
            picked = " / ".join(f"{value:.2f}" for value in chosen)
            rows.append([rule_name, held, picked, f"{h1:.3f} / {h5:.3f}", f"{d1:.3f} / {d5:.3f}"])
    print("\nLeave one set out (chosen on the other three, measured on the held-out set; hit@1 / hit@5)")
    table(["rule", "held out", "chosen k1 / share / w / floor", "held-out figures", "defaults on it"], rows)
    print("\nChosen on all four sets (k1 / share / w / floor):")
    for rule_name, rule in rules:
        chosen = max(grid, key=lambda key: (round(rule(grid[key], list(SETS)), 4), -abs(key[2] - 0.6)))
        print(f"  {rule_name}: {' / '.join(f'{value:.2f}' for value in chosen)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_recorded(main))
