"""Sliding-window + global attention (Longformer's pattern), computed blockwise so cost grows as n·w, not n².

Token i attends to every key j with ``|i - j| <= ceil(window / 2)`` (``window`` is the total width, half on each
side) plus the global positions ([CLS] = position 0 by default); a global token attends to, and is attended by,
every token. Padded keys never receive attention.

How it stays linear: queries are cut into chunks of ``c`` positions (``c`` = a quarter of the window); chunk b only
needs the keys of chunks b-2 .. b+2, so each chunk runs one softmax over ``5c`` (1.25 x window) local keys plus the
``g`` global keys, and the ``g`` global query rows run one full-length softmax each. Keys and values are copied
once into a chunked layout where every chunk of ``c`` keys is followed by a copy of the ``g`` global keys; a block
(chunks b-2 .. b+2) is then a strided *view* of that buffer (``unfold``), and a mask keeps only the centre chunk's
copy of the global keys, so each counts once. The blocks go to ``torch.nn.functional.scaled_dot_product_attention``
as 4-D (chunks, heads, keys, head_dim) tensors, the form its fused (flash) kernel takes on CPU and GPU, so nothing of
size ``n x 5c`` is copied and no score matrix is written out; the largest intermediate is the boolean mask
(``n x 5c``). Global keys are taken out of the local band and added once, so whenever the window covers the whole
sequence the result equals full attention exactly (up to float rounding).

The function is registered with transformers' ``AttentionInterface`` (and a matching ``AttentionMaskInterface``
entry that hands the 2D padding mask through instead of building an n x n one), so a stock BERT / RoBERTa /
ELECTRA / DistilBERT runs it with ``attn_implementation="ptmlab_window"``; the window and global positions come from
``config.ptmlab_window`` and ``config.ptmlab_global_tokens``.

Which kernel computes it (``kernel_for``): this blockwise one on a CPU, and FlexAttention (``flex.py``) for CUDA
tensors when no attention dropout is applied (FlexAttention has none), since each is the faster one there
(measurements in ``flex.py``; FlexAttention has no backward on a CPU, so it never runs there with gradients); the
environment variable ``PTMLAB_WINDOW_KERNEL=blocks|flex`` or ``set_kernel`` forces one (``auto``: the default).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ptmlab.core.errors import PtmlabError

ATTN_NAME = "ptmlab_window"
DEFAULT_WINDOW = 256
DEFAULT_GLOBAL = (0,)
KERNELS = ("auto", "blocks", "flex")
_KERNEL: dict = {"name": None}  # set_kernel's choice; None: PTMLAB_WINDOW_KERNEL, else auto


def set_kernel(name: str | None) -> None:
    """Force the kernel window attention runs with (``blocks``, ``flex``), or ``auto`` / None for the default."""
    if name is not None and name not in KERNELS:
        raise PtmlabError(f"unknown window-attention kernel {name!r}: use one of {', '.join(KERNELS)}")
    _KERNEL["name"] = name


def kernel_for(device: torch.device, dropout: float, grad: bool = False) -> str:
    """``blocks`` or ``flex`` for a call on ``device`` with attention dropout ``dropout``, ``grad`` if gradients
    will flow through it (see the module doc; FlexAttention has no dropout, and no backward on a CPU)."""
    from ptmlab.longseq import flex

    name = _KERNEL["name"] or os.environ.get("PTMLAB_WINDOW_KERNEL", "auto").strip().lower() or "auto"
    if name not in KERNELS:
        raise PtmlabError(f"PTMLAB_WINDOW_KERNEL={name!r} is not a window-attention kernel: use one of "
                          f"{', '.join(KERNELS)}")
    if name == "auto":
        name = "flex" if device.type == "cuda" else "blocks"
    if name == "flex" and (dropout > 0 or (grad and device.type == "cpu") or not flex.available()):
        return "blocks"
    return name


def even_window(window: int) -> int:
    """The window actually used: at least 2 and even (an odd width is rounded up, so both sides are equal)."""
    window = int(window)
    if window < 2:
        raise PtmlabError(f"window {window} is too small: use a window of at least 2 tokens (e.g. 256)")
    return window + (window % 2)


def _chunked(x: torch.Tensor, c: int, m: int, r: int, glob: torch.Tensor | None) -> torch.Tensor:
    """x: (B, N, ...) -> (B, m + 2r, c + g, ...): the sequence cut into ``m`` chunks of ``c`` (zero-padded at the end),
    with ``r`` empty chunks on each side, and every chunk followed by a copy of the ``g`` global rows (``glob``:
    (B, g, ...) or None). One copy of x, so the sliding blocks over it can be views."""
    b, n = x.shape[:2]
    g = 0 if glob is None else glob.shape[1]
    out = x.new_empty(b, m + 2 * r, c + g, *x.shape[2:])
    out[:, :r] = 0
    out[:, r + m:] = 0
    if m * c > n:
        x = torch.cat([x, x.new_zeros(b, m * c - n, *x.shape[2:])], dim=1)
    out[:, r:r + m, :c] = x.view(b, m, c, *x.shape[2:])
    if g:
        out[:, :, c:] = glob[:, None]
    return out


def window_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_mask: torch.Tensor | None,
                     window: int, global_positions: Sequence[int] = DEFAULT_GLOBAL, scaling: float | None = None,
                     dropout: float = 0.0) -> torch.Tensor:
    """Sliding-window + global attention.

    query/key/value: (batch, heads, n, head_dim); key_mask: (batch, n) bool, True where a token is real (None: all
    real). Returns (batch, heads, n, head_dim).
    """
    return _window_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), key_mask, window,
                             global_positions, scaling, dropout).transpose(1, 2)


def _window_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_mask: torch.Tensor | None,
                      window: int, global_positions: Sequence[int], scaling: float | None,
                      dropout: float) -> torch.Tensor:
    """The same on (batch, n, heads, head_dim) tensors, the layout of the projections, returned in that layout."""
    b, n, h, d = query.shape
    dev = query.device
    half = even_window(window) // 2
    if key_mask is None:
        key_mask = torch.ones(b, n, dtype=torch.bool, device=dev)
    key_mask = key_mask.to(torch.bool)
    gpos = sorted({int(p) for p in global_positions if 0 <= int(p) < n})
    gidx = torch.tensor(gpos, dtype=torch.long, device=dev)
    g = len(gpos)
    is_global = torch.zeros(n, dtype=torch.bool, device=dev)
    is_global[gidx] = True

    c = max(1, min(max(1, half // 2), n))  # chunk length
    r = max(1, math.ceil(min(half, n - 1) / c))  # neighbouring chunks on each side a chunk needs
    m = math.ceil(n / c)
    total = m * c
    row = c + g  # a chunk's keys followed by the global keys
    span = (2 * r + 1) * row  # a block: chunks b-r .. b+r, each with the global keys

    q_blocks = query if total == n else torch.cat([query, query.new_zeros(b, total - n, h, d)], dim=1)
    q_blocks = q_blocks.reshape(b, m, c, h, d).transpose(2, 3)  # (B, M, H, c, D)
    glob_k = key[:, gidx] if g else None
    glob_v = value[:, gidx] if g else None
    k_blocks = _chunked(key, c, m, r, glob_k).flatten(1, 2).unfold(1, span, row)  # (B, M, H, D, span), a view
    v_blocks = _chunked(value, c, m, r, glob_v).flatten(1, 2).unfold(1, span, row)
    k_blocks, v_blocks = k_blocks.transpose(-1, -2), v_blocks.transpose(-1, -2)  # (B, M, H, span, D)

    # which keys of a block each query may see: the local band, and the global keys of the centre chunk only (so
    # each global key counts once); then the padding of each block's keys
    kk = torch.arange(span, device=dev)
    chunk, slot = kk // row, kk % row
    offset = chunk[None, :] * c + slot[None, :] - r * c - torch.arange(c, device=dev)[:, None]
    static = torch.where(slot[None, :] < c, offset.abs() <= half, chunk[None, :] == r)  # (c, span)
    key_ok = _chunked(key_mask & ~is_global, c, m, r, key_mask[:, gidx] if g else None)
    key_ok = key_ok.flatten(1, 2).unfold(1, span, row)  # (B, M, span)
    mask = static[None, None] & key_ok[:, :, None, :]  # (B, M, c, span)

    p = dropout if torch.is_grad_enabled() else 0.0
    # one 4-D call per sequence reaches PyTorch's fused (flash) kernel on strided views, without copying the blocks;
    # fully masked rows (padding far from any real key, no global token) come out as 0 on every backend
    out = query.new_empty(b, m, c, h, d)
    for i in range(b):
        out[i] = F.scaled_dot_product_attention(q_blocks[i], k_blocks[i], v_blocks[i], attn_mask=mask[i, :, None],
                                                dropout_p=p, scale=scaling).transpose(1, 2)
    out = out.view(b, total, h, d)[:, :n]
    if g:
        g_out = F.scaled_dot_product_attention(query[:, gidx].transpose(1, 2), key.transpose(1, 2),
                                               value.transpose(1, 2), attn_mask=key_mask[:, None, None, :],
                                               dropout_p=p, scale=scaling)  # (B, H, g, D)
        out = out.index_copy(1, gidx, g_out.transpose(1, 2))
    return out


def window_settings(config) -> tuple[int, tuple[int, ...]]:
    """(window, global positions) recorded in a model config."""
    window = getattr(config, "ptmlab_window", None) or DEFAULT_WINDOW
    glob = getattr(config, "ptmlab_global_tokens", None)
    return int(window), tuple(int(p) for p in (DEFAULT_GLOBAL if glob is None else glob))


def _interface_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers ``AttentionInterface`` entry: returns (output (B, N, H, D), no attention weights)."""
    if attention_mask is not None and attention_mask.dim() != 2:
        raise PtmlabError(f"window attention takes a 2D padding mask (batch, length), got shape "
                          f"{tuple(attention_mask.shape)}: pass attention_mask as 0/1 per token")
    window, glob = window_settings(getattr(module, "config", None))
    if not module.training or not torch.is_grad_enabled():
        dropout = 0.0

    def blocks():
        return _window_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), attention_mask,
                                 window, glob, scaling, dropout)

    if kernel_for(query.device, dropout, query.requires_grad) == "flex":
        from ptmlab.longseq import flex

        def fast():
            return flex.flex_window_attention(query, key, value, attention_mask, window, glob, scaling).transpose(1, 2)

        return flex.run_or_fall_back(fast, blocks), None
    return blocks(), None


def _padding_mask(batch_size=None, q_length=None, kv_length=None, attention_mask=None, **kwargs):
    """``AttentionMaskInterface`` entry: keep the (batch, length) padding mask as it is (None: no padding)."""
    if attention_mask is None or bool(attention_mask.all()):
        return None
    return attention_mask.to(torch.bool)


def register_attention(name: str, forward) -> None:
    """Make ``attn_implementation=name`` known to transformers with ``forward`` as its attention function and the
    2D padding mask handed through unchanged (idempotent; the memory attention of ``recurrence`` uses it too)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, forward)
    AttentionMaskInterface.register(name, _padding_mask)


register_attention(ATTN_NAME, _interface_forward)
