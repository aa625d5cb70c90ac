"""Benchmark: the full 72-head ablation of minilm on SST-2 dev (872) vs the naive loop, side by side in one run.

Ours: ``ptmlab.analysis.ablation.head_ablation`` (cached hidden states below the ablated layer, length-sorted
batches of 128, bf16 autocast where the CPU supports it), every head removed in turn. Naive: one full forward
pass per example and head, no batching, no caching, fp32 (``naive_head_logits``). The naive loop costs the same
for every head, so it is timed on ``--naive-heads`` heads (one per layer by default) and scaled to 72; the metric
of those heads is compared with ours. Writes benchmarks/results/ablation.json and prints a table.

    python benchmarks/ablation.py [--run RUN_DIR] [--glue-dir ../shared/data/glue] [--naive-heads 6]

Without ``--run`` the packaged minilm gets a seeded random classification head (timings do not depend on weights).
"""

from __future__ import annotations

# isort: off
from _env import ROOT  # first: offline defaults before anything imports transformers
# isort: on

import argparse
import json
import time


def main() -> int:
    import numpy as np
    import torch

    from ptmlab.analysis.ablation import head_ablation, naive_head_logits
    from ptmlab.core.seed import configure_threads
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import load_task
    from ptmlab.data.metrics import compute_metrics
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.evaluate import resolve_precision

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", default=None, help="fine-tuned SST-2 run directory (default: minilm + random head)")
    p.add_argument("--glue-dir", default=None)
    p.add_argument("--naive-heads", type=int, default=6, help="heads timed with the naive loop (scaled to 72)")
    p.add_argument("--max-length", type=int, default=64)
    args = p.parse_args()
    configure_threads()
    torch.manual_seed(0)
    model = load_model(args.run or "minilm", num_labels=None if args.run else 2).eval()
    tok = load_tokenizer(args.run or "minilm")
    data = load_task("sst2", args.glue_dir)
    enc = encode_split(tok, data.splits["dev"], args.max_length)
    spec = data.spec
    precision = resolve_precision("auto")

    t0 = time.perf_counter()
    ours = head_ablation(model, enc, spec, tok.pad_token_id or 0, 128, precision, kinds=("removed",))
    t_ours = time.perf_counter() - t0

    heads = [(i % 6, (5 * i) % 12) for i in range(args.naive_heads)]
    agree, t1 = [], time.perf_counter()
    for layer, head in heads:
        logits = naive_head_logits(model, enc, layer, head)
        acc = compute_metrics(spec.metrics, logits.argmax(-1), enc.labels)["accuracy"]
        agree.append(abs(acc - ours.removed[layer, head]))
    t_naive_per_head = (time.perf_counter() - t1) / len(heads)
    t_naive = 72 * t_naive_per_head
    result = {"examples": len(enc), "heads": 72, "precision": precision, "threads": torch.get_num_threads(),
              "ours_seconds": round(t_ours, 1), "naive_seconds_per_head": round(t_naive_per_head, 2),
              "naive_seconds_72_heads_extrapolated": round(t_naive, 1), "naive_heads_timed": len(heads),
              "speedup": round(t_naive / t_ours, 2), "base_accuracy": ours.base,
              "max_accuracy_difference_vs_naive": round(float(max(agree)), 4),
              "heads_whose_removal_helps": len(ours.helpful("removed")),
              "worst_delta": round(float(np.nanmin(ours.removed - ours.base)), 4)}
    out = ROOT / "benchmarks" / "results" / "ablation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for k, v in result.items():
        print(f"{k:40} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
