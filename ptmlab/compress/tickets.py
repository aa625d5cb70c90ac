"""Tickets as sets of kept units: rewinding a ticket to the pretrained model, overlap between tickets, shared tickets.

A ticket is a keep-mask per layer over attention heads and over FFN neurons (``compress.targets.head_mask`` /
``ffn_mask`` of a fine-tuned model's importance scores). ``build_ticket`` applies one to the *pretrained* model (the
survivors keep their pretrained values: Liang et al.'s super tickets). Tickets of different tasks are compared by
the Jaccard index of their kept units, against random tickets that keep as many units in every layer
(``random_jaccard``: the overlap chance alone gives, which is high when most units are kept). ``share`` joins
several tasks' tickets into one: the union keeps a unit any task keeps, the intersection only those every task keeps,
the vote a ticket of the tasks' own size made of the units most tasks keep.
"""

from __future__ import annotations

import random

from ptmlab.core.errors import PtmlabError

Mask = list[list[bool]]  # mask[layer][unit]: True = kept


def kept(mask: Mask) -> set[tuple[int, int]]:
    """The kept units as (layer, index) pairs."""
    return {(i, j) for i, row in enumerate(mask) for j, k in enumerate(row) if k}


def jaccard(a: Mask, b: Mask) -> float:
    """|A ∩ B| / |A ∪ B| over the kept units (1.0 for two empty tickets)."""
    sa, sb = kept(a), kept(b)
    union = len(sa | sb)
    return len(sa & sb) / union if union else 1.0


def random_jaccard(a: Mask, b: Mask, draws: int = 200, seed: int = 0) -> float:
    """The mean Jaccard index of random tickets keeping as many units per layer as ``a`` and ``b``."""
    rng = random.Random(seed)
    total = 0.0
    for _ in range(draws):
        ra, rb = [], []
        for row_a, row_b in zip(a, b, strict=True):
            n = len(row_a)
            ka, kb = set(rng.sample(range(n), sum(row_a))), set(rng.sample(range(n), sum(row_b)))
            ra.append([j in ka for j in range(n)])
            rb.append([j in kb for j in range(n)])
        total += jaccard(ra, rb)
    return total / draws


SHARES = ("votes", "union", "intersection")


def share(masks: list[Mask], how: str = "union", seed: int = 0) -> Mask:
    """One ticket from several: ``union`` (kept by any), ``intersection`` (kept by every one) or ``votes`` (a ticket
    of fixed size: in every layer, as many units as the tasks' tickets keep there on average, those kept by the most
    tasks; ties drawn with ``seed``). The union of a few tickets at a small ratio keeps nearly every unit; the
    intersection can empty a layer; the vote keeps the tickets' own size."""
    if how not in SHARES:
        raise PtmlabError(f"--share '{how}' is unknown: choose {', '.join(SHARES)}")
    if not masks:
        raise PtmlabError("no tickets to share: find a ticket for one task or more first")
    if how == "votes":
        rng = random.Random(seed)
        out = []
        for i in range(len(masks[0])):
            n = len(masks[0][i])
            votes = [sum(m[i][j] for m in masks) for j in range(n)]
            size = round(sum(sum(m[i]) for m in masks) / len(masks))
            ties = [rng.random() for _ in range(n)]
            keep = set(sorted(range(n), key=lambda j: (-votes[j], ties[j]))[:size])
            out.append([j in keep for j in range(n)])
        return out
    join = any if how == "union" else all
    return [[join(m[i][j] for m in masks) for j in range(len(masks[0][i]))] for i in range(len(masks[0]))]


def check_ticket(heads: Mask, ffn: Mask, what: str = "the ticket") -> None:
    """A ticket must keep at least one head and one FFN neuron in every layer (one-line error otherwise)."""
    for kind, mask in (("attention head", heads), ("FFN neuron", ffn)):
        for i, row in enumerate(mask):
            if not any(row):
                raise PtmlabError(f"{what} keeps no {kind} in layer {i} (an empty ticket): prune less (a smaller "
                                  f"--ratio) or share by union")


def build_ticket(base: str, keep_heads: dict, keep_ffn: dict, num_labels: int, regression: bool,
                 labels: list[str] | None, seed: int):
    """The pretrained ``base`` with a task head (seeded) and everything but the kept heads / neurons removed
    (``{layer: [kept indices]}``, as ``compress.surgery.mask_to_keep`` gives)."""
    from ptmlab.compress.surgery import prune_structure
    from ptmlab.core.seed import set_seed
    from ptmlab.models.zoo import load_model

    set_seed(seed)
    model = load_model(base, num_labels=num_labels, regression=regression, label_names=labels)
    if keep_heads or keep_ffn:
        prune_structure(model, heads=keep_heads, ffn=keep_ffn)
    return model
