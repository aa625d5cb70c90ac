"""Turn a pruning target (fraction of heads, of FFN neurons, or of total parameters) into keep-masks.

Heads are ranked globally by their per-layer-normalised importance (Michel et al.), keeping at least one head per
layer; FFN neurons are pruned by the same fraction in every layer, least important first.
"""

from __future__ import annotations

import math

import torch

from ptmlab.compress.importance import Importance
from ptmlab.core.errors import PtmlabError


def check_fraction(name: str, value: float | None) -> None:
    if value is not None and not 0 <= value < 1:
        raise PtmlabError(f"--{name} {value} is out of range: give a fraction in [0, 1)")


def head_mask(imp: Importance, fraction: float) -> list[list[bool]]:
    """Remove ``ceil(fraction * heads)`` of the least important heads, never the last head of a layer."""
    check_fraction("heads", fraction)
    scores = imp.normalised_heads()
    total = sum(len(s) for s in scores)
    n_remove = math.ceil(round(fraction * total, 6))
    mask = [[True] * len(s) for s in scores]
    alive = [len(s) for s in scores]
    ranked = sorted(((float(v), i, h) for i, s in enumerate(scores) for h, v in enumerate(s)), key=lambda x: x[0])
    removed = 0
    for _, i, h in ranked:
        if removed >= n_remove:
            break
        if alive[i] > 1:
            mask[i][h] = False
            alive[i] -= 1
            removed += 1
    return mask


def ffn_mask(imp: Importance, fraction: float) -> list[list[bool]]:
    """Remove ``ceil(fraction * width)`` of each layer's least important FFN neurons (at least one stays)."""
    check_fraction("ffn", fraction)
    mask = []
    for s in imp.ffn:
        n_remove = min(len(s) - 1, math.ceil(round(fraction * len(s), 6)))
        order = torch.argsort(s)[:n_remove].tolist()
        row = [True] * len(s)
        for j in order:
            row[j] = False
        mask.append(row)
    return mask


def prunable_params(hidden: int, head_dim: int) -> tuple[int, int]:
    """Parameters per head (q/k/v rows and biases, output columns) and per FFN neuron."""
    per_head = 4 * hidden * head_dim + 3 * head_dim
    per_neuron = 2 * hidden + 1
    return per_head, per_neuron


def fraction_for_params(target: float, total_params: int, hidden: int, head_dim: int, heads: list[int],
                        ffn: list[int]) -> float:
    """The head-and-FFN fraction that removes ``target`` of all parameters (embeddings are not touched)."""
    check_fraction("params", target)
    per_head, per_neuron = prunable_params(hidden, head_dim)
    removable = sum(h - 1 for h in heads) * per_head + sum(f - 1 for f in ffn) * per_neuron
    need = target * total_params
    if need > removable:
        raise PtmlabError(f"--params {target} asks to remove {need:,.0f} parameters but heads and FFN neurons hold "
                          f"only {removable:,} removable ones (embeddings are not pruned): use --params <= "
                          f"{removable / total_params:.2f} or prune the vocabulary first")
    lo, hi = 0.0, 0.9999
    for _ in range(40):
        mid = (lo + hi) / 2
        # heads go by one global count (head_mask), FFN neurons by a count per layer (ffn_mask)
        removed = min(sum(h - 1 for h in heads), math.ceil(round(mid * sum(heads), 6))) * per_head + \
            sum(min(f - 1, math.ceil(round(mid * f, 6))) for f in ffn) * per_neuron
        lo, hi = (mid, hi) if removed < need else (lo, mid)
    return hi
