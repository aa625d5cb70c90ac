"""Benchmark: agreement with a served minilm SST-2 victim against the query budget (RANDOM queries, soft labels).

The victim is served in-process on 127.0.0.1 with policy ``probs``; one attack of the largest budget trains a
minilm copy at each budget on a prefix of the same answered queries (`ptmlab extract --curve`). Agreement is
measured on the SST-2 dev set, labelled locally by the victim. Writes benchmarks/results/extraction.MACHINE.json.

    python benchmarks/extraction.py --victim RUN_DIR [--budgets 1000,2000] [--epochs 3] [--max-eval 872]
"""

from __future__ import annotations

# isort: off
from _env import machine_info, portable, result_path  # first: offline defaults
# isort: on

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--victim", required=True, help="run directory of the minilm SST-2 victim")
    p.add_argument("--budgets", default="1000,2000", help="query budgets (the largest is sent; others are prefixes)")
    p.add_argument("--strategy", default="random")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--max-eval", type=int, default=0, help="dev examples (0: all 872)")
    args = p.parse_args()
    from ptmlab.extraction.client import VictimClient
    from ptmlab.extraction.extract import ExtractConfig, run_extract
    from ptmlab.serve.app import create_app
    from ptmlab.serve.config import ServeConfig
    from ptmlab.serve.server import serve_in_thread
    from ptmlab.serve.state import open_store

    budgets = sorted(int(b) for b in args.budgets.split(","))
    store = open_store(tempfile.mkdtemp(prefix="ptmlab-bench-"))
    key = store.create_key("bench", rate=1e6, burst=1e6, daily_budget=10**9)
    out = Path(tempfile.mkdtemp(prefix="ptmlab-extract-")) / "copy"
    cfg = ExtractConfig(model="minilm", task="sst2", query_strategy=args.strategy, budget=budgets[-1],
                        curve=[str(b) for b in budgets[:-1]], epochs=args.epochs, batch_size=32, lr=1e-4,
                        max_length=64, seed=0, max_eval=args.max_eval or None, victim="in-process", key="bench",
                        victim_run=args.victim, output=str(out))
    t0 = time.perf_counter()
    with serve_in_thread(create_app(args.victim, ServeConfig(detector=False), store)) as url:
        s = run_extract(cfg, VictimClient(url, key))
    result = {"machine": machine_info(), "victim": portable(args.victim), "strategy": args.strategy,
              "epochs": args.epochs, "curve": s["curve"],
              "victim_metrics": s["victim_metrics"], "eval_examples": s["eval_examples"],
              "seconds": round(time.perf_counter() - t0, 1), "copy_dir": portable(out)}
    path = result_path("extraction")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"victim dev accuracy {s['victim_metrics'].get('accuracy', float('nan')):.4f}")
    print(f"{'queries':>8} {'agreement':>10} {'copy acc':>9}")
    for pt in s["curve"]:
        print(f"{pt['budget']:>8} {pt['agreement']:>10.4f} {pt['accuracy']:>9.4f}")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
