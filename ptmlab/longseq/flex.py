"""The window + global attention of ``window`` through PyTorch's FlexAttention: the fast path on a GPU.

On the H200 of session 12 ptmlab's blockwise kernel (``window.py``) was 2-3x slower than FlexAttention with a
sliding-window block mask (a batch-1 forward is bound by kernel launches there, and the blockwise path launches
several small kernels per chunk layout); on the CPU it is the other way round (the blockwise path is 1.6-1.7x faster
than compiled FlexAttention, BENCHMARKS.md). So ``window`` sends CUDA tensors here and keeps the blockwise kernel on
the CPU; ``PTMLAB_WINDOW_KERNEL=blocks|flex`` (or ``set_kernel``) forces one for comparison.

The attention pattern is the same (``|i - j| <= window / 2``, global positions attend and are attended everywhere,
padded keys never): the mask is the ``mask_mod`` below, and which 128 x 128 tiles can hold an allowed pair is
worked out directly from the band and the global positions (``_tiles``), never by evaluating an n x n mask, so
building the block mask costs O((n / 128)²) booleans. Sequences are padded to a multiple of 128 (padded keys masked,
padded queries cut off) so that a run with varying lengths meets few distinct shapes. FlexAttention has no dropout,
so training with attention dropout stays on the blockwise kernel. On CUDA the call is compiled (``_run``); any
failure there falls back to the blockwise kernel, with one warning, so a model never stops running because of this
path.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import torch

TILE = 128  # FlexAttention's default sparse block size
_STATE: dict = {"fns": {}, "mode": "dynamic", "dynamic_error": None, "broken": None, "compile_cpu": False}
_TILES: dict = {}


def available() -> bool:
    """Whether this PyTorch has FlexAttention and the last compiled call did not fail."""
    if _STATE["broken"] is not None:
        return False
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def _tiles(n_pad: int, half: int, gpos: tuple[int, ...], device) -> tuple[torch.Tensor, torch.Tensor]:
    """(kv_num_blocks, kv_indices) of a (1, 1) block mask: for every query tile, the key tiles within the band,
    the tiles holding a global key, and every tile for a query tile holding a global query."""
    key = (n_pad, half, gpos, str(device))
    if key not in _TILES:
        nb = n_pad // TILE
        q = torch.arange(nb)
        lo = torch.clamp((q * TILE - half) // TILE, min=0)
        hi = torch.clamp((q * TILE + TILE - 1 + half) // TILE, max=nb - 1)
        kv = torch.arange(nb)
        need = (kv[None, :] >= lo[:, None]) & (kv[None, :] <= hi[:, None])
        gtiles = sorted({p // TILE for p in gpos})
        need[:, gtiles] = True
        need[gtiles, :] = True
        num = need.sum(1).to(torch.int32)
        order = torch.argsort((~need).to(torch.int8), dim=1, stable=True).to(torch.int32)  # needed tiles first
        _TILES[key] = (num[None, None].to(device), order[None, None].to(device).contiguous())
    return _TILES[key]


def _call(query, key, value, block_mask, scale):
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(query, key, value, block_mask=block_mask, scale=scale)


def _call_static(query, key, value, block_mask, scale):
    """The same as ``_call``; a separate function so that its compiled kernels keep their own cache."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(query, key, value, block_mask=block_mask, scale=scale)


def _compiled(mode: str):
    if mode not in _STATE["fns"]:
        _STATE["fns"][mode] = (torch.compile(_call) if mode == "dynamic"
                               else torch.compile(_call_static, dynamic=False))
    return _STATE["fns"][mode]


def _run(query, key, value, block_mask, scale):
    """FlexAttention, compiled on CUDA (its fused kernel; eager FlexAttention writes out the n x n scores and ignores
    the tile sparsity, so it is for checking on a CPU only). The compile first lets shapes become dynamic after
    the first change of length (one kernel for all lengths); if that fails (it does on a CPU: a C++ compile error),
    one static kernel per shape, with room for 64 shapes (lengths are padded to multiples of 128)."""
    if query.device.type != "cuda" and not _STATE["compile_cpu"]:
        return _call(query, key, value, block_mask, scale)
    if _STATE["mode"] == "dynamic":
        try:
            return _compiled("dynamic")(query, key, value, block_mask, scale)
        except Exception as e:  # noqa: BLE001 - fall back to static shapes, below
            _STATE["mode"], _STATE["dynamic_error"] = "static", f"{type(e).__name__}: {str(e)[:200]}"
    import torch._dynamo

    with torch._dynamo.config.patch(recompile_limit=64):
        return _compiled("static")(query, key, value, block_mask, scale)


def flex_window_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_mask: torch.Tensor | None,
                          window: int, global_positions: Sequence[int], scaling: float | None = None
                          ) -> torch.Tensor:
    """Sliding-window + global attention with FlexAttention.

    query/key/value: (batch, heads, n, head_dim); key_mask: (batch, n) bool, True where a token is real (None: all
    real). Returns (batch, heads, n, head_dim). Rows with no visible key come out as 0, as in ``window``.
    """
    from torch.nn.attention.flex_attention import BlockMask

    from ptmlab.longseq.window import even_window

    b, _, n, _ = query.shape
    dev = query.device
    half = even_window(window) // 2
    n_pad = math.ceil(n / TILE) * TILE
    gpos = tuple(sorted({int(p) for p in global_positions if 0 <= int(p) < n}))
    key_ok = torch.zeros(b, n_pad, dtype=torch.bool, device=dev)
    key_ok[:, :n] = True if key_mask is None else key_mask.to(device=dev, dtype=torch.bool)
    is_global = torch.zeros(n_pad, dtype=torch.bool, device=dev)
    is_global[list(gpos)] = True
    if n_pad != n:
        pad = (0, 0, 0, n_pad - n)
        query, key, value = (torch.nn.functional.pad(t, pad) for t in (query, key, value))

    def mask_mod(bi, h, qi, ki):
        return key_ok[bi, ki] & (((qi - ki).abs() <= half) | is_global[qi] | is_global[ki])

    num, idx = _tiles(n_pad, half, gpos, dev)
    block_mask = BlockMask.from_kv_blocks(num, idx, BLOCK_SIZE=TILE, mask_mod=mask_mod, seq_lengths=(n_pad, n_pad))
    out = _run(query, key, value, block_mask, scaling)
    return out[:, :, :n]


def run_or_fall_back(fn, fallback):
    """``fn()``; if FlexAttention fails (a compile error on an untested GPU stack), warn once, stop using it in this
    process and return ``fallback()``."""
    if _STATE["broken"] is None:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - any failure of the fast path must leave the model running
            _STATE["broken"] = f"{type(e).__name__}: {e}"
            warnings.warn(f"FlexAttention failed ({_STATE['broken'][:200]}); window attention uses its blockwise "
                          "kernel from now on", RuntimeWarning, stacklevel=2)
    return fallback()
