"""Grouped bar charts of tokenizer metrics: a chart per metric, texts along x, a bar per tokenizer."""

from __future__ import annotations

from pathlib import Path

from ptmlab.core.io import atomic_write_bytes
from ptmlab.tokenization.metrics import METRICS

TITLES = {
    "fertility": "fertility (pieces per word, lower is better)",
    "continued_words": "continued words (share split into 2+ pieces, lower is better)",
    "whole_words": "words kept whole (higher is better)",
    "unk_rate": "unknown-token rate (lower is better)",
    "chars_per_token": "characters per token (higher is better)",
    "vocab_use": "vocabulary use (share of the vocabulary seen)",
}


def metric_figure(table: dict[str, dict[str, dict]], metric: str, title: str | None = None):
    """A figure of ``table[tokenizer][text][metric]``: texts along x, one coloured bar per tokenizer."""
    from ptmlab.report.html import new_figure

    toks = list(table)
    groups = list(dict.fromkeys(g for per in table.values() for g in per))
    width = 0.8 / max(len(toks), 1)
    fig, ax = new_figure(max(5.0, 1.2 + 0.45 * len(groups) * len(toks)), 3.6)
    for i, tok in enumerate(toks):
        xs = [g + (i - (len(toks) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [table[tok].get(name, {}).get(metric, 0.0) for name in groups], width=width, label=tok)
    tilt = len(groups) > 3
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=20 if tilt else 0, ha="right" if tilt else "center")
    ax.set_title(title or TITLES[metric], fontsize=10)
    top = max((v.get(metric, 0.0) for per in table.values() for v in per.values()), default=0.0)
    ax.set_ylim(0, top * 1.3 if top > 0 else 1.0)  # headroom for the legend
    ax.legend(fontsize=8, ncols=min(len(toks), 5), loc="upper center")
    ax.grid(axis="y", alpha=0.3)
    return fig


def bar_charts(table: dict[str, dict[str, dict]], out_dir: Path, suffix: str = "") -> list[Path]:
    """Write ``out_dir/<metric><suffix>.png`` for every metric."""
    from ptmlab.report.html import fig_to_png

    written = []
    for metric in METRICS:
        path = Path(out_dir) / f"{metric}{suffix}.png"
        atomic_write_bytes(path, fig_to_png(metric_figure(table, metric)))
        written.append(path)
    return written
