"""Read a sweep's runs back and answer its two questions, each with a rule fixed before the numbers are seen.

Q8 (Kaplan et al. 2020; Hoffmann et al. 2022): *under a fixed compute budget, parameters and training should grow
together*, so the loss-optimal model size grows with the budget. Rule, per budget: the sizes whose final held-out
loss is within the tie tolerance of the best (``--loss-tolerance``, widened to two standard errors across seeds)
are that budget's optimum set. Comparing the smallest and the largest budget:
  - supported: every optimal size at the largest budget is larger than every optimal size at the smallest, and
    the optimum never moves down unambiguously between consecutive budgets;
  - not supported: the optimum at the largest budget is unambiguously the same size or smaller;
  - inconclusive: ties make it ambiguous, or the grid's largest (or smallest) size is optimal at every budget, so
    the true optimum lies outside the sizes tried.

Q19 (Kaplan et al. 2020, Li et al. 2020 "Train large, then compress"): *larger models reach a given loss in fewer
steps (tokens), and even in less wall-clock time*. Rule: on each size's learning curve at the largest budget
(seeds averaged), the target is the worst size's best held-out loss, so every size reaches it; tokens (and
seconds) to the target are interpolated on the curve. With ratio r = largest size's cost / smallest size's cost:
  - supported: r <= 1 - margin (and the difference exceeds the widest evaluation interval) and cost falls with size
    (Spearman correlation < 0);
  - not supported: r >= 1 (the largest size needs at least as many tokens / seconds);
  - inconclusive: in between, or fewer than two sizes reach the target.
Wall-clock seconds are training seconds of each run on this machine (with ``--workers`` > 1 runs shared the CPUs).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from ptmlab.scaling.fit import fit_power_law, isoflop_optimum, lower_envelope

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "supported", "not supported", "inconclusive"


# ------------------------------------------------------------------------------------------------ reading runs
def read_curve(run: str | Path) -> list[dict]:
    """A run's held-out loss against step, tokens, FLOPs and training seconds (step 0 included)."""
    from ptmlab.core.rundir import RunDir

    rows = RunDir(run).metrics()
    train = {r["step"]: r for r in rows if "loss" in r and "eval" not in r}
    curve = []
    for r in rows:
        if "eval" not in r or "eval_loss" not in r["eval"]:
            continue
        step = r["step"]
        t = train.get(step, {})
        tokens = t.get("tokens", r.get("tokens", 0 if step == 0 else None))
        if tokens is None:
            continue
        tps = t.get("tokens_per_second") or 0
        curve.append({"step": step, "tokens": tokens, "flops": t.get("flops", 0.0 if step == 0 else None),
                      "seconds": tokens / tps if tps else 0.0, "eval_loss": r["eval"]["eval_loss"]})
    by_step = {c["step"]: c for c in curve}  # a resumed run may log an evaluation twice: keep the last
    return [by_step[s] for s in sorted(by_step)]


def mean_curve(curves: list[list[dict]]) -> list[dict]:
    """Seeds of one size and budget averaged at the steps they share."""
    steps = set.intersection(*[{c["step"] for c in cu} for cu in curves]) if curves else set()
    out = []
    for s in sorted(steps):
        pts = [next(c for c in cu if c["step"] == s) for cu in curves]
        out.append({k: float(np.mean([p[k] for p in pts if p[k] is not None])) if k != "step" else s
                    for k in ("step", "tokens", "flops", "seconds", "eval_loss")})
    return out


# ------------------------------------------------------------------------------------------------ Q8
def _optimum_set(cell: dict[int, tuple[float, float]], tolerance: float) -> list[int]:
    best = min(cell, key=lambda n: cell[n][0])
    out = []
    for n, (loss, se) in cell.items():
        tol = max(tolerance, 2 * math.hypot(se or 0.0, cell[best][1] or 0.0))
        if loss <= cell[best][0] + tol:
            out.append(n)
    return sorted(out)


