"""Dropout with a cheaper random mask on CPU, for training.

On a CPU, torch's dropout draws one random number per element (``bernoulli_``), and that draw is most of its cost:
at SST-2 lengths dropout is about a sixth of a fine-tuning step of a 6-layer encoder, at 512 tokens more than half
(``benchmarks/first_token.py``), because CPU ``scaled_dot_product_attention`` with ``dropout_p > 0`` leaves its
fused kernel and drops the batch x heads x length x length attention probabilities element by element.

Here one 64-bit random word serves four elements: ``random_`` over the whole int64 range, viewed as four int16,
and an element is kept when its 16 bits are at or above ``p`` x 65536. That is a Bernoulli(1 - p') keep with p'
the dropout rate rounded to a multiple of 1/65536 (0.1 becomes 0.100006), scaled by 1 / (1 - p') so the expected
output equals the input, from torch's own seeded generator (``torch.manual_seed`` reproduces it). The forward pass
is about 3x cheaper than torch's on a CPU; the backward pass is the same multiply by the saved mask.

``fast_dropout(model)`` puts it in two places while a model trains and returns a handle whose ``remove()`` undoes
both: every ``nn.Dropout`` module (its class swapped for ``FastDropout``, a subclass, so parameters, state dicts and
``isinstance`` checks are unchanged), and, for a model on transformers' ``sdpa`` attention with attention dropout,
the attention function (``ATTN_NAME``): while training on a CPU with dropout it runs the math kernel CPU sdpa
itself falls back to when it drops, handed this module's keep mask; everywhere else (evaluation, a GPU, no
dropout) it is transformers' sdpa function unchanged. ``fine_tune`` installs it unless ``--no-fast-dropout``.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

# PyTorch's math attention kernel warns when handed a dropout mask (a testing hook upstream); here the mask is the
# point, drawn as documented above. Where torch routes the warning through Python, this filter drops it; where it
# writes it straight to the C++ log (a training run's first step, from torch.ops), _silence_mask_warning spends
# the warning's once-per-process firing at import with stderr briefly pointed at /dev/null.
warnings.filterwarnings("ignore", message="Dropout mask should only be used for testing purposes")

ATTN_NAME = "ptmlab_sdpa"
_LEVELS = 1 << 16


def keep_mask(shape: torch.Size | tuple[int, ...], threshold: int, device: torch.device) -> torch.Tensor:
    """A bool tensor of ``shape``: each element True with probability 1 - threshold / 65536, independently."""
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), None)
    bits = words.view(torch.int16)[:n].view(shape)
    return bits >= threshold - (1 << 15)


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with the cheaper mask on CPU (p rounded to a multiple of 1/65536); on other
    devices torch's own dropout."""
    if not training or p <= 0:
        return x
    if p >= 1 or x.device.type != "cpu":
        return F.dropout(x, p, training)
    threshold = round(p * _LEVELS)
    if threshold == 0:
        return x
    keep = keep_mask(x.shape, threshold, x.device)
    return torch.where(keep, x * (_LEVELS / (_LEVELS - threshold)), 0.0)


class FastDropout(nn.Dropout):
    """``nn.Dropout`` drawing its mask with ``dropout`` (same ``p``, same behaviour in eval mode)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.inplace:
            return super().forward(input)
        return dropout(input, self.p, self.training)  # torch's own off the CPU


def _math_kernel():
    """PyTorch's math attention kernel, or None in a torch without it."""
    return getattr(torch.ops.aten, "_scaled_dot_product_attention_math", None)


def _math_attention(query, key, value, attention_mask, scaling, position_bias, p):
    """Attention with this module's dropout on the probabilities: (B, N, H, D). PyTorch's own math kernel (what
    CPU sdpa runs when it drops) takes the keep mask as an argument, so only the mask's drawing changes; a torch
    without that kernel gets the same computation written out."""
    threshold = round(p * _LEVELS)
    rate = threshold / _LEVELS
    mask = attention_mask
    if position_bias is not None:
        from transformers.integrations.sdpa_attention import create_position_bias_mask

        mask = create_position_bias_mask(position_bias, mask, False, query, key)
    if mask is not None and mask.dtype == torch.bool:  # additive, as sdpa converts it before its kernels
        mask = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(~mask, float("-inf"))
    keep = keep_mask((*query.shape[:-1], key.shape[-2]), threshold, query.device) if threshold else None
    math = _math_kernel()
    if math is not None:
        try:
            out = math(query, key, value, mask, rate if keep is not None else 0.0, False, keep, scale=scaling)[0]
            return out.transpose(1, 2).contiguous()
        except (RuntimeError, TypeError):  # another signature in another torch: the written-out form below
            pass
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query * scale, key.transpose(-1, -2))
    if mask is not None:
        scores = scores + mask
    probs = torch.softmax(scores, dim=-1)
    if keep is not None:
        probs = torch.where(keep, probs * (1 / (1 - rate)), 0.0)
    return torch.matmul(probs, value).transpose(1, 2).contiguous()


def _attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None,
               position_bias=None, **kwargs):
    """transformers ``AttentionInterface`` entry: sdpa, except while training on a CPU with attention dropout."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
    plain = (not module.training or dropout <= 0 or query.device.type != "cpu" or causal
             or getattr(module, "num_key_value_groups", 1) > 1 or kwargs.get("softcap") is not None
             or kwargs.get("output_attentions", False))
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, position_bias=position_bias, **kwargs)
    return _math_attention(query, key, value, attention_mask, scaling, position_bias, dropout), None


def _silence_mask_warning() -> None:
    """Call the math kernel once with a mask while file descriptor 2 points at /dev/null (TORCH_WARN_ONCE)."""
    import os

    math = _math_kernel()
    if math is None:
        return
    q = torch.zeros(1, 1, 1, 1)
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to mute (a daemon with fd 2 closed): nothing would print either
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            math(q, q, q, None, 0.5, False, torch.ones(1, 1, 1, 1, dtype=torch.bool))
    except (RuntimeError, TypeError):  # another signature: _math_attention falls back to the written-out form
        pass
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTN_NAME, _attention)
    AttentionMaskInterface.register(ATTN_NAME, AttentionMaskInterface._global_mapping["sdpa"])


_register()
_silence_mask_warning()


class FastDropoutHandle:
    """What ``fast_dropout`` changed; ``remove()`` puts the model back as it was."""

    def __init__(self, model: nn.Module, swapped: list[nn.Module], attention_before: str | None):
        self.model, self.swapped, self.attention_before = model, swapped, attention_before

    def remove(self) -> None:
        for m in self.swapped:
            if type(m) is FastDropout:
                m.__class__ = nn.Dropout
        self.swapped = []
        if self.attention_before is not None:
            self.model.set_attn_implementation(self.attention_before)
            self.attention_before = None


def fast_dropout(model: nn.Module) -> FastDropoutHandle:
    """Swap the model's dropout (modules and, on sdpa, attention dropout) for the cheaper CPU mask while it
    trains; the handle's ``remove()`` restores it."""
    swapped = []
    for m in model.modules():
        if type(m) is nn.Dropout:
            m.__class__ = FastDropout
            swapped.append(m)
    before = None
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) == "sdpa" and hasattr(model, "set_attn_implementation"):
        try:
            model.set_attn_implementation(ATTN_NAME)
            before = "sdpa"
        except (ValueError, KeyError):  # a model class that refuses custom attention: its modules' dropout only
            before = None
    return FastDropoutHandle(model, swapped, before)
