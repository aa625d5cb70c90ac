"""Benchmark: ``ptmlab optimize`` on minilm fine-tuned on SST-2, against the best of each single method, in one run.

Fine-tunes minilm on 4,000 SST-2 rows for 1 epoch (max length 64; or reuses --model), runs ``ptmlab optimize RUN
--max-loss 1 --batch 1,32 --budget BUDGET`` with its default search space, then times side by side (one round-robin,
--rounds rounds, batch 1 and 32, the same thread count) and scores on the search part and on the held-out part of
dev (the same parts the search used; SST-2's test split has no labels):

- the fp32 PyTorch source;
- int8 alone: the run itself on the better of onnx-int8 and onnx-int8-static (by the search's dev loss and speed);
- pruning alone: each pruned structure the search trained, in fp32 PyTorch; the best is the fastest within
  --max-loss on the search part (else the most accurate);
- a student alone: each student (layers:K, shrink:...) the search trained, in fp32 PyTorch, chosen the same way;
- the winner of ``ptmlab optimize`` (loaded from OUT, as ``ptmlab serve`` loads it).

Targets: the winner at least 4x faster than the source at batch 1 and 3x at batch 32, within 1 point on the held-out
part, and at least 1.3x faster (geometric mean of the two batch sizes) than the best single method that is within
--max-loss, at no more held-out loss. Misses are recorded with their numbers. Writes
benchmarks/results/optimize.MACHINE.json and prints the table.

    python benchmarks/optimize.py [--model RUN] [--budget 10m] [--threads 1] [--work DIR] [--rounds 7]
"""

from __future__ import annotations

# isort: off
from _env import machine_info, portable, result_path  # first: offline defaults
# isort: on

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

TARGETS = {"speedup_b1_min": 4.0, "speedup_b32_min": 3.0, "held_out_loss_points_max": 1.0,
           "over_best_single_min": 1.3}


