"""ALBERT-style cross-layer weight sharing: consecutive layers in a group run the group's first layer's module.

The other members become ``SharedLayer`` stand-ins that hold no parameters of their own (the source is not a
registered submodule), so the state dict, the parameter count and the file on disk hold each group once. The
group's weights start as the mean of its members (``init="mean"``) or as its first layer (``init="first"``);
recovery fine-tuning then trains the shared weights. Recorded as a ``layer_sharing`` modification.
"""

from __future__ import annotations

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.models.loader import MODIFIERS, record_modification
from ptmlab.models.structure import structure_of


class SharedLayer(nn.Module):
    """Runs another layer's module (not registered here, so its parameters are stored once)."""

    def __init__(self, source: nn.Module, source_index: int):
        super().__init__()
        self.__dict__["_source"] = source
        self.source_index = source_index

    def forward(self, *args, **kwargs):
        return self.__dict__["_source"](*args, **kwargs)


def even_groups(num_layers: int, groups: int) -> list[list[int]]:
    """``groups`` runs of consecutive layers, as even as possible (6 layers, 3 groups: [0,1] [2,3] [4,5])."""
    if not 1 <= groups < num_layers:
        raise PtmlabError(f"--groups {groups} is out of range: give 1..{num_layers - 1} for a {num_layers}-layer "
                          f"model (as many groups as layers shares nothing)")
    bounds = [round(g * num_layers / groups) for g in range(groups + 1)]
    return [list(range(bounds[g], bounds[g + 1])) for g in range(groups)]


@MODIFIERS.register("layer_sharing", help="groups of consecutive layers tied to one set of weights")
def share_layers(model, groups: list[list[int]], init: str = "mean", record: bool = True) -> None:
    """Tie each group of layers (lists of layer indices) to its first member's module."""
    s = structure_of(model)
    layers = s.layer_list(model)
    n = len(layers)
    flat = [i for g in groups for i in g]
    if sorted(flat) != sorted(set(flat)) or any(not 0 <= i < n for i in flat):
        raise PtmlabError(f"layer groups {groups} are invalid: each layer 0..{n - 1} may appear in one group only")
    if any(isinstance(layers[i], SharedLayer) for i in flat):
        raise PtmlabError("these layers are already shared: share the unshared model it came from")
    if init not in ("mean", "first"):
        raise PtmlabError(f"unknown sharing init '{init}': use mean or first")
    for group in groups:
        lead = layers[group[0]]
        if init == "mean" and len(group) > 1:
            with torch.no_grad():
                members = [dict(layers[i].named_parameters()) for i in group]
                for name, p in lead.named_parameters():
                    p.copy_(torch.stack([m[name] for m in members]).mean(0))
        for i in group[1:]:
            layers._modules[str(i)] = SharedLayer(lead, group[0])
    if record:
        record_modification(model, "layer_sharing", groups=[list(map(int, g)) for g in groups], init=init)


def shared_groups(model) -> list[list[int]]:
    """Current groups (layer indices running the same module)."""
    layers = structure_of(model).layer_list(model)
    out: dict[int, list[int]] = {}
    for i, m in enumerate(layers):
        out.setdefault(m.source_index if isinstance(m, SharedLayer) else i, []).append(i)
    return list(out.values())
