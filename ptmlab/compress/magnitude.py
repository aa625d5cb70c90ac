"""Unstructured magnitude pruning of the encoder's Linear weights with ``torch.nn.utils.prune``, made permanent.

The smallest |w| are set to zero, either ranked over all encoder Linear layers together (``global``) or by the
same fraction in every layer (``layer``). The weights stay dense tensors: the file on disk keeps its size and dense
CPU kernels run exactly as fast as before. The gain is only what a sparse kernel or a compressor could exploit.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import prune

from ptmlab.compress.targets import check_fraction
from ptmlab.core.errors import PtmlabError
from ptmlab.models.structure import structure_of

ENCODER_PARTS = ("query", "key", "value", "attn_output", "ffn_in", "ffn_out")
SCOPES = ("global", "layer")


def encoder_linears(model: nn.Module, parts: tuple[str, ...] | list[str] = ENCODER_PARTS) -> dict[str, nn.Linear]:
    """``{"layer.part": Linear}`` for the named parts of every encoder layer."""
    s = structure_of(model)
    for p in parts:
        if p not in ENCODER_PARTS:
            raise PtmlabError(f"unknown layer part '{p}': use {', '.join(ENCODER_PARTS)}")
    out = {}
    for i in range(s.num_layers(model)):
        for p in parts:
            m = s.part(model, i, p)
            if not isinstance(m, nn.Linear):
                raise PtmlabError(f"layer {i} {p} is a {type(m).__name__}, not a Linear: magnitude-prune before "
                                  f"low-rank factorisation or weight sharing")
            out[f"{i}.{p}"] = m
    return out


def sparsity(linears: dict[str, nn.Linear]) -> float:
    """Fraction of exactly-zero weights over the given layers."""
    zeros = sum(int((m.weight == 0).sum()) for m in linears.values())
    return zeros / max(1, sum(m.weight.numel() for m in linears.values()))


def magnitude_prune(model: nn.Module, amount: float, scope: str = "global") -> dict:
    """Zero the ``amount`` smallest-magnitude encoder Linear weights in place; returns the measured sparsity."""
    check_fraction("sparsity", amount)
    if scope not in SCOPES:
        raise PtmlabError(f"unknown magnitude-pruning scope '{scope}': use global or layer")
    linears = encoder_linears(model)
    before = sparsity(linears)
    if scope == "global":
        prune.global_unstructured([(m, "weight") for m in linears.values()], pruning_method=prune.L1Unstructured,
                                  amount=amount)
    else:
        for m in linears.values():
            prune.l1_unstructured(m, "weight", amount=amount)
    for m in linears.values():
        prune.remove(m, "weight")  # permanent: the mask is multiplied into a plain parameter
    total = sum(p.numel() for p in model.parameters())
    zeros = sum(int((p == 0).sum()) for p in model.parameters())
    return {"scope": scope, "sparsity_target": amount, "sparsity_before": round(before, 4),
            "sparsity_encoder_linear": round(sparsity(linears), 4), "sparsity_all_params": round(zeros / total, 4),
            "sparsity_per_layer": {k: round(sparsity({k: m}), 4) for k, m in linears.items()}}


def zero_masks(model: nn.Module) -> dict[str, torch.Tensor]:
    """Where the encoder Linear weights are zero now (to re-apply after recovery fine-tuning)."""
    return {k: m.weight.detach() == 0 for k, m in encoder_linears(model).items()}


def apply_masks(model: nn.Module, masks: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for k, m in encoder_linears(model).items():
            m.weight.masked_fill_(masks[k].to(m.weight.device), 0.0)
