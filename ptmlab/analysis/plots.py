"""Figures for the analysis commands and studies (matplotlib, returned for ``Report.figure``)."""

from __future__ import annotations

import numpy as np

from ptmlab.report.html import new_figure


def heatmap(values: np.ndarray, title: str, xlabel: str = "head", ylabel: str = "layer", cmap: str = "RdBu",
            centre: bool = True, annotate: bool = True, xticks: list[str] | None = None):
    """A matrix as a heatmap (diverging and centred on 0 for metric changes)."""
    fig, ax = new_figure(max(4.5, 0.45 * values.shape[1] + 2), max(2.8, 0.45 * values.shape[0] + 1.2))
    lim = float(np.nanmax(np.abs(values))) or 1.0
    kw = dict(vmin=-lim, vmax=lim) if centre else {}
    im = ax.imshow(values, cmap=cmap, aspect="auto", **kw)
    fig.colorbar(im, ax=ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_yticks(range(values.shape[0]))
    if xticks is not None:
        ax.set_xticks(range(len(xticks)), xticks, rotation=60, ha="right", fontsize=7)
    else:
        ax.set_xticks(range(values.shape[1]))
    if annotate and values.size <= 200:
        for (i, j), v in np.ndenumerate(values):
            if np.isfinite(v):
                ax.text(j, i, f"{v:+.3f}" if centre else f"{v:.2f}", ha="center", va="center", fontsize=6)
    return fig


def grouped_bars(groups: list[str], series: dict[str, list[float]], ylabel: str, title: str, base: float | None = None):
    fig, ax = new_figure(max(4.5, 0.9 * len(groups) + 2), 3.6)
    width = 0.8 / max(len(series), 1)
    for k, (name, vals) in enumerate(series.items()):
        ax.bar(np.arange(len(groups)) + k * width, vals, width, label=name)
    if base is not None:
        ax.axhline(base, color="k", ls="--", lw=1, label="intact model")
    ax.set_xticks(np.arange(len(groups)) + width * (len(series) - 1) / 2, groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def stacked_shares(shares: np.ndarray, names: tuple[str, ...], title: str):
    """Share of each type per layer (rows of ``shares`` sum to 1)."""
    fig, ax = new_figure(6.0, 3.6)
    bottom = np.zeros(shares.shape[0])
    for k, name in enumerate(names):
        ax.bar(range(shares.shape[0]), shares[:, k], bottom=bottom, label=name)
        bottom += shares[:, k]
    ax.set_xlabel("layer")
    ax.set_ylabel("share of attention maps")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    return fig


def attention_map(tokens: list[str], att: np.ndarray, title: str):
    """One head's attention map (queries as rows)."""
    fig, ax = new_figure(max(3.5, 0.25 * len(tokens) + 1.5), max(3.2, 0.25 * len(tokens) + 1.2))
    ax.imshow(att, cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=6)
    ax.set_yticks(range(len(tokens)), tokens, fontsize=6)
    ax.set_title(title, fontsize=9)
    return fig


def histograms(series: dict[str, list[float]], xlabel: str, title: str, bins: int = 30):
    fig, ax = new_figure()
    for name, vals in series.items():
        vals = [v for v in vals if np.isfinite(v)]
        if vals:
            ax.hist(vals, bins=bins, alpha=0.5, label=f"{name} (median {np.median(vals):+.2f})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("examples")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def scatter(x: list[float], y: list[float], xlabel: str, ylabel: str, title: str):
    fig, ax = new_figure(4.8, 3.8)
    ax.scatter(x, y, s=8, alpha=0.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return fig


def layer_lines(series: dict[str, list[float]], ylabel: str, title: str, hline: float | None = None):
    fig, ax = new_figure()
    for name, vals in series.items():
        ax.plot(range(len(vals)), vals, "o-", label=name, ms=3)
    if hline is not None:
        ax.axhline(hline, color="k", ls="--", lw=1)
    ax.set_xlabel("layer (0 = embeddings)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    return fig
