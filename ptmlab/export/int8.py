"""Reloadable torch dynamic int8: Linear layers stored as int8 weights + scales in safetensors, rebuilt on load.

``torch.ao`` quantized modules keep their weights in packed C++ objects that safetensors cannot hold, so the saved
form is plain tensors: the int8 weight, its scale (symmetric, zero point 0, per tensor as torch's default dynamic
qconfig chooses), and the fp32 bias. ``Int8Linear`` holds those tensors and runs them through torch's dynamic
quantized Linear (the same kernel ``quantize_dynamic`` uses), so a reloaded model computes exactly what the
in-memory quantized one did. The change is the ``torch_int8`` modification (the quantized layer names), so
``load_model`` on an exported directory rebuilds it after the model's other modifications.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.models.loader import MODIFIERS, record_modification

TORCH_INT8 = "torch_int8"


class Int8Linear(nn.Module):
    """A Linear whose weight is int8 (buffers ``weight`` and ``scale``) computed by torch's dynamic int8 kernel."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("scale", torch.ones(1, dtype=torch.float64))
        self.bias = nn.Parameter(torch.zeros(out_features), requires_grad=False) if bias else None
        object.__setattr__(self, "_kernel", None)

    @classmethod
    def from_linear(cls, lin: nn.Linear) -> Int8Linear:
        from torch.ao.quantization import default_dynamic_qconfig

        new = cls(lin.in_features, lin.out_features, lin.bias is not None)
        observer = default_dynamic_qconfig.weight()
        w = lin.weight.detach().float().cpu()
        observer(w)
        scale, zero = observer.calculate_qparams()
        if int(zero.flatten()[0]) != 0:
            raise PtmlabError("torch's default int8 weight observer returned a non-zero zero point: this torch "
                              "version quantizes differently; use --format onnx-int8")
        with warnings.catch_warnings():  # quantized tensors are deprecated in favour of torchao, still the kernel
            warnings.simplefilter("ignore")
            q = torch.quantize_per_tensor(w, float(scale.flatten()[0]), 0, torch.qint8)
        with torch.no_grad():
            new.weight.copy_(q.int_repr())
            new.scale.fill_(float(q.q_scale()))
            if lin.bias is not None:
                new.bias.copy_(lin.bias.detach().float().cpu())
        return new

    def _load_from_state_dict(self, *args, **kwargs):
        object.__setattr__(self, "_kernel", None)
        return super()._load_from_state_dict(*args, **kwargs)

    def _build(self):
        from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            q = torch._make_per_tensor_quantized_tensor(self.weight.cpu(), float(self.scale[0]), 0)
            kernel = DynamicLinear(self.in_features, self.out_features, bias_=self.bias is not None,
                                   dtype=torch.qint8)
        kernel.set_weight_bias(q, None if self.bias is None else self.bias.detach().float().cpu())
        object.__setattr__(self, "_kernel", kernel)
        return kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = self.__dict__["_kernel"] or self._build()
        return kernel(x.float()).to(x.dtype)


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, attr = name.rpartition(".")
    owner = model.get_submodule(parent) if parent else model
    old = owner.get_submodule(attr)
    new._forward_hooks.update(old._forward_hooks)  # adapters and ghost modules hook their projection
    new._forward_pre_hooks.update(old._forward_pre_hooks)
    for k, v in old.__dict__.items():
        if k.startswith("_ptmlab"):
            object.__setattr__(new, k, v)
    setattr(owner, attr, new)


@MODIFIERS.register(TORCH_INT8, help="torch dynamic int8 Linear layers (int8 weights + scales in safetensors)")
def use_int8_linears(model: nn.Module, layers: list[str], record: bool = True) -> None:
    """Replace the named Linear layers by int8 ones: quantized from their weights, or (on load) empty to be filled."""
    modules = dict(model.named_modules())
    for name in layers:
        lin = modules.get(name)
        if not isinstance(lin, nn.Linear):
            raise PtmlabError(f"torch_int8 layer '{name}' is not a Linear layer of this model: the model directory "
                              f"is inconsistent")
        new = Int8Linear.from_linear(lin) if record else Int8Linear(lin.in_features, lin.out_features,
                                                                     lin.bias is not None)
        _replace(model, name, new)
    if record:
        record_modification(model, TORCH_INT8, layers=list(layers))


def is_int8(model: nn.Module) -> bool:
    return any(m.get("kind") == TORCH_INT8 for m in (getattr(model.config, "ptmlab_modifications", None) or []))
