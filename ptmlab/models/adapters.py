"""Houlsby bottleneck adapters: a small residual MLP after each attention output and each FFN output.

Adapters attach as submodules named ``adapter`` next to the projection they follow (so their weights have
stable names) and run through a forward hook on that projection; no model class is rewritten. Near-identity at
init (the up-projection starts at zero).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_save_file, atomic_write_json
from ptmlab.models.loader import MODIFIERS, record_modification
from ptmlab.models.structure import structure_of


class Adapter(nn.Module):
    def __init__(self, hidden: int, size: int):
        super().__init__()
        self.down = nn.Linear(hidden, size)
        self.up = nn.Linear(size, hidden)
        nn.init.normal_(self.down.weight, std=1e-3)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.up(torch.nn.functional.gelu(self.down(h)))


def _hook(module, inputs, output):
    return module._ptmlab_adapter(output)


@MODIFIERS.register("adapter", help="Houlsby bottleneck adapters")
def add_adapters(model, size: int = 64, record: bool = True) -> list[nn.Module]:
    """Insert adapters after attention and FFN outputs of every layer; returns the adapter modules."""
    s = structure_of(model)
    hidden = model.config.hidden_size
    added = []
    for i in range(s.num_layers(model)):
        layer = s.layer(model, i)
        for part, name in (("attn_output", "attn_adapter"), ("ffn_out", "ffn_adapter")):
            proj = layer.get_submodule(getattr(s, part))
            if hasattr(layer, name):
                raise PtmlabError("the model already has adapters: load it without adding them again")
            adapter = Adapter(hidden, size).to(proj.weight.device)
            layer.add_module(name, adapter)
            # a plain attribute: the hook needs it, the state dict must not list it twice
            object.__setattr__(proj, "_ptmlab_adapter", adapter)
            proj.register_forward_hook(_hook)
            added.append(adapter)
    if record:
        record_modification(model, "adapter", size=size)
    return added


def adapter_trainable_names(model) -> list[str]:
    """Parameters trained in adapter tuning: adapters, LayerNorms and the task head."""
    s = structure_of(model)
    head_prefixes = tuple(h + "." for h in s.head) + ((f"{s.base}.{s.pooler}.",) if s.pooler else ())
    names = []
    for n, _ in model.named_parameters():
        if "_adapter." in n or "LayerNorm" in n or "layer_norm" in n or n.startswith(head_prefixes):
            names.append(n)
    return names


def save_adapters(model, out_dir: str | Path) -> None:
    """Save only what adapter tuning trained, to apply on top of the same base model later."""
    names = set(adapter_trainable_names(model))
    state = {n: p.detach().cpu() for n, p in model.named_parameters() if n in names}
    mods = [m for m in getattr(model.config, "ptmlab_modifications", []) if m["kind"] == "adapter"]
    out = Path(out_dir)
    atomic_save_file(state, out / "adapter_model.safetensors")
    atomic_write_json(out / "adapter_config.json", {"kind": "adapter", "size": mods[-1]["size"] if mods else 64,
                                                     "num_labels": model.config.num_labels})


def load_adapters(model, adapter_dir: str | Path):
    """Add adapters to a base model and load adapter, LayerNorm and head weights saved by ``save_adapters``."""
    import json

    from safetensors.torch import load_file

    d = Path(adapter_dir)
    if not (d / "adapter_config.json").is_file():
        raise PtmlabError(f"'{d}' holds no adapter_config.json: pass a directory written by save_adapters")
    cfg = json.loads((d / "adapter_config.json").read_text())
    add_adapters(model, size=int(cfg["size"]))
    state = load_file(d / "adapter_model.safetensors")
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected:
        raise PtmlabError(f"adapter weights in '{d}' do not fit this model (unexpected {unexpected[:3]})")
    return model