def optimal_size_verdict(cells: dict[float, dict[int, tuple[float, float]]], tolerance: float) -> dict:
    """``cells``: budget -> {params: (mean final loss, standard error or 0)}. Applies the Q8 rule."""
    budgets = sorted(b for b in cells if len(cells[b]) >= 2)
    optima = {b: _optimum_set(cells[b], tolerance) for b in budgets}
    out = {"optima": {f"{b:.3g}": optima[b] for b in budgets}}
    if len(budgets) < 2:
        return {**out, "verdict": INCONCLUSIVE, "reason": "fewer than two budgets with two or more finished sizes"}
    grid = sorted({n for b in budgets for n in cells[b]})
    first, last = optima[budgets[0]], optima[budgets[-1]]
    if all(grid[-1] in optima[b] for b in budgets):
        return {**out, "verdict": INCONCLUSIVE,
                "reason": "the largest size is optimal at every budget: the optimum lies above the sizes tried"}
    if all(grid[0] in optima[b] for b in budgets):
        return {**out, "verdict": INCONCLUSIVE,
                "reason": "the smallest size is optimal at every budget: the optimum lies below the sizes tried"}
    drops = [(a, b) for a, b in zip(budgets, budgets[1:], strict=False) if min(optima[a]) > max(optima[b])]
    if min(last) > max(first) and not drops:
        return {**out, "verdict": SUPPORTED,
                "reason": f"the optimal size grows from {_sizes(first)} at {budgets[0]:.3g} FLOPs to "
                          f"{_sizes(last)} at {budgets[-1]:.3g} FLOPs"}
    if max(last) <= min(first):
        return {**out, "verdict": NOT_SUPPORTED,
                "reason": f"the optimal size stays at or below {_sizes(first)} ({_sizes(last)} at the largest "
                          f"budget {budgets[-1]:.3g})"}
    return {**out, "verdict": INCONCLUSIVE, "reason": "ties between sizes leave the direction of the optimum open"}


def _sizes(ns: list[int]) -> str:
    return " / ".join(f"{n:,}" for n in ns) + " parameters"


# ------------------------------------------------------------------------------------------------ Q19
def reach(curve: list[dict], target: float, key: str) -> float | None:
    """``key`` (tokens or seconds) at which ``curve`` first gets down to ``target``, interpolated linearly."""
    for a, b in zip(curve, curve[1:], strict=False):
        if b["eval_loss"] <= target:
            if a["eval_loss"] <= target:
                return float(a[key])
            f = (a["eval_loss"] - target) / (a["eval_loss"] - b["eval_loss"])
            return float(a[key] + f * (b[key] - a[key]))
    return None


def faster_verdict(costs: dict[int, float], margin: float, resolution: float = 0.0, unit: str = "tokens") -> dict:
    """``costs``: params -> tokens (or seconds) to the target loss. Applies the Q19 rule."""
    from scipy.stats import spearmanr

    sizes = sorted(n for n, c in costs.items() if c is not None)
    if len(sizes) < 2:
        return {"verdict": INCONCLUSIVE, "reason": "fewer than two sizes reach the target loss"}
    small, large = costs[sizes[0]], costs[sizes[-1]]
    r = large / small if small > 0 else math.inf
    rho = float(spearmanr(sizes, [costs[n] for n in sizes])[0]) if len(sizes) > 2 else (-1.0 if r < 1 else 1.0)
    out = {"ratio": r, "spearman": rho}
    what = f"the largest size needs {r:.2f}x the {unit} of the smallest"
    if r <= 1 - margin and small - large > resolution and rho < 0:
        return {**out, "verdict": SUPPORTED, "reason": what}
    if r >= 1:
        return {**out, "verdict": NOT_SUPPORTED, "reason": what}
    return {**out, "verdict": INCONCLUSIVE, "reason": f"{what}, within the margin of {margin:.0%} or one "
                                                      f"evaluation interval"}


