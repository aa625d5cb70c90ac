"""Benchmark: forward latency and peak memory vs length for eager, sdpa and window attention (Q10/Q11 cost claims).

A MiniLM-shaped BERT (6 layers, hidden 384, 12 heads; random weights) runs batch-1 forward passes at 512 ... 16k
tokens with transformers' eager attention (n x n scores), sdpa (PyTorch's fused full attention) and ptmlab's
``ptmlab_window`` (sliding window of --window tokens + [CLS] global, blockwise), in fp32 and bf16, side by side in
one process with the same weights, input and threads; each cell is the best of --reps passes (other processes
share this machine's CPUs, so the best pass is the least disturbed one). On CUDA, PyTorch FlexAttention with a
sliding-window + global block mask is added as the GPU baseline (``flex``), and ptmlab's window attention runs
twice there: ``window`` (its default kernel for the device: FlexAttention on CUDA, see ptmlab/longseq/flex.py) and
``window_blocks`` (its blockwise kernel forced); ``window_flex`` forces its FlexAttention kernel anywhere. Fitted
growth exponents (log-log slope over 1k-16k), the sdpa/window latency ratio at 8k and, on CUDA, window's speed-up
over the two others at every length are written to benchmarks/results/long_attention.MACHINE.json with a plot beside
it (rewritten after every length). Eager is skipped where its n x n score tensors would exceed --eager-max-gb.

    python benchmarks/long_attention.py [--device cpu|cuda] [--lengths 512,1024,...] [--dtypes fp32,bf16]
"""

from __future__ import annotations

# isort: off
from _env import machine_info, result_path  # first: offline defaults
# isort: on

import argparse
import os

TARGETS = {"window_exponent_max": 1.15, "speedup_vs_sdpa_at_8k_min": 3.0}