def finetune(out: Path, glue_dir: str | None) -> Path:
    """minilm on 4,000 SST-2 rows, 1 epoch, max length 64 (reused when OUT holds a finished run)."""
    if (out / "summary.json").is_file() and (out / "model.safetensors").is_file():
        return out
    from ptmlab.core.config import build_config
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    run_finetune(build_config(FinetuneConfig, {"model": "minilm", "task": "sst2", "glue_dir": glue_dir,
                                               "max_train": 4000, "max_length": 64, "epochs": 1.0, "seed": 42,
                                               "output": str(out), "overwrite": True}, source="benchmark"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a minilm SST-2 run (default: fine-tune one into --work)")
    ap.add_argument("--work", default=None, help="folder for the fine-tuned run and the search (default: a temporary "
                                                 "folder, removed at the end)")
    ap.add_argument("--glue-dir", default=None)
    ap.add_argument("--budget", default="10m", help="ptmlab optimize --budget")
    ap.add_argument("--threads", type=int, default=1, help="threads of every timed model (1 on a shared machine)")
    ap.add_argument("--rounds", type=int, default=7, help="round-robin rounds of the side-by-side timing")
    ap.add_argument("--reuse-search", action="store_true", help="reuse the finished search in --work (only the "
                                                                   "side-by-side timing and scoring run again)")
    ap.add_argument("--out", default=str(result_path("optimize")))
    args = ap.parse_args()

    import ptmlab
    from ptmlab.core.config import build_config
    from ptmlab.core.io import atomic_write_json
    from ptmlab.core.rundir import RunDir
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.optimize.backends import build
    from ptmlab.optimize.config import OptimizeConfig
    from ptmlab.optimize.run import Context
    from ptmlab.optimize.structures import Structures
    from ptmlab.report.table import print_table

    start = time.time()
    tmp = tempfile.TemporaryDirectory(prefix="bench-optimize-") if args.work is None else None
    work = Path(args.work or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    run_dir = Path(args.model) if args.model else finetune(work / "finetuned", args.glue_dir)
    finetune_s = None if args.model else round(time.time() - t0, 1)
    out = work / "optimized"
    t0 = time.time()
    if not (args.reuse_search and (out / "summary.json").is_file()):
        ptmlab.optimize(str(run_dir), max_loss=1, batch=["1", "32"], budget=args.budget, threads=args.threads,
                        output=str(out), overwrite=True)
    optimize_s = round(time.time() - t0, 1)
    summary = json.loads((out / "summary.json").read_text())

    # the same data parts, source and thread count as the search
    saved = {k: v for k, v in RunDir(out).read_config().items()
             if k in {f.name for f in dataclasses.fields(OptimizeConfig)}}
    cfg = build_config(OptimizeConfig, saved, source="benchmark")
    ctx = Context(cfg, resume=True)
    ctx.structures = Structures(ctx)
    ctx.score_source()
    trials = [r for r in summary["trials"] if r.get("status") == "complete"]

    def best_trial(rows):
        ok = [r for r in rows if r["loss_points"] <= 1]
        return min(ok, key=lambda r: r["objective"]) if ok else (min(rows, key=lambda r: r["loss_points"])
                                                                  if rows else None)

    candidates: list[tuple[str, str, object, object]] = [("source (fp32 PyTorch)", "source", ctx.source,
                                                          ctx.tokenizer)]
    int8 = best_trial([r for r in trials if r["structure"] == "source" and "int8" in r["backend"]])
    scratch = work / "bench-candidates"
    if int8 is not None:
        built = build(int8["backend"], ctx.source, ctx.tokenizer, scratch / "source", scratch / int8["backend"],
                      ctx._calibration())
        candidates.append((f"int8 alone ({int8['backend']})", "int8", built.model, ctx.tokenizer))
    trained = sorted(p.name for p in (out / "structures").iterdir()
                     if (p / "summary.json").is_file() and (p / "model.safetensors").is_file())
    for name in trained:
        kind = "pruning" if name.startswith("prune") else "student"
        d = out / "structures" / name
        candidates.append((f"{kind} alone ({name}, fp32 PyTorch)", kind, load_model(str(d)).eval(),
                           load_tokenizer(str(d))))
    candidates.append((f"optimize winner ({summary['winner']['structure']} on {summary['winner']['backend']})",
                       "winner", load_model(str(out)).eval(), load_tokenizer(str(out))))

    rows = []
    main_metric = ctx.spec.main_metric
    held_src = ctx.metrics(ctx.logits(ctx.source, ctx.tokenizer, ctx.held), ctx.held)[main_metric]
    for name, kind, model, tok in candidates:
        dev = ctx.metrics(ctx.logits(model, tok, ctx.dev), ctx.dev)[main_metric]
        held = ctx.metrics(ctx.logits(model, tok, ctx.held), ctx.held)[main_metric]
        rows.append({"variant": name, "kind": kind, "dev": dev, "dev_loss_points": ctx.loss_points(dev),
                     "held_out": held, "held_out_loss_points": round((held_src - held) * 100, 2)})
        print(f"  {name}: dev {dev:.4f}, held-out {held:.4f}", flush=True)
    timed = ctx.time_rounds([(m, t) for _n, _k, m, t in candidates], args.rounds, desc="side by side")
    for r, t in zip(rows, timed, strict=True):
        r["latency_b1_ms"], r["latency_b32_ms"] = t["latency_b1_ms"], t["latency_b32_ms"]
        r["speedup_b1"] = round(1 / t["ratios"]["1"], 2)
        r["speedup_b32"] = round(1 / t["ratios"]["32"], 2)
        r["speedup"] = round((r["speedup_b1"] * r["speedup_b32"]) ** 0.5, 2)
    by_kind: dict[str, dict] = {}
    for kind in ("int8", "pruning", "student"):
        group = [r for r in rows if r["kind"] == kind]
        ok = [r for r in group if r["dev_loss_points"] <= 1]
        if group:
            best = max(ok, key=lambda r: r["speedup"]) if ok else max(group, key=lambda r: r["dev"])
            best["best_of_kind"] = True
            by_kind[kind] = best
    winner = next(r for r in rows if r["kind"] == "winner")
    singles = [r for r in by_kind.values() if r["dev_loss_points"] <= 1]
    best_single = max(singles, key=lambda r: r["speedup"]) if singles else None
    checks = {"winner_speedup_b1": winner["speedup_b1"], "winner_speedup_b32": winner["speedup_b32"],
              "winner_held_out_loss_points": winner["held_out_loss_points"],
              "best_single": best_single["variant"] if best_single else None,
              "over_best_single": round(winner["speedup"] / best_single["speedup"], 2) if best_single else None,
              "best_single_held_out_loss_points": best_single["held_out_loss_points"] if best_single else None}
    met = {"speedup_b1": checks["winner_speedup_b1"] >= TARGETS["speedup_b1_min"],
           "speedup_b32": checks["winner_speedup_b32"] >= TARGETS["speedup_b32_min"],
           "held_out": checks["winner_held_out_loss_points"] <= TARGETS["held_out_loss_points_max"],
           "over_best_single": best_single is not None and checks["over_best_single"] >= TARGETS["over_best_single_min"]
           and winner["held_out_loss_points"] <= best_single["held_out_loss_points"]}
    result = {"machine": machine_info(), "model": portable(run_dir), "task": "sst2", "max_length": ctx.max_length,
              "command": f"ptmlab optimize RUN --max-loss 1 --batch 1,32 --budget {args.budget} --threads "
                         f"{args.threads} --output OUT",
              "search_part": len(ctx.dev), "held_out_part": summary["held_out"]["part"],
              "held_out_examples": len(ctx.held), "source_dev": ctx.source_score, "source_held_out": held_src,
              "rows": rows, "checks": checks, "targets": TARGETS, "targets_met": met,
              "winner_recipe": summary["recipe"], "search": summary["search"],
              "optimize_held_out": summary["held_out"], "optimize_target_met": summary["target_met"],
              "trials": [{k: r.get(k) for k in ("trial", "structure", "backend", "status", "dev", "loss_points",
                                                "speedup_b1", "speedup_b32", "size_mb", "timed", "reason")}
                         for r in summary["trials"]],
              "threads": ctx.threads, "cpu_features": summary["machine"]["cpu_features"],
              "latency": f"median of {args.rounds} round-robin rounds over every row, 64 dev sentences, "
                         f"{ctx.threads} thread(s); speed-ups: median per-round ratio to the source",
              "load_average": os.getloadavg(), "finetune_seconds": finetune_s, "optimize_seconds": optimize_s,
              "seconds": round(time.time() - start, 1)}
    atomic_write_json(args.out, result)
    print_table(rows, ["variant", "dev", "dev_loss_points", "held_out", "held_out_loss_points", "latency_b1_ms",
                       "latency_b32_ms", "speedup_b1", "speedup_b32"])
    for k, v in checks.items():
        print(f"{k}: {v}")
    print(f"targets met: {met}; {result['seconds']:.0f}s; wrote {args.out}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
