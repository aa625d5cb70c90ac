"""Head gates, uniform-attention heads and layer skips on any model with a structure map, through hooks.

The only tensor every attention implementation shares is the input of the attention output projection: the
concatenated per-head contexts ``[batch, tokens, heads * head_dim]``. A forward pre-hook on that projection
scales each head's slice (0 removes the head; a differentiable gate gives Michel et al.'s |dL/d gate|) or
replaces it with the mean of the head's value vectors over non-padding tokens (Kovaleva et al.'s uniform
attention: every token attends 1/L). A forward hook on a layer returns its input unchanged (layer skip).
No model class is rewritten; ``with Gates(model) as g:`` attaches, leaving the model untouched on exit.
"""

from __future__ import annotations

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.models.structure import structure_of


class Gates:
    def __init__(self, model: nn.Module, requires_grad: bool = False):
        self.model = model
        self.s = structure_of(model)
        self.num_layers = self.s.num_layers(model)
        self.num_heads = model.config.num_attention_heads if hasattr(model.config, "num_attention_heads") \
            else model.config.n_heads
        first = self.s.part(model, 0, "attn_output")
        self.head_scale = torch.ones(self.num_layers, self.num_heads, device=first.weight.device,
                                     requires_grad=requires_grad)
        self.uniform: set[tuple[int, int]] = set()
        self.skipped: set[int] = set()
        self._handles: list = []
        self._mask: torch.Tensor | None = None
        self._values: dict[int, torch.Tensor] = {}

    # --------------------------------------------------------------------------- configuration
    def _check(self, layer: int, head: int | None = None) -> None:
        if not 0 <= layer < self.num_layers:
            raise PtmlabError(f"layer {layer} is out of range: the model has layers 0..{self.num_layers - 1}")
        if head is not None and not 0 <= head < self.heads_in(layer):
            raise PtmlabError(f"head {head} of layer {layer} is out of range: it has heads "
                              f"0..{self.heads_in(layer) - 1}")

    def heads_in(self, layer: int) -> int:
        """Heads of a layer (fewer than the config's after pruning)."""
        proj = self.s.part(self.model, layer, "attn_output")
        head_dim = self.model.config.hidden_size // self.num_heads
        return proj.in_features // head_dim

    def remove_head(self, layer: int, head: int) -> Gates:
        self._check(layer, head)
        with torch.no_grad():
            self.head_scale[layer, head] = 0.0
        return self

    def uniform_head(self, layer: int, head: int) -> Gates:
        self._check(layer, head)
        self.uniform.add((layer, head))
        return self

    def skip_layer(self, layer: int) -> Gates:
        self._check(layer)
        self.skipped.add(layer)
        return self

    def reset(self) -> Gates:
        with torch.no_grad():
            self.head_scale.fill_(1.0)
        self.uniform.clear()
        self.skipped.clear()
        return self

    # --------------------------------------------------------------------------- hooks
    def attach(self) -> Gates:
        if self._handles:
            return self
        self._handles.append(self.model.register_forward_pre_hook(self._remember_mask, with_kwargs=True))
        for i in range(self.num_layers):
            self._handles.append(self.s.part(self.model, i, "attn_output").register_forward_pre_hook(
                self._gate_hook(i)))
            self._handles.append(self.s.part(self.model, i, "value").register_forward_hook(self._value_hook(i)))
            self._handles.append(self.s.layer(self.model, i).register_forward_hook(self._skip_hook(i),
                                                                                   with_kwargs=True))
        return self

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._values.clear()
        self._mask = None

    def __enter__(self) -> Gates:
        return self.attach()

    def __exit__(self, *exc) -> None:
        self.detach()

    def _remember_mask(self, module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if mask is None and len(args) > 1 and torch.is_tensor(args[1]):
            mask = args[1]
        ids = kwargs.get("input_ids", args[0] if args else None)
        if mask is None and torch.is_tensor(ids):
            mask = torch.ones(ids.shape[:2], device=ids.device)
        self._mask = mask

    def _value_hook(self, layer: int):
        def hook(module, inputs, output):
            if any(li == layer for li, _ in self.uniform):
                self._values[layer] = output
        return hook

    def _gate_hook(self, layer: int):
        def hook(module, inputs):
            (x,) = inputs[:1]
            n_heads = self.heads_in(layer)
            scale = self.head_scale[layer, :n_heads]
            uniform = [h for li, h in self.uniform if li == layer]
            if not uniform and not self.head_scale.requires_grad and bool((scale == 1).all()):
                return None
            b, t, width = x.shape
            heads = x.view(b, t, n_heads, width // n_heads)
            if uniform:
                values = self._values[layer].view(b, t, n_heads, width // n_heads)
                mask = self._mask.to(values.dtype).view(b, t, 1, 1) if self._mask is not None \
                    else torch.ones(b, t, 1, 1, dtype=values.dtype, device=values.device)
                mean = (values * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)
                pick = torch.zeros(n_heads, dtype=torch.bool, device=x.device)
                pick[uniform] = True
                heads = torch.where(pick.view(1, 1, n_heads, 1), mean.expand_as(heads).to(heads.dtype), heads)
            heads = heads * scale.to(heads.dtype).view(1, 1, n_heads, 1)
            return (heads.reshape(b, t, width), *inputs[1:])
        return hook

    def _skip_hook(self, layer: int):
        def hook(module, args, kwargs, output):
            if layer not in self.skipped:
                return None
            hidden = args[0] if args else kwargs["hidden_states"]
            if isinstance(output, tuple):
                return (hidden, *output[1:])
            return hidden
        return hook
