"""GhostBERT ghost modules (Huang et al., ACL 2021): cheap features generated from the features pruning left.

In every layer, the remaining FFN intermediate activations (the input of the FFN output projection) and the
remaining heads' concatenated context vectors (the input of the attention output projection) go through a
depthwise 1-D convolution along the sequence (one kernel of ``kernel`` taps per feature, odd, "same" padding)
and a GELU; these ghost features reach the hidden size through new output weights that start at zero, so the
model's outputs are unchanged when the ghosts are added and fine-tuning decides how much they contribute.
Padding positions are zeroed (attention mask) before the convolution so they never leak into real tokens.

Nothing is rewritten: each layer gets ``ghost_attn`` / ``ghost_ffn`` submodules (so their weights are in the state
dict and the file), a forward hook on the output projections (found through ``structure_of``) adds their output,
and a forward pre-hook on the encoder hands them the attention mask. Recorded as the ``ghost`` modification, so
``load_model`` rebuilds it; it must be the last structural change (pruning, low rank or sharing afterwards would
replace the hooked projections).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.models.loader import MODIFIERS, record_modification
from ptmlab.models.structure import structure_of

PARTS = {"attn": "attn_output", "ffn": "ffn_out"}  # ghost part -> the projection whose input it reads


class _MaskHolder:
    """The current batch's attention mask [b, t], captured by a pre-hook on the encoder."""

    def __init__(self):
        self.mask: torch.Tensor | None = None

    def capture(self, module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if mask is None and len(args) > 1 and isinstance(args[1], torch.Tensor):
            mask = args[1]
        self.mask = mask if mask is not None and mask.dim() == 2 else None


class GhostModule(nn.Module):
    """``proj(gelu(depthwise_conv(x * mask)))``: ghost features of ``channels`` inputs, mapped to ``hidden``."""

    def __init__(self, channels: int, hidden: int, kernel: int, holder: _MaskHolder):
        super().__init__()
        check_kernel(kernel)
        self.channels, self.hidden, self.kernel = channels, hidden, kernel
        self.conv = nn.Conv1d(channels, channels, kernel, padding=kernel // 2, groups=channels)
        self.proj = nn.Linear(channels, hidden, bias=False)
        nn.init.zeros_(self.proj.weight)
        self.holder = holder  # a plain attribute: shared by every ghost module of the model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = self.holder.mask
        if mask is not None and mask.shape == x.shape[:2]:
            x = x * mask.to(x.dtype).unsqueeze(-1)
        g = self.conv(x.transpose(1, 2)).transpose(1, 2)
        return self.proj(F.gelu(g))

    def hook(self, module, args, output):
        """Forward hook on the output projection: its output plus the ghost features' contribution."""
        return output + self.forward(args[0]).to(output.dtype)


def check_kernel(kernel: int) -> None:
    if not isinstance(kernel, int) or kernel < 1 or kernel % 2 == 0:
        raise PtmlabError(f"--ghost-kernel {kernel} is invalid: give an odd kernel size >= 1 (e.g. 3), so the "
                          f"convolution keeps every position centred")


def has_ghost(model) -> bool:
    return any(m.get("kind") == "ghost" for m in (getattr(model.config, "ptmlab_modifications", None) or []))


def check_no_ghost(model, verb: str) -> None:
    """Ghost modules hook the output projections, so they must be the last structural change."""
    if has_ghost(model):
        raise PtmlabError(f"this model has ghost modules, which must be the last change: {verb} the model they were "
                          f"added to, then add ghost modules (ptmlab ghost)")


def ghost_modules(model) -> list[GhostModule]:
    return [m for m in model.modules() if isinstance(m, GhostModule)]


def ghost_parameter_count(model) -> int:
    return sum(p.numel() for g in ghost_modules(model) for p in g.parameters())


def ghost_params_for(model, kernel: int = 3, parts: tuple[str, ...] = ("attn", "ffn")) -> int:
    """Parameters ``add_ghost_modules`` would add to ``model`` (without adding them)."""
    s = structure_of(model)
    hidden = model.config.hidden_size
    total = 0
    for i in range(s.num_layers(model)):
        for part in parts:
            c = s.part(model, i, PARTS[part]).in_features
            total += c * kernel + c + c * hidden
    return total


@MODIFIERS.register("ghost", help="GhostBERT ghost features (depthwise conv + zero-initialised projection)")
def add_ghost_modules(model, kernel: int = 3, parts: list[str] | tuple[str, ...] = ("attn", "ffn"),
                      channels: dict | None = None, record: bool = True) -> dict:
    """Add ghost modules to every layer of ``model`` (in place); returns the ghost parameter count per part."""
    from ptmlab.compress.sharing import SharedLayer

    check_kernel(kernel)
    parts = tuple(parts)
    if not parts or any(p not in PARTS for p in parts):
        raise PtmlabError(f"ghost parts {list(parts)} are invalid: use attn, ffn or both")
    if record and has_ghost(model):
        raise PtmlabError("the model already has ghost modules: add them to the model they came from")
    s = structure_of(model)
    layers = s.layer_list(model)
    if any(isinstance(m, SharedLayer) for m in layers):
        raise PtmlabError("ghost modules cannot be added to a weight-shared model: add them before sharing layers")
    encoder = s.encoder(model)
    holder = getattr(encoder, "_ptmlab_ghost_holder", None)
    if holder is None:
        holder = _MaskHolder()
        encoder._ptmlab_ghost_holder = holder
        encoder.register_forward_pre_hook(holder.capture, with_kwargs=True)
    hidden = model.config.hidden_size
    ref = s.part(model, 0, "query").weight
    widths: dict[str, list[int]] = {}
    for i in range(len(layers)):
        for part in parts:
            proj = s.part(model, i, PARTS[part])
            c = proj.in_features
            if channels is not None and int(channels[part][i]) != c:
                raise PtmlabError(f"ghost modules recorded {channels[part][i]} {part} channels in layer {i} but the "
                                  f"model has {c}: the model directory is inconsistent")
            ghost = GhostModule(c, hidden, kernel, holder).to(device=ref.device, dtype=ref.dtype)
            ghost.train(proj.training)
            layers[i].add_module(f"ghost_{part}", ghost)
            proj.register_forward_hook(ghost.hook)
            widths.setdefault(part, []).append(c)
    if record:
        record_modification(model, "ghost", kernel=kernel, parts=list(parts), channels=widths)
    return {part: sum(w * kernel + w + w * hidden for w in ws) for part, ws in widths.items()}
