"""The sweep's figures: the compute frontier, loss against tokens per size, and the iso-FLOP profiles."""

from __future__ import annotations

import numpy as np

from ptmlab.report.html import new_figure


def _colors(keys):
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    keys = sorted(keys)
    return {k: cmap(i / max(1, len(keys) - 1) * 0.9) for i, k in enumerate(keys)}


def frontier_plot(result: dict):
    """Every run's held-out loss against training FLOPs, the lower envelope, and the fitted power law."""
    fig, ax = new_figure(6.4, 4.0)
    colors = _colors({c["params"] for c in result["curves"]})
    labelled = set()
    for c in result["curves"]:
        pts = [p for p in c["points"] if p["flops"]]
        label = f"{c['params']:,} params" if c["params"] not in labelled else None
        labelled.add(c["params"])
        ax.plot([p["flops"] for p in pts], [p["eval_loss"] for p in pts], "-", color=colors[c["params"]],
                alpha=0.7, lw=1, label=label)
    front = result["frontier"]
    if front:
        ax.plot([p["flops"] for p in front], [p["eval_loss"] for p in front], "k.", ms=5, label="frontier")
    fit = result.get("fit_compute")
    if fit and front:
        x = np.geomspace(front[0]["flops"], front[-1]["flops"], 50)
        ax.plot(x, fit["coef"] * x ** (-fit["exponent"]), "r--", label=f"L ∝ C^-{fit['exponent']:.3f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("held-out loss")
    ax.set_title("compute frontier")
    ax.legend(fontsize=7)
    return fig


def tokens_plot(result: dict):
    """Held-out loss against training tokens, one curve per size (its largest budget), and the Q19 target."""
    fig, ax = new_figure(6.4, 4.0)
    largest = {}
    for c in result["curves"]:
        if c["params"] not in largest or c["budget"] > largest[c["params"]]["budget"]:
            largest[c["params"]] = c
    colors = _colors(largest)
    for n, c in sorted(largest.items()):
        pts = [p for p in c["points"] if p["tokens"]]
        ax.plot([p["tokens"] for p in pts], [p["eval_loss"] for p in pts], "o-", ms=3, color=colors[n],
                label=f"{n:,} params ({c['budget']:.2g} FLOPs)")
    target = result["q19"].get("target_loss")
    if target is not None:
        ax.axhline(target, color="grey", ls=":", label="Q19 target loss")
    ax.set_xscale("log")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("held-out loss")
    ax.set_title("loss vs tokens per size")
    ax.legend(fontsize=7)
    return fig


def isoflop_plot(result: dict):
    """Final held-out loss against parameters, one line per budget; the optimum of each budget marked."""
    fig, ax = new_figure(6.4, 4.0)
    budgets = sorted({c["budget"] for c in result["cells"]})
    colors = _colors(budgets)
    for b in budgets:
        cells = sorted((c for c in result["cells"] if c["budget"] == b), key=lambda c: c["params"])
        ax.errorbar([c["params"] for c in cells], [c["eval_loss"] for c in cells],
                    yerr=[c["se"] for c in cells], fmt="o-", ms=4, color=colors[b], label=f"{b:.2g} FLOPs")
    for o in result["q8"]["n_opt"]:
        ax.axvline(o["params"], color=colors[o["budget"]], ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("non-embedding parameters")
    ax.set_ylabel("final held-out loss")
    ax.set_title("iso-FLOP profiles (dotted: loss-optimal size)")
    ax.legend(fontsize=7)
    return fig
