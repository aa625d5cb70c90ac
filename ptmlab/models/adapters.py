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



class LoraAdapter:
    """A LoRA model's adapter (its PEFT config and the LoRA and ``modules_to_save`` weights), kept before the
    LoRA weights are merged into the model: merging consumes them."""

    def __init__(self, config, state: dict):
        self.config = config
        self.state = state

    @classmethod
    def of(cls, model) -> LoraAdapter | None:
        """The active adapter of a PEFT model, copied to the CPU; None for any other model."""
        import copy

        model = getattr(model, "module", model)
        if not hasattr(model, "peft_config") or not hasattr(model, "active_adapter"):
            return None
        from peft.utils import get_peft_model_state_dict

        name = model.active_adapter
        state = get_peft_model_state_dict(model, adapter_name=name, save_embedding_layers=False)
        return cls(copy.deepcopy(model.peft_config[name]),
                   {k: v.detach().cpu().clone().contiguous() for k, v in state.items()})

    def save(self, out_dir: str | Path, model_name: str, base_model=None, tokenizer=None) -> None:
        """Write the adapter in PEFT's format (``adapter_config.json``, ``adapter_model.safetensors``) to
        ``out_dir``, replacing what is there, for ``PeftModel.from_pretrained(base, out_dir)``. ``model_name``: the
        model it was trained from, recorded as the base by ``lora_base``. ``base_model``: the base itself where no
        name loads its weights (a random-weight base), saved with ``tokenizer`` in ``out_dir/base``."""
        import copy
        import os
        import shutil
        import tempfile

        from safetensors.torch import save_file

        from ptmlab.models.loader import save_model

        out = Path(out_dir)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".lora-", dir=out.parent))
        try:
            config = copy.deepcopy(self.config)
            config.base_model_name_or_path, config.revision = lora_base(model_name)[:2] if base_model is None \
                else (None, None)
            config.inference_mode = True
            save_file(self.state, tmp / "adapter_model.safetensors", metadata={"format": "pt"})
            config.save_pretrained(str(tmp))
            if base_model is not None:
                save_model(base_model, tokenizer, tmp / "base")
            shutil.rmtree(out, ignore_errors=True)
            os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def lora_base(model_name: str, random_init: bool = False) -> tuple[str | None, str | None, bool]:
    """The base a LoRA adapter trained from ``model_name`` records: (``base_model_name_or_path``, ``revision``,
    whether its weights are random). A hub id and its revision, ``zoo:NAME`` for a zoo model, a local directory's
    absolute path; (None, None, True) where no name loads the base's weights: ``tiny`` and ``--random-init`` draw
    them from the run's seed."""
    from ptmlab.models.zoo import ZOO

    if random_init:
        return None, None, True
    p = Path(model_name).expanduser()
    if not model_name.startswith("zoo:") and p.is_dir():  # a directory wins over a zoo name, as in zoo.resolve
        return str(p.resolve()), None, False
    zoo_name = model_name.removeprefix("zoo:")
    if zoo_name in ZOO:
        if ZOO.get(zoo_name).random_config is not None:
            return None, None, True
        return f"zoo:{zoo_name}", None, False
    repo, _, revision = model_name.partition("@")
    return repo, revision or None, False