# ------------------------------------------------------------------------------------------------ everything
def analyze(rows: list[dict], curves: dict[str, list[dict]], loss_tolerance: float, margin: float) -> dict:
    """Fits and verdicts from finished ``rows`` (one per run) and their ``curves`` (run name -> curve)."""
    done = [r for r in rows if r.get("status") == "done"]
    groups: dict[tuple[int, float], list[dict]] = defaultdict(list)
    for r in done:
        groups[(r["params"], r["budget"])].append(r)
    cells: dict[float, dict[int, tuple[float, float]]] = defaultdict(dict)
    mean_curves: dict[tuple[int, float], list[dict]] = {}
    for (n, b), rs in groups.items():
        losses = [r["eval_loss"] for r in rs]
        se = float(np.std(losses, ddof=1) / math.sqrt(len(losses))) if len(losses) > 1 else 0.0
        cells[b][n] = (float(np.mean(losses)), se)
        mean_curves[(n, b)] = mean_curve([curves[r["name"]] for r in rs if r["name"] in curves])
    result: dict = {"cells": [{"params": n, "budget": b, "eval_loss": v[0], "se": v[1]}
                              for b in sorted(cells) for n, v in sorted(cells[b].items())]}
    # loss vs compute: the lower envelope of every learning curve
    points = [(c["flops"], c["eval_loss"]) for cu in mean_curves.values() for c in cu if c["flops"]]
    frontier = lower_envelope(points)
    result["frontier"] = [{"flops": x, "eval_loss": y} for x, y in frontier]
    result["fit_compute"] = _fit(frontier)
    # loss vs parameters: each size's best loss in the sweep (its largest budget)
    best_by_size = {}
    for n, b in mean_curves:
        if n not in best_by_size or b > best_by_size[n][0]:
            best_by_size[n] = (b, cells[b][n][0])
    result["fit_params"] = _fit([(n, v[1]) for n, v in sorted(best_by_size.items())])
    # Q8: the loss-optimal size per budget, and its growth exponent N_opt ~ C^a
    q8 = optimal_size_verdict(dict(cells), loss_tolerance)
    opt = {b: isoflop_optimum(list(cells[b]), [v[0] for v in cells[b].values()]) for b in cells if len(cells[b])}
    q8["n_opt"] = [{"budget": b, "params": n, "at_edge": edge} for b, (n, edge) in sorted(opt.items())]
    growth = _fit([(b, n) for b, (n, _) in sorted(opt.items())])
    if growth is not None:  # N_opt = k * C^a: a power law with a negative "exponent"
        growth = {**growth, "a": -growth["exponent"], "a_stderr": growth["stderr"]}
    q8["growth"] = growth
    result["q8"] = q8
    # Q19: tokens and seconds to the worst size's best loss, on the largest budget's curves
    result["q19"] = _q19({n: cu for (n, b), cu in mean_curves.items() if cu and b == max(
        bb for (nn, bb) in mean_curves if nn == n)}, margin)
    result["curves"] = [{"params": n, "budget": b, "points": cu} for (n, b), cu in sorted(mean_curves.items())]
    return result


def _fit(points: list[tuple[float, float]]) -> dict | None:
    pts = [(x, y) for x, y in points if x > 0 and y > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    return fit_power_law([x for x, _ in pts], [y for _, y in pts]).as_dict()


def _q19(by_size: dict[int, list[dict]], margin: float) -> dict:
    if len(by_size) < 2:
        empty = {"verdict": INCONCLUSIVE, "reason": "fewer than two sizes finished"}
        return {"target_loss": None, "tokens": empty, "seconds": empty, "reach": []}
    target = max(min(c["eval_loss"] for c in cu) for cu in by_size.values())
    out: dict = {"target_loss": target, "reach": []}
    for key in ("tokens", "seconds"):
        costs = {n: reach(cu, target, key) for n, cu in by_size.items()}
        interval = max((cu[-1][key] - cu[0][key]) / max(1, len(cu) - 1) for cu in by_size.values())
        out[key] = faster_verdict(costs, margin, resolution=interval, unit=key)
        for n in sorted(costs):
            row = next((r for r in out["reach"] if r["params"] == n), None)
            if row is None:
                row = {"params": n}
                out["reach"].append(row)
            row[key] = costs[n]
    return out