def _register_flex(model, length: int, window: int, global_tokens: list[int], device: str) -> None:
    """An attention entry running FlexAttention with a sliding-window + global block mask (CUDA baseline)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    half = window // 2
    glob = torch.zeros(length, dtype=torch.bool, device=device)
    glob[global_tokens] = True

    def mask_mod(b, h, q, kv):
        return ((q - kv).abs() <= half) | glob[q] | glob[kv]

    block_mask = create_block_mask(mask_mod, 1, None, length, length, device=device)
    compiled = torch.compile(flex_attention, dynamic=False)  # one static kernel per length (a dynamic one failed)

    def forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
        out = compiled(query, key, value, block_mask=block_mask, scale=scaling)
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register("bench_flex", forward)
    AttentionMaskInterface.register("bench_flex", lambda **kw: None)
    model.set_attn_implementation("bench_flex")


def _kernel_check(device: str) -> dict:
    """ptmlab's two window kernels on this device against each other: 2 sequences of 1,000 tokens (not a multiple
    of the 128-token tiles), the second padded from 700, window 256 + [CLS], fp32; forward outputs and, where
    FlexAttention has a backward (not on a CPU), the gradients of q, k and v."""
    import torch

    from ptmlab.longseq import flex
    from ptmlab.longseq.window import window_attention

    g = torch.Generator().manual_seed(0)
    grad = not device.startswith("cpu")
    q, k, v, w = (torch.randn(2, 12, 1000, 32, generator=g).to(device) for _ in range(4))
    q, k, v = (t.requires_grad_(grad) for t in (q, k, v))
    mask = torch.ones(2, 1000, dtype=torch.bool, device=device)
    mask[1, 700:] = False
    res = {}
    for name, fn in (("blocks", window_attention), ("flex", flex.flex_window_attention)):
        with torch.set_grad_enabled(grad):
            y = fn(q, k, v, mask, 256, (0,))
            res[name] = (y.detach(), torch.autograd.grad((y * w).sum(), (q, k, v)) if grad else ())
    out = {"length": 1000, "padded_from": 700, "dtype": "fp32", "window": 256,
           "max_abs_diff_forward": (res["blocks"][0] - res["flex"][0]).abs().max().item(),
           "max_abs_diff_grad": max(((a - b).abs().max().item() for a, b in zip(res["blocks"][1], res["flex"][1],
                                                                                 strict=True)), default=None),
           "flex_compile_mode": flex._STATE["mode"], "flex_failed": flex._STATE["broken"]}
    print(f"kernel check: forward max |blocks - flex| {out['max_abs_diff_forward']:.2e}, gradients "
          f"{out['max_abs_diff_grad']}", flush=True)
    return out


def _write(a, rows, impls, dtypes, threads, kernel_check: dict | None, final: bool) -> None:
    """Summarise ``rows`` so far and write the JSON and the plot (after every length, so a run cut short keeps
    what it measured); ``final`` also prints the summary."""

    from ptmlab.core.io import atomic_write_json
    from ptmlab.longseq import cost
    from ptmlab.report.html import fig_to_png

    summary = {}
    for dtype in dtypes:
        for impl in impls:
            sel = sorted((r["length"], r["latency_s"], r["peak_mb"]) for r in rows
                         if r["impl"] == impl and r["dtype"] == dtype)
            ls = [s[0] for s in sel]
            summary[f"{impl}_{dtype}"] = {
                "latency_exponent_1k_16k": cost.growth_exponent(ls, [s[1] for s in sel]),
                "memory_exponent_1k_16k": cost.growth_exponent(ls, [s[2] for s in sel]),
                "lengths_measured": [s[0] for s in sel if s[1] is not None]}

        def at(impl, n, dtype=dtype):
            return next((r["latency_s"] for r in rows if r["impl"] == impl and r["dtype"] == dtype
                         and r["length"] == n), None)

        s8, w8 = at("sdpa", 8192), at("window", 8192)
        summary[f"speedup_window_vs_sdpa_8k_{dtype}"] = s8 / w8 if s8 and w8 else None
        if "flex" in impls:
            f8 = at("flex", 8192)
            summary[f"speedup_window_vs_flex_8k_{dtype}"] = f8 / w8 if f8 and w8 else None
        for base in ("flex", "window_blocks"):  # ptmlab's default kernel against these, at every length both ran
            if base in impls:
                summary[f"speedup_window_vs_{base}_{dtype}"] = {
                    str(n): at(base, n) / at("window", n) for n in sorted({r["length"] for r in rows})
                    if at(base, n) and at("window", n)}
    verdict = {}
    for dtype in dtypes:
        e = summary[f"window_{dtype}"]["latency_exponent_1k_16k"]
        r = summary[f"speedup_window_vs_sdpa_8k_{dtype}"]
        verdict[dtype] = {"window_exponent_ok": None if e is None else e <= TARGETS["window_exponent_max"],
                          "speedup_8k_ok": None if r is None else r >= TARGETS["speedup_vs_sdpa_at_8k_min"]}
    out = a.out or str(result_path("long_attention", a.device))
    result = {"benchmark": "long_attention", "device": a.device, "threads": threads, "window": a.window,
              "global_tokens": [0], "reps": a.reps, "model": "MiniLM-L6-shaped BERT, random weights, batch 1",
              "machine": machine_info(a.device),
              "note": "best of reps; the CPU is shared with other processes, so absolute times are noisy",
              "targets": TARGETS, "summary": summary, "verdict": verdict, "rows": rows,
              "kernel_check": kernel_check}
    atomic_write_json(out, result)
    png = out.rsplit(".", 1)[0] + ".png"
    with open(png, "wb") as f:
        f.write(fig_to_png(cost.scaling_plot(rows, f"MiniLM-shaped forward, {a.device}, {threads} threads")))
    if not final:
        return
    print()
    print(f"{'variant':<16} {'latency exp':>11} {'memory exp':>10}")
    for k, v in summary.items():
        if isinstance(v, dict) and "latency_exponent_1k_16k" in v:
            le, me = v["latency_exponent_1k_16k"], v["memory_exponent_1k_16k"]
            print(f"{k:<16} {le if le is None else round(le, 2)!s:>11} {me if me is None else round(me, 2)!s:>10}")
    for k, v in summary.items():
        if isinstance(v, dict) and "latency_exponent_1k_16k" not in v:
            print(f"{k}: " + ", ".join(f"{n}: {r:.2f}" for n, r in v.items()))
        elif not isinstance(v, dict):
            print(f"{k}: {v if v is None else round(v, 2)}")
    print(f"wrote {out} and {png}")


def main() -> int:
    import torch

    from ptmlab.longseq import cost, flex, window

    flex._STATE["compile_cpu"] = True  # window_flex on a CPU: compiled, as on CUDA (eager writes out the scores)

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--lengths", default="512,1024,2048,4096,8192,16384")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--impls", default="eager,sdpa,window",
                   help="eager, sdpa, window (ptmlab's default kernel), window_blocks, window_flex, flex (the "
                        "benchmark's own FlexAttention; flex and window_blocks are added on CUDA)")
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--eager-max-gb", type=float, default=6.0, help="skip eager where its score tensors exceed this")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: OMP_NUM_THREADS or all cores)")
    p.add_argument("--out", default=None)
    p.add_argument("--kernel-check", action=argparse.BooleanOptionalAction, default=None,
                   help="first compare ptmlab's blockwise and FlexAttention kernels (default: on CUDA)")
    a = p.parse_args()

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but no CUDA device is available")
    threads = a.threads or int(os.environ.get("OMP_NUM_THREADS", 0)) or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    lengths = [int(x) for x in a.lengths.split(",")]
    dtypes = [d.strip() for d in a.dtypes.split(",")]
    impls = [i.strip() for i in a.impls.split(",")]
    if a.device.startswith("cuda"):
        impls += [i for i in ("window_blocks", "flex") if i not in impls]
    names = {"eager": "eager", "sdpa": "sdpa", "window": "ptmlab_window", "window_blocks": "ptmlab_window",
             "window_flex": "ptmlab_window"}
    kernels = {"window_blocks": "blocks", "window_flex": "flex"}
    unknown = [i for i in impls if i not in names and i != "flex"]
    if unknown:
        raise SystemExit(f"error: unknown --impls {', '.join(unknown)}: use {', '.join(names)} or flex")
    check = None
    if a.kernel_check or (a.kernel_check is None and a.device != "cpu"):
        try:
            check = _kernel_check(a.device)
        except Exception as e:  # noqa: BLE001 - a failed check is a result; the timings still run
            check = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            print(f"kernel check failed: {check['error']}", flush=True)
    model = cost.minilm_shaped_model(max(lengths), window=a.window).to(a.device)
    rows = []
    for phase in ("latency", "memory"):  # memory last: measuring it slows the allocator (see cost.py)
        for dtype in dtypes:
            model.to(torch.bfloat16 if dtype == "bf16" else torch.float32)
            warmed: set[str] = set()
            for n in lengths:
                for impl in impls:
                    row = next((r for r in rows if (r["impl"], r["dtype"], r["length"]) == (impl, dtype, n)), None)
                    if row is None:
                        row = {"impl": impl, "dtype": dtype, "length": n, "latency_s": None, "peak_mb": None}
                        rows.append(row)
                    scores_gb = 12 * n * n * (2 if dtype == "bf16" else 4) * 2 / 2**30  # scores + probabilities
                    if impl == "eager" and scores_gb > a.eager_max_gb:
                        row["skipped"] = f"eager needs ~{scores_gb:.1f} GB for n x n scores (> --eager-max-gb)"
                        continue
                    if impl == "flex":
                        _register_flex(model, n, a.window, [0], a.device)
                    else:
                        model.set_attn_implementation(names[impl])
                        window.set_kernel(kernels.get(impl))
                    if phase == "latency":
                        compiled = impl in ("flex", "window_flex") or (impl == "window" and a.device != "cpu")
                        key = f"{impl}-{n}" if compiled else impl  # a compiled kernel warms up at every length
                        row["latency_s"] = cost.measure_forward(model, n, a.device, reps=a.reps,
                                                           warmup=key not in warmed or n <= 2048)
                        warmed.add(key)
                    else:
                        row["peak_mb"] = cost.measure_peak_memory(model, n, a.device)
                    print(f"{phase} {dtype} {n:>6} {impl:>7}: {row['latency_s']:.3f} s"
                          + (f", peak +{row['peak_mb'] or 0:.0f} MiB" if phase == "memory" else ""), flush=True)
                _write(a, rows, impls, dtypes, threads, check, final=False)  # a run cut short keeps it
    _write(a, rows, impls, dtypes, threads, check, final=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
