"""Benchmark: the full 72-head ablation of minilm on SST-2 dev (872) vs two baselines, side by side in one run.

Ours: ``ptmlab.analysis.ablation.head_ablation`` (cached hidden states below the ablated layer, length-sorted
batches of 128), every head removed in turn. Baselines, at the SAME precision as ours:
- batched (the fair one): the same length-sorted batches of 128, one full forward pass per head, no caching; the
  ratio ours / batched is what caching buys;
- naive: one full forward pass per example and head, no batching, no caching (``naive_head_logits``); the ratio
  ours / naive mixes batching and caching, and is reported for reference only.
Both baselines cost the same for every head, so they are timed on ``--baseline-heads`` heads (one per layer by
default) and scaled to 72; those heads' accuracies are compared with ours. Writes ``--output`` (default
benchmarks/results/ablation.MACHINE.json).

    python benchmarks/ablation.py [--run RUN_DIR] [--glue-dir ../shared/data/glue] [--baseline-heads 6] [--output F]

Without ``--run`` the packaged minilm gets a seeded random classification head (timings do not depend on weights).
"""

from __future__ import annotations

# isort: off
from _env import machine_info, result_path  # first: offline defaults
# isort: on

import argparse
import json
import os
import time
from pathlib import Path


def main() -> int:
    import numpy as np
    import torch

    from ptmlab.analysis.ablation import head_ablation, naive_head_logits
    from ptmlab.core.seed import configure_threads
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import load_task
    from ptmlab.data.metrics import compute_metrics
    from ptmlab.models.gates import Gates
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.evaluate import predict_logits, resolve_precision

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", default=None, help="fine-tuned SST-2 run directory (default: minilm + random head)")
    p.add_argument("--glue-dir", default=None)
    p.add_argument("--baseline-heads", type=int, default=6, help="heads timed with each baseline (scaled to 72)")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"], help="every side's precision")
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--output", default=str(result_path("ablation")))
    args = p.parse_args()
    configure_threads()
    torch.manual_seed(0)
    model = load_model(args.run or "minilm", num_labels=None if args.run else 2).eval()
    tok = load_tokenizer(args.run or "minilm")
    data = load_task("sst2", args.glue_dir)
    enc = encode_split(tok, data.splits["dev"], args.max_length)
    spec = data.spec
    precision = resolve_precision(args.precision)

    t0 = time.perf_counter()
    ours = head_ablation(model, enc, spec, tok.pad_token_id or 0, 128, precision, kinds=("removed",))
    t_ours = time.perf_counter() - t0

    heads = [(i % 6, (5 * i) % 12) for i in range(args.baseline_heads)]

    def timed(fn) -> tuple[float, float]:
        diffs, t = [], time.perf_counter()
        for layer, head in heads:
            logits = fn(layer, head)
            acc = compute_metrics(spec.metrics, logits.argmax(-1), enc.labels)["accuracy"]
            diffs.append(abs(acc - ours.removed[layer, head]))
        return 72 * (time.perf_counter() - t) / len(heads), float(max(diffs))

    def batched(layer, head):
        with Gates(model) as g:
            g.remove_head(layer, head)
            return predict_logits(model, enc, tok.pad_token_id or 0, 128, precision)

    def naive(layer, head):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"), torch.no_grad():
            return naive_head_logits(model, enc, layer, head)

    t_batched, diff_batched = timed(batched)
    t_naive, diff_naive = timed(naive)
    result = {"machine": machine_info(), "examples": len(enc), "heads": 72, "precision_all_sides": precision,
              "threads": torch.get_num_threads(), "load_average": list(os.getloadavg()),
              "ours_seconds": round(t_ours, 1), "baseline_heads_timed": len(heads),
              "batched_seconds_72_heads_extrapolated": round(t_batched, 1),
              "naive_seconds_72_heads_extrapolated": round(t_naive, 1),
              "speedup_vs_batched": round(t_batched / t_ours, 2),
              "speedup_vs_naive_reference": round(t_naive / t_ours, 2),
              "ratio_is": "speedup_vs_batched: caching alone (same batches, precision); vs naive: batching + caching",
              "base_accuracy": ours.base,
              "max_accuracy_difference_vs_batched": round(diff_batched, 4),
              "max_accuracy_difference_vs_naive": round(diff_naive, 4),
              "heads_whose_removal_helps": len(ours.helpful("removed")),
              "worst_delta": round(float(np.nanmin(ours.removed - ours.base)), 4)}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for k, v in result.items():
        print(f"{k:40} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
