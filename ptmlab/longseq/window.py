"""Sliding-window + global attention (Longformer's pattern), computed blockwise so cost grows as n·w, not n².

Token i attends to every key j with ``|i - j| <= ceil(window / 2)`` (``window`` is the total width, half on each
side) plus the global positions ([CLS] = position 0 by default); a global token attends to, and is attended by,
every token. Padded keys never receive attention.

How it stays linear: queries are cut into chunks of ``c`` positions (``c`` = half the window); chunk b only needs
the keys of chunks b-1, b, b+1, so each chunk runs one small softmax over ``3c`` local keys plus the ``g`` global
keys, and the ``g`` global query rows run one full-length softmax each. Both are single batched calls of
``torch.nn.functional.scaled_dot_product_attention`` (fused softmax, dropout, masking), so the largest tensor is
``n x 3c`` per head, never ``n x n``. Global keys are taken out of the local band and added once as extra columns,
so whenever the window covers the whole sequence the result equals full attention exactly (up to float rounding).

The function is registered with transformers' ``AttentionInterface`` (and a matching ``AttentionMaskInterface``
entry that hands the 2D padding mask through instead of building an n x n one), so a stock BERT / RoBERTa /
ELECTRA / DistilBERT runs it with ``attn_implementation="ptmlab_window"``; the window and global positions come from
``config.ptmlab_window`` and ``config.ptmlab_global_tokens``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ptmlab.core.errors import PtmlabError

ATTN_NAME = "ptmlab_window"
DEFAULT_WINDOW = 256
DEFAULT_GLOBAL = (0,)


def even_window(window: int) -> int:
    """The window actually used: at least 2 and even (an odd width is rounded up, so both sides are equal)."""
    window = int(window)
    if window < 2:
        raise PtmlabError(f"window {window} is too small: use a window of at least 2 tokens (e.g. 256)")
    return window + (window % 2)


def _blocks(x: torch.Tensor, before: int, after: int, span: int, step: int) -> torch.Tensor:
    """Pad dim 2 of x by (before, after) and cut overlapping blocks of ``span`` every ``step`` -> dim 2 = blocks."""
    if x.dim() == 4:  # (B, H, N, D)
        x = F.pad(x, (0, 0, before, after))
        return x.unfold(2, span, step).transpose(-1, -2)  # (B, H, M, span, D)
    x = F.pad(x, (before, after))  # (B, N) bool
    return x.unfold(1, span, step)  # (B, M, span)


def window_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_mask: torch.Tensor | None,
                     window: int, global_positions: Sequence[int] = DEFAULT_GLOBAL, scaling: float | None = None,
                     dropout: float = 0.0) -> torch.Tensor:
    """Sliding-window + global attention.

    query/key/value: (batch, heads, n, head_dim); key_mask: (batch, n) bool, True where a token is real (None: all
    real). Returns (batch, heads, n, head_dim).
    """
    b, h, n, d = query.shape
    half = even_window(window) // 2
    if key_mask is None:
        key_mask = torch.ones(b, n, dtype=torch.bool, device=query.device)
    key_mask = key_mask.to(torch.bool)
    gpos = sorted({int(p) for p in global_positions if 0 <= int(p) < n})
    is_global = torch.zeros(n, dtype=torch.bool, device=query.device)
    if gpos:
        is_global[gpos] = True

    c = max(1, min(half, n))  # chunk length
    r = max(1, math.ceil(min(half, n - 1) / c))  # neighbouring chunks on each side a chunk needs
    m = math.ceil(n / c)
    total = m * c
    span = (2 * r + 1) * c
    q_blocks = F.pad(query, (0, 0, 0, total - n)).view(b, h, m, c, d)
    k_blocks = _blocks(key, r * c, total - n + r * c, span, c)
    v_blocks = _blocks(value, r * c, total - n + r * c, span, c)
    local_ok = _blocks(key_mask & ~is_global, r * c, total - n + r * c, span, c)  # (B, M, span)
    offset = torch.arange(span, device=query.device)[None, :] - r * c - torch.arange(c, device=query.device)[:, None]
    band = offset.abs() <= half  # (c, span): key kk of the block is within the window of query qq
    mask = band[None, None] & local_ok[:, :, None, :]  # (B, M, c, span)
    if gpos:
        gidx = torch.tensor(gpos, device=query.device)
        g = len(gpos)
        k_blocks = torch.cat([k_blocks, key[:, :, gidx, None].transpose(2, 3).expand(b, h, m, g, d)], dim=3)
        v_blocks = torch.cat([v_blocks, value[:, :, gidx, None].transpose(2, 3).expand(b, h, m, g, d)], dim=3)
        g_ok = key_mask[:, gidx][:, None, None, :].expand(b, m, c, g)
        mask = torch.cat([mask, g_ok], dim=3)
    p = dropout if torch.is_grad_enabled() else 0.0
    out = F.scaled_dot_product_attention(q_blocks, k_blocks, v_blocks, attn_mask=mask[:, None], dropout_p=p,
                                         scale=scaling)
    out = out.reshape(b, h, total, d)[:, :, :n]
    if gpos:
        g_out = F.scaled_dot_product_attention(query[:, :, gidx], key, value, attn_mask=key_mask[:, None, None, :],
                                               dropout_p=p, scale=scaling)
        out = out.index_copy(2, gidx, g_out)
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
    if not module.training:
        dropout = 0.0
    out = window_attention(query, key, value, attention_mask, window, glob, scaling=scaling, dropout=dropout)
    return out.transpose(1, 2).contiguous(), None


def _padding_mask(batch_size=None, q_length=None, kv_length=None, attention_mask=None, **kwargs):
    """``AttentionMaskInterface`` entry: keep the (batch, length) padding mask as it is (None: no padding)."""
    if attention_mask is None or bool(attention_mask.all()):
        return None
    return attention_mask.to(torch.bool)


def register() -> None:
    """Make ``attn_implementation="ptmlab_window"`` known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTN_NAME, _interface_forward)
    AttentionMaskInterface.register(ATTN_NAME, _padding_mask)


register()
