"""Measure how forward cost grows with length: latency, peak memory, fitted growth exponents.

One model object runs every attention implementation (``set_attn_implementation`` swaps it in place), so eager,
sdpa and window attention see the same weights, inputs and threads. Peak memory is the growth of the process's
peak resident set during the forward pass on CPU (the kernel's high-water mark, reset before each run through
``/proc/self/clear_refs``) and ``torch.cuda.max_memory_allocated`` on CUDA. A growth exponent is the slope of a
least-squares line through (log length, log cost): 1 is linear, 2 is quadratic.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

MINILM_SHAPE = dict(num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536,
                    vocab_size=30522)


def minilm_shaped_model(max_length: int, window: int = 256, global_tokens=(0,), seed: int = 0):
    """A random-weight bare BERT shaped like MiniLM-L6 with ``max_length`` positions (cost does not depend on
    weights)."""
    from transformers import BertConfig, BertModel

    import ptmlab.longseq.window  # noqa: F401  (registers ptmlab_window)

    torch.manual_seed(seed)
    config = BertConfig(**MINILM_SHAPE, max_position_embeddings=max_length)
    config.ptmlab_window = window
    config.ptmlab_global_tokens = list(global_tokens)
    return BertModel(config, add_pooling_layer=False).eval()


def _rss_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def release_freed_memory() -> None:
    """Ask glibc to give large freed blocks back to the system at once (fixed mmap threshold), so the resident set
    follows the tensors alive and its high-water mark measures a pass's peak. A no-op off glibc."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 16)  # M_MMAP_THRESHOLD: allocations above 64 KiB are mmapped and unmapped on free
        libc.mallopt(-1, 1 << 16)  # M_TRIM_THRESHOLD
        libc.malloc_trim(0)  # and hand back what earlier passes left cached
    except (OSError, AttributeError):
        pass


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def measure_forward(model, length: int, device: str = "cpu", reps: int = 2, warmup: bool = True) -> float:
    """Best-of-``reps`` latency (s) of one batch-1 forward pass of ``length`` tokens."""
    ids = torch.randint(1000, 2000, (1, length), device=device)
    cuda = device.startswith("cuda")
    times = []
    for i in range(reps + int(warmup)):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.inference_mode():
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
        if cuda:
            torch.cuda.synchronize()
        if i >= int(warmup):
            times.append(time.perf_counter() - t)
    return min(times)


def measure_peak_memory(model, length: int, device: str = "cpu") -> float | None:
    """Extra memory (MiB) at the peak of one batch-1 forward pass of ``length`` tokens (None if unmeasurable).

    On CPU this switches glibc to returning freed blocks at once (``release_freed_memory``), which slows later
    allocations: measure latencies first."""
    ids = torch.randint(1000, 2000, (1, length), device=device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.inference_mode():
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    release_freed_memory()
    if not _reset_peak():
        return None
    base = _rss_kb("VmRSS")
    with torch.inference_mode():
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    hwm = _rss_kb("VmHWM")
    return None if base is None or hwm is None else (hwm - base) / 1024


def growth_exponent(lengths: list[int], values: list[float | None], lo: int = 1024, hi: int = 16384) -> float | None:
    """Slope of log(value) against log(length) over lengths in [lo, hi] (None with fewer than 2 usable points)."""
    pts = [(math.log(n), math.log(v)) for n, v in zip(lengths, values, strict=True)
           if lo <= n <= hi and v is not None and v > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx


def scaling_plot(rows: list[dict], title: str = "forward cost vs length"):
    """Log-log latency and peak memory against length, one line per (implementation, precision)."""
    from ptmlab.report.html import new_figure

    fig, _ = new_figure(10.0, 4.0)
    fig.clf()
    ax1, ax2 = fig.subplots(1, 2)
    keys = sorted({(r["impl"], r["dtype"]) for r in rows})
    for impl, dtype in keys:
        pts = sorted((r["length"], r["latency_s"], r["peak_mb"]) for r in rows
                     if r["impl"] == impl and r["dtype"] == dtype and r.get("latency_s") is not None)
        if not pts:
            continue
        style = "-" if dtype == "fp32" else "--"
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=f"{impl} {dtype}")
        mem = [(p[0], p[2]) for p in pts if p[2] is not None and p[2] > 0]
        if mem:
            ax2.plot([m[0] for m in mem], [m[1] for m in mem], style, marker="o", label=f"{impl} {dtype}")
    for ax, ylabel in ((ax1, "latency (s)"), (ax2, "peak extra memory (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    ax1.set_title(title)
    return fig
