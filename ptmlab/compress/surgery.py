"""Structured pruning by weight slicing on the structure map: heads (uneven per layer), FFN neurons, whole layers.

Removing head h of a layer deletes its rows of q/k/v and its columns of the attention output projection, which is
exactly gating it to zero. The change is recorded as a ``structured_prune`` modification (kept indices per layer,
removed layers), so ``load_model`` rebuilds the same shapes from config.json before loading the weights. The
config keeps the base architecture; the modification list describes what was cut from it.
"""

from __future__ import annotations

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.models.loader import MODIFIERS, record_modification
from ptmlab.models.structure import require_split_qkv, structure_of


def head_dim(model) -> int:
    c = model.config
    return c.hidden_size // c.num_attention_heads


def heads_per_layer(model) -> list[int]:
    """Current number of heads in each layer (fewer than the config's after pruning)."""
    s = structure_of(model)
    return [s.part(model, i, "attn_output").in_features // head_dim(model) for i in range(s.num_layers(model))]


def ffn_per_layer(model) -> list[int]:
    s = structure_of(model)
    return [s.part(model, i, "ffn_in").out_features for i in range(s.num_layers(model))]


def _slice_linear(lin: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A new Linear keeping ``index`` along the output (dim 0) or input (dim 1) features."""
    w = lin.weight.detach().index_select(dim, index.to(lin.weight.device)).clone()
    out_f, in_f = w.shape
    new = nn.Linear(in_f, out_f, bias=lin.bias is not None, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        new.weight.copy_(w)
        if lin.bias is not None:
            new.bias.copy_(lin.bias.detach()[index] if dim == 0 else lin.bias.detach())
    new.train(lin.training)
    return new


def _set_part(model, layer: int, name: str, new: nn.Module) -> None:
    s = structure_of(model)
    path = getattr(s, name)
    parent_path, _, attr = path.rpartition(".")
    parent = s.layer(model, layer).get_submodule(parent_path) if parent_path else s.layer(model, layer)
    setattr(parent, attr, new)


def _slice_heads(model, layer: int, keep: list[int]) -> None:
    s = require_split_qkv(model, "head pruning")  # a fused q/k/v projection (ModernBERT) cannot be sliced so
    d = head_dim(model)
    n_now = s.part(model, layer, "attn_output").in_features // d
    if not keep:
        raise PtmlabError(f"pruning would remove every head of layer {layer}: keep at least one head per layer, "
                          f"or remove the whole layer (--layers {layer})")
    if any(not 0 <= h < n_now for h in keep) or len(set(keep)) != len(keep):
        raise PtmlabError(f"heads to keep {keep} in layer {layer} are invalid: it has heads 0..{n_now - 1}")
    cols = torch.tensor([h * d + j for h in sorted(keep) for j in range(d)], dtype=torch.long)
    for part in ("query", "key", "value"):
        _set_part(model, layer, part, _slice_linear(s.part(model, layer, part), cols, 0))
    _set_part(model, layer, "attn_output", _slice_linear(s.part(model, layer, "attn_output"), cols, 1))
    attn = s.layer(model, layer).get_submodule(s.self_attention)
    for attr, value in (("num_attention_heads", len(keep)), ("n_heads", len(keep)), ("all_head_size", len(keep) * d)):
        if hasattr(attn, attr):
            setattr(attn, attr, value)
    if s.family == "mpnet":
        _keep_position_bias(attn, sorted(keep))


def _keep_position_bias(attn: nn.Module, keep: list[int]) -> None:
    """MPNet shares one relative-position bias [b, heads, t, t] across layers: each layer reads its kept heads."""
    prev = getattr(attn, "_ptmlab_bias_heads", None)
    index = torch.tensor(keep, dtype=torch.long) if prev is None else prev[torch.tensor(keep, dtype=torch.long)]
    attn._ptmlab_bias_heads = index
    if getattr(attn, "_ptmlab_bias_hook", None) is None:
        def hook(module, args, kwargs):
            idx = module._ptmlab_bias_heads
            if "position_bias" in kwargs and kwargs["position_bias"] is not None:
                kwargs["position_bias"] = kwargs["position_bias"][:, idx.to(kwargs["position_bias"].device)]
            elif len(args) > 2 and args[2] is not None:
                args = (*args[:2], args[2][:, idx.to(args[2].device)], *args[3:])
            return args, kwargs
        attn._ptmlab_bias_hook = attn.register_forward_pre_hook(hook, with_kwargs=True)


def _slice_ffn(model, layer: int, keep: list[int]) -> None:
    s = structure_of(model)
    n_now = s.part(model, layer, "ffn_in").out_features
    if not keep:
        raise PtmlabError(f"pruning would remove every FFN neuron of layer {layer}: keep at least one")
    if any(not 0 <= j < n_now for j in keep) or len(set(keep)) != len(keep):
        raise PtmlabError(f"FFN neurons to keep in layer {layer} are invalid: it has neurons 0..{n_now - 1}")
    idx = torch.tensor(sorted(keep), dtype=torch.long)
    _set_part(model, layer, "ffn_in", _slice_linear(s.part(model, layer, "ffn_in"), idx, 0))
    _set_part(model, layer, "ffn_out", _slice_linear(s.part(model, layer, "ffn_out"), idx, 1))


@MODIFIERS.register("structured_prune", help="heads, FFN neurons and layers removed by weight slicing")
def prune_structure(model, heads: dict | None = None, ffn: dict | None = None, layers: list[int] | None = None,
                    record: bool = True) -> None:
    """Keep the listed heads / FFN neurons per layer (``{layer: [kept indices]}``) and delete whole ``layers``.

    Layer numbers refer to the model as it is before this call; layers are removed last.
    """
    s = structure_of(model)
    n = s.num_layers(model)
    heads = {int(k): [int(h) for h in v] for k, v in (heads or {}).items()}
    ffn = {int(k): [int(j) for j in v] for k, v in (ffn or {}).items()}
    layers = sorted({int(i) for i in (layers or [])})
    for i in [*heads, *ffn, *layers]:
        if not 0 <= i < n:
            raise PtmlabError(f"layer {i} is out of range: the model has layers 0..{n - 1}")
    if len(layers) >= n:
        raise PtmlabError(f"removing layers {layers} would leave no layer: keep at least one of the {n} layers")
    for i, keep in heads.items():
        _slice_heads(model, i, keep)
    for i, keep in ffn.items():
        _slice_ffn(model, i, keep)
    if layers:
        layer_list = s.layer_list(model)
        kept = [m for i, m in enumerate(layer_list) if i not in layers]
        layer_list._modules.clear()
        for j, m in enumerate(kept):
            layer_list.add_module(str(j), m)
    if record:
        record_modification(model, "structured_prune", heads={str(k): v for k, v in heads.items()},
                            ffn={str(k): v for k, v in ffn.items()}, layers=layers)


def mask_to_keep(mask: list[list[bool]] | torch.Tensor) -> dict[int, list[int]]:
    """{layer: kept indices} from a keep-mask per layer, listing only layers that lose something."""
    out = {}
    for i, row in enumerate(mask):
        row = [bool(x) for x in row]
        if not all(row):
            out[i] = [j for j, k in enumerate(row) if k]
    return out
