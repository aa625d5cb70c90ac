"""The window + global attention of ``window`` through PyTorch's FlexAttention: the fast path on a GPU.

On an H200 ptmlab's blockwise kernel (``window.py``) was 2-3x slower than FlexAttention with a
sliding-window block mask (a batch-1 forward is bound by kernel launches there, and the blockwise path launches
several small kernels per chunk layout); on the CPU it is the other way round (the blockwise path is 1.6-1.7x faster
than compiled FlexAttention, BENCHMARKS.md). So ``window`` sends CUDA tensors here and keeps the blockwise kernel on
the CPU; ``PTMLAB_WINDOW_KERNEL=blocks|flex`` (or ``set_kernel``) forces one for comparison.

The attention pattern is the same (``|i - j| <= window / 2``, global positions attend and are attended everywhere,
padded keys never): the mask is the ``mask_mod`` of ``_block_mask``, and which 128 x 128 tiles can hold an allowed
pair, and which hold only allowed pairs (FlexAttention's "full" tiles, where it skips the mask function), is worked
out directly from the band, the global positions and the padding (``_tiles``), never by evaluating an n x n mask,
so building the block mask costs O((n / 128)²) booleans per sequence. Sequences are padded to a multiple of 128
(padded keys masked, padded queries cut off) so that a run with varying lengths meets few distinct shapes.
FlexAttention has no dropout, so training with attention dropout stays on the blockwise kernel. On CUDA the call
is compiled (``_run``); any failure there falls back to the blockwise kernel, with one warning, so a model never
stops running because of this path.
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections.abc import Sequence

import torch

TILE = 128  # FlexAttention's default sparse block size
_STATE: dict = {"fns": {}, "mode": "dynamic", "dynamic_error": None, "broken": None, "compile_cpu": False}
_TILES: dict = {}


def available() -> bool:
    """Whether this PyTorch has FlexAttention and no compiled call has failed (asked once per layer and pass, so the
    import check is made once)."""
    if "importable" not in _STATE:
        try:
            import torch.nn.attention.flex_attention  # noqa: F401
            _STATE["importable"] = True
        except ImportError:
            _STATE["importable"] = False
    return _STATE["importable"] and _STATE["broken"] is None


def _tiles(n_pad: int, half: int, gpos: tuple[int, ...], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Two (tiles x tiles) boolean maps for a query tile against a key tile: ``need``, the pair holds at least one
    allowed (query, key) pair (the band, a global key, a global query), and ``full``, every pair of it lies within
    the band, so with no padded key the kernel can skip the mask function there. Cached per shape, and made outside
    inference mode so a map first built while evaluating can serve training."""
    key = (n_pad, half, gpos, str(device))
    if key not in _TILES:
        with torch.inference_mode(False):
            nb = n_pad // TILE
            q = torch.arange(nb)
            lo = torch.clamp((q * TILE - half) // TILE, min=0)
            hi = torch.clamp((q * TILE + TILE - 1 + half) // TILE, max=nb - 1)
            kv = torch.arange(nb)
            need = (kv[None, :] >= lo[:, None]) & (kv[None, :] <= hi[:, None])
            gtiles = sorted({p // TILE for p in gpos})
            need[:, gtiles] = True
            need[gtiles, :] = True
            # the farthest pair of tiles qb, kb is |qb - kb| * TILE + TILE - 1 apart
            full = (q[:, None] - kv[None, :]).abs() * TILE + TILE - 1 <= half
            _TILES[key] = (need.to(device), full.to(device))
    return _TILES[key]


def _version(t: torch.Tensor | None) -> int | None:
    """A tensor's in-place version counter (None for no tensor, or an inference-mode tensor, which has none and
    cannot be changed in place outside inference mode)."""
    if t is None or t.is_inference():
        return None
    return t._version


def _block_mask(key_mask: torch.Tensor | None, b: int, n: int, n_pad: int, half: int, gpos: tuple[int, ...],
                device):
    """The BlockMask of one forward pass: the tile maps of ``_tiles`` per sequence (a key tile holding padding is
    never full), and the mask function for the pairs inside partial tiles. Every layer of a forward pass gets the
    same padding mask object, so the last one built is reused while that object is unchanged."""
    from torch.nn.attention.flex_attention import BlockMask

    # inference mode is part of the stamp: a mask built under it holds inference tensors, which a later pass
    # with gradients could not save for its backward
    stamp = (n, n_pad, half, gpos, str(device), b, _version(key_mask), torch.is_inference_mode_enabled())
    last = _STATE.get("last")
    if last is not None and last[0] == stamp and last[1]() is key_mask:
        return last[2]
    key_ok = torch.zeros(b if key_mask is not None else 1, n_pad, dtype=torch.bool, device=device)
    key_ok[:, :n] = True if key_mask is None else key_mask.to(device=device, dtype=torch.bool)
    is_global = torch.zeros(n_pad, dtype=torch.bool, device=device)
    is_global[list(gpos)] = True
    if key_mask is None and n == n_pad:  # every key real: the band and the global positions only

        def mask_mod(bi, h, qi, ki):
            return ((qi - ki).abs() <= half) | is_global[qi] | is_global[ki]
    else:
        keys = key_ok.expand(b, n_pad)  # one row shared by the batch when only the tile padding is masked

        def mask_mod(bi, h, qi, ki):
            return keys[bi, ki] & (((qi - ki).abs() <= half) | is_global[qi] | is_global[ki])

    need, band_full = _tiles(n_pad, half, gpos, device)
    tile_real = key_ok.view(key_ok.shape[0], -1, TILE).all(-1)  # (B or 1, tiles): no padded key in the tile
    full = band_full[None] & tile_real[:, None, :]
    partial = need[None] & ~full

    def listing(m: torch.Tensor):  # (B, tiles, tiles) bool -> counts (B, 1, tiles), indices (B, 1, tiles, tiles)
        order = torch.argsort((~m).to(torch.int8), dim=-1, stable=True)  # listed tiles first, in order
        return m.sum(-1).to(torch.int32)[:, None], order.to(torch.int32)[:, None].contiguous()

    num, idx = listing(partial)
    fnum, fidx = listing(full)
    block_mask = BlockMask.from_kv_blocks(num, idx, fnum, fidx, BLOCK_SIZE=TILE, mask_mod=mask_mod,
                                          seq_lengths=(n_pad, n_pad))
    _STATE["last"] = (stamp, (lambda: None) if key_mask is None else weakref.ref(key_mask), block_mask)
    return block_mask


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
    from ptmlab.longseq.window import even_window

    b, _, n, _ = query.shape
    dev = query.device
    half = even_window(window) // 2
    n_pad = math.ceil(n / TILE) * TILE
    gpos = tuple(sorted({int(p) for p in global_positions if 0 <= int(p) < n}))
    if n_pad != n:
        pad = (0, 0, 0, n_pad - n)
        query, key, value = (torch.nn.functional.pad(t, pad) for t in (query, key, value))
    block_mask = _block_mask(key_mask, b, n, n_pad, half, gpos, dev)
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
