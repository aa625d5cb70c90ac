"""Plots shared by reports and studies."""

from __future__ import annotations

import numpy as np

from ptmlab.report.html import new_figure


def loss_curve(rows: list[dict], title: str = "training loss"):
    fig, ax = new_figure()
    steps = [r["step"] for r in rows if "loss" in r]
    ax.plot(steps, [r["loss"] for r in rows if "loss" in r], label="train loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    evals = [r for r in rows if "eval" in r]
    if evals:
        ax2 = ax.twinx()
        key = next(iter(evals[0]["eval"]))
        ax2.plot([r["step"] for r in evals], [r["eval"][key] for r in evals], "o-", color="tab:orange",
                 label=f"dev {key}")
        ax2.set_ylabel(f"dev {key}")
        ax2.legend(loc="upper right")
    ax.legend(loc="upper left")
    return fig


def confusion_matrix_plot(gold, pred, labels: list[str], title: str = "confusion matrix"):
    from sklearn.metrics import confusion_matrix

    cm = confusion_matrix(gold, pred, labels=list(range(len(labels))))
    fig, ax = new_figure(4.5, 4.0)
    ax.imshow(cm, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels, rotation=30)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    ax.set_title(title)
    for i in range(len(labels)):
        for j in range(len(labels)):
            ax.text(j, i, int(cm[i, j]), ha="center", va="center",
                    color="white" if cm[i, j] > cm.max() / 2 else "black")
    return fig


def scatter_plot(gold, pred, title: str = "predictions vs gold"):
    fig, ax = new_figure(4.5, 4.0)
    ax.scatter(gold, pred, s=6, alpha=0.5)
    lo, hi = float(np.min(gold)), float(np.max(gold))
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set_xlabel("gold")
    ax.set_ylabel("predicted")
    ax.set_title(title)
    return fig


def bar_plot(names: list[str], values: list[float], ylabel: str, title: str = ""):
    fig, ax = new_figure(max(4.0, 0.8 * len(names) + 2), 3.6)
    ax.bar(range(len(names)), values, color="tab:blue")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:.3f}", ha="center", va="bottom", fontsize=8)
    return fig


def seed_lines(names: list[str], series: dict[str, list[float]], ylabel: str, title: str = ""):
    """One line per seed (``series``: label -> one value per name) across the variants ``names``, on an axis fitted to
    the values: paired differences between variants stay visible where bars from zero would hide them."""
    fig, ax = new_figure(max(4.0, 1.2 * len(names) + 2), 3.6)
    for label, values in series.items():
        ax.plot(range(len(names)), values, marker="o", label=label)
    ax.set_xticks(range(len(names)), names)
    ax.set_xlim(-0.5, len(names) - 0.5)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def per_class_plot(scores: list[dict], title: str = "per-class scores"):
    """Grouped bars of precision, recall and F1 per class."""
    fig, ax = new_figure(max(4.5, 1.4 * len(scores) + 2), 3.6)
    width = 0.27
    for j, key in enumerate(("precision", "recall", "f1")):
        xs = [i + (j - 1) * width for i in range(len(scores))]
        ax.bar(xs, [r[key] for r in scores], width, label=key)
    ax.set_xticks(range(len(scores)), [r["class"] for r in scores])
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig
