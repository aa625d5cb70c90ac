"""Benchmark: what attention dropout costs window attention when training on a CPU. One layer's window attention
(ptmlab.longseq.window) at --length tokens, forward only, forward + backward without dropout, and forward + backward
with --dropout, alternating in one run (best of --repeats each). PyTorch's fused CPU attention kernel has no
dropout, so with dropout scaled_dot_product_attention falls back to its math path; this measures that fallback.
Writes benchmarks/investigations/results/window_dropout.MACHINE.json and prints a table.

    OMP_NUM_THREADS=2 python benchmarks/investigations/window_dropout.py [--length 4096] [--window 256] [--dropout 0.1]
"""

from __future__ import annotations

# isort: off
import _shared  # noqa: F401  (first: the benchmarks' helpers and offline defaults)
from _env import result_path
# isort: on

import argparse
import os
import time

import torch


def main() -> int:
    from ptmlab.core.io import atomic_write_json
    from ptmlab.longseq.window import window_attention

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--length", type=int, default=4096)
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=32, help="minilm: 384 / 12")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=str(result_path("window_dropout", investigation=True)))
    args = p.parse_args()
    torch.manual_seed(0)
    shape = (1, args.heads, args.length, args.head_dim)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))

    def forward():
        with torch.no_grad():
            window_attention(q, k, v, None, args.window, (0,), None, 0.0)

    def train(rate):
        def step():
            window_attention(q, k, v, None, args.window, (0,), None, rate).sum().backward()
        return step

    cases = {"forward": forward, "forward+backward, dropout 0": train(0.0),
             f"forward+backward, dropout {args.dropout:g}": train(args.dropout)}
    times = {name: [] for name in cases}
    for _ in range(args.repeats):  # alternating, so drifting load hits every case alike
        for name, fn in cases.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    best = {name: min(ts) for name, ts in times.items()}
    base = best["forward"]
    print(f"{'case':<34} {'best s':>8} {'x forward':>10}")
    for name, t in best.items():
        print(f"{name:<34} {t:>8.3f} {t / base:>10.2f}")
    atomic_write_json(args.out, {"length": args.length, "window": args.window, "heads": args.heads,
                                 "head_dim": args.head_dim, "dropout": args.dropout, "repeats": args.repeats,
                                 "threads": torch.get_num_threads(), "load_average": list(os.getloadavg()),
                                 "best_seconds": best, "all_seconds": times})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
