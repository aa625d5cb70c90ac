"""Low-rank factorisation of Linear layers by truncated SVD: W (out x in) ~ (U_r sqrt(S_r)) (sqrt(S_r) V_r^T).

The rank of each layer is a fraction of its full rank (``ratio``) or the smallest rank keeping a share of the
squared singular values (``energy``). A layer is only factorised when the two factors hold fewer parameters than
W. The change is recorded as a ``low_rank`` modification (rank per layer), so the saved model reloads.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ptmlab.compress.magnitude import ENCODER_PARTS, encoder_linears
from ptmlab.core.errors import PtmlabError
from ptmlab.models.loader import MODIFIERS, record_modification
from ptmlab.models.structure import structure_of


class LowRankLinear(nn.Module):
    """``up(down(x))``: a rank-r stand-in for an ``in_features -> out_features`` Linear."""

    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features, self.rank = in_features, out_features, rank
        self.down = nn.Linear(in_features, rank, bias=False)
        self.up = nn.Linear(rank, out_features, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.down(x))


def choose_rank(weight: torch.Tensor, ratio: float | None = None, energy: float | None = None) -> int:
    """Rank for a weight matrix: ``ceil(ratio * full rank)``, or the fewest singular values holding ``energy``."""
    full = min(weight.shape)
    if (ratio is None) == (energy is None):
        raise PtmlabError("give exactly one of --rank-ratio and --energy")
    if ratio is not None:
        if not 0 < ratio <= 1:
            raise PtmlabError(f"--rank-ratio {ratio} is out of range: give a fraction in (0, 1]")
        return max(1, math.ceil(round(ratio * full, 6)))
    if not 0 < energy <= 1:
        raise PtmlabError(f"--energy {energy} is out of range: give a fraction in (0, 1]")
    s2 = torch.linalg.svdvals(weight.detach().double()) ** 2
    kept = torch.cumsum(s2, 0) / s2.sum()
    return min(full, int((kept < energy - 1e-12).sum()) + 1)


def factorise(lin: nn.Linear, rank: int) -> LowRankLinear:
    """The truncated-SVD factors of ``lin`` at ``rank`` (bias kept on the second factor)."""
    w = lin.weight.detach().double()
    u, s, vh = torch.linalg.svd(w, full_matrices=False)
    root = s[:rank].sqrt()
    new = LowRankLinear(lin.in_features, lin.out_features, rank, bias=lin.bias is not None).to(lin.weight.device)
    with torch.no_grad():
        new.down.weight.copy_((root[:, None] * vh[:rank]).to(lin.weight.dtype))
        new.up.weight.copy_((u[:, :rank] * root[None]).to(lin.weight.dtype))
        if lin.bias is not None:
            new.up.bias.copy_(lin.bias.detach())
    new.to(lin.weight.dtype).train(lin.training)
    return new


def _set(model, key: str, new: nn.Module) -> None:
    s = structure_of(model)
    layer, part = key.split(".", 1)
    parent_path, _, attr = getattr(s, part).rpartition(".")
    owner = s.layer(model, int(layer))
    setattr(owner.get_submodule(parent_path) if parent_path else owner, attr, new)


@MODIFIERS.register("low_rank", help="Linear layers replaced by truncated-SVD factor pairs")
def apply_ranks(model, ranks: dict, record: bool = True) -> None:
    """Replace each ``{"layer.part": rank}`` Linear by a rank-r pair: the SVD of its weights, or (when replaying
    on load, ``record=False``) empty factors that the saved weights fill."""
    current = encoder_linears(model, sorted({k.split(".", 1)[1] for k in ranks}))
    for key, rank in ranks.items():
        if key not in current:
            raise PtmlabError(f"low-rank entry '{key}' names no Linear layer of this model")
        lin = current[key]
        new = factorise(lin, int(rank)) if record else LowRankLinear(
            lin.in_features, lin.out_features, int(rank), bias=lin.bias is not None).to(lin.weight)
        _set(model, key, new)
    if record:
        record_modification(model, "low_rank", ranks={k: int(v) for k, v in ranks.items()})


def low_rank(model, ratio: float | None = None, energy: float | None = None,
             parts: list[str] | tuple[str, ...] = ENCODER_PARTS) -> dict:
    """Factorise the encoder's Linear ``parts`` in place where that saves parameters; returns what changed."""
    before = sum(p.numel() for p in model.parameters())
    ranks, skipped = {}, []
    for key, lin in encoder_linears(model, parts).items():
        r = choose_rank(lin.weight, ratio, energy)
        if r * (lin.in_features + lin.out_features) < lin.in_features * lin.out_features:
            ranks[key] = r
        else:
            skipped.append(key)
    if not ranks:
        raise PtmlabError("no layer gets smaller at this rank (rank x (in + out) >= in x out everywhere): use a "
                          "lower --rank-ratio or --energy")
    apply_ranks(model, ranks)
    return {"params_before": before, "params_after": sum(p.numel() for p in model.parameters()), "ranks": ranks,
            "not_factorised": skipped}
