"""Benchmark: few-shot SST-2 with ``--strategy setfit`` against standard fine-tuning and the ``setfit`` package.

For each size K (examples per class, --sizes) and each draw (--draws; draw d is seed d), the same K examples per class
are drawn from the SST-2 training set (``--max-train-per-class K``, seeded, stratified) and three methods train on
them with the same model (--model, minilm):

1. ptmlab setfit: ``ptmlab finetune --strategy setfit`` with its defaults (40 pairs per example up to 5000, encoder
   rate 2e-5, 16 pairs per step, one pass; then the head on the frozen mean-pooled encoder, 50 steps at 1e-2);
2. standard: ``ptmlab finetune --strategy full`` (--standard-epochs, batch --standard-batch-size, --standard-lr;
   evaluated once, at the end: no dev-set model selection for any method);
3. the ``setfit`` package (when it is installed and imports): ``SetFitModel`` from the same model directory, its
   defaults (batch 16, 20 iterations, one epoch, logistic-regression head), the same seed.

Each is scored on the SST-2 dev set (872 rows; --dev-rows fewer, stated in the result). The result holds every
draw's accuracy and, per method and size, the mean and a 95% t-interval over the draws. Targets at 8 per class: ptmlab
setfit at least 10 points above standard fine-tuning and no worse than the setfit package (mean accuracy).

    python benchmarks/fewshot.py [--sizes 8,64] [--draws 5] [--dev-rows 0] [--threads 2]

Writes benchmarks/results/fewshot.MACHINE.json (after every run, so an interrupted run keeps what it measured) and
prints a Markdown table.
"""

from __future__ import annotations

# isort: off
from _env import ROOT, machine_info, portable, result_path  # first: offline defaults
# isort: on

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
METHODS = ("ptmlab-setfit", "standard", "setfit-package")


def interval(values: list[float]) -> dict:
    """Mean and 95% t-interval over draws (half-width 0 for a single draw: no spread to estimate)."""
    n = len(values)
    mean = statistics.fmean(values)
    half = T975.get(n - 1, 1.96) * statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0
    return {"n": n, "mean": round(mean, 4), "low": round(mean - half, 4), "high": round(mean + half, 4)}


def base_config(args, k: int, seed: int, **kw):
    from ptmlab.train.args import FinetuneConfig

    return FinetuneConfig(model=args.model, task="sst2", glue_dir=args.glue_dir, max_train_per_class=k,
                          max_eval=args.dev_rows or None, seed=seed, test=False, max_length=128, **kw)


def run_ptmlab(args, k: int, seed: int, work: Path, **kw) -> dict:
    from ptmlab.train.finetune import run_finetune

    cfg = base_config(args, k, seed, output=str(work / f"{kw.get('strategy', 'full')}-{k}-{seed}"), overwrite=True,
                      **kw)
    start = time.perf_counter()
    summary = run_finetune(cfg)
    return {"accuracy": summary["metrics"]["accuracy"], "seconds": round(time.perf_counter() - start, 1),
            **({"setfit": summary["setfit"]} if "setfit" in summary else {})}


def setfit_available() -> str | None:
    """None when the setfit package imports, else why not."""
    try:
        import setfit  # noqa: F401
        from setfit import SetFitModel, Trainer, TrainingArguments  # noqa: F401
    except Exception as e:  # not installed, or broken against the installed transformers
        return f"setfit does not import: {type(e).__name__}: {e}".splitlines()[0]
    return None


def run_setfit_package(args, k: int, seed: int) -> dict:
    import numpy as np
    from datasets import Dataset
    from setfit import SetFitModel, Trainer, TrainingArguments

    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.zoo import resolve

    data = load_task_data(base_config(args, k, seed))  # the same examples as the ptmlab runs
    train, dev = data.splits["train"], data.splits["dev"]
    start = time.perf_counter()
    model = SetFitModel.from_pretrained(resolve(args.model)[0])
    with tempfile.TemporaryDirectory(prefix="setfit-") as scratch:  # its checkpoints, never the working folder
        targs = TrainingArguments(output_dir=scratch, batch_size=16, num_iterations=20, num_epochs=1, seed=seed,
                                  report_to="none", show_progress_bar=False)
        trainer = Trainer(model=model, args=targs, train_dataset=Dataset.from_dict({"text": train.text,
                                                                                    "label": train.label}))
        trainer.train()
    preds = np.asarray(model.predict(dev.text))
    acc = float((preds == np.asarray(dev.label)).mean())
    return {"accuracy": acc, "seconds": round(time.perf_counter() - start, 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="minilm")
    p.add_argument("--sizes", default="8,64", help="examples per class, comma-separated")
    p.add_argument("--draws", type=int, default=5, help="draws (seeds 0..N-1) per size")
    p.add_argument("--dev-rows", type=int, default=0, help="SST-2 dev rows to score on (0: all 872)")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--standard-epochs", type=float, default=20.0)
    p.add_argument("--standard-batch-size", type=int, default=8)
    p.add_argument("--standard-lr", type=float, default=5e-5)
    p.add_argument("--glue-dir", default=None)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: the cores this process may use)")
    p.add_argument("--output", default=None, help="result JSON (default benchmarks/results/fewshot.MACHINE.json)")
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    sizes = [int(s) for s in args.sizes.split(",")]
    methods = [m for m in args.methods.split(",") if m]
    why_not = setfit_available() if "setfit-package" in methods else "not requested"
    out = Path(args.output) if args.output else result_path("fewshot")
    began, load_start = time.perf_counter(), os.getloadavg()[0]
    runs: dict = {m: {str(k): [] for k in sizes} for m in methods}
    if why_not:
        print(f"setfit package: {why_not}", flush=True)
        runs.pop("setfit-package", None)

    def write(done: bool) -> dict:
        summary = {m: {k: interval([r["accuracy"] for r in rs]) for k, rs in per.items() if rs}
                   for m, per in runs.items()}
        targets = {}
        s8 = summary.get("ptmlab-setfit", {}).get("8")
        if s8 and summary.get("standard", {}).get("8"):
            gap = s8["mean"] - summary["standard"]["8"]["mean"]
            targets["8_vs_standard"] = {"value": round(100 * gap, 2), "target": ">= 10 points", "met": gap >= 0.10}
        if s8 and summary.get("setfit-package", {}).get("8"):
            gap = s8["mean"] - summary["setfit-package"]["8"]["mean"]
            targets["8_vs_setfit_package"] = {"value": round(100 * gap, 2), "target": ">= 0 points",
                                              "met": gap >= 0}
        result = {
            "benchmark": "fewshot", "machine": machine_info(), "model": args.model, "complete": done,
            "settings": {"sizes": sizes, "draws": args.draws, "seeds": list(range(args.draws)),
                         "dev_rows": args.dev_rows or 872, "standard": {"epochs": args.standard_epochs, "batch_size":
                                                                        args.standard_batch_size,
                                                                        "lr": args.standard_lr,
                                                                        "evaluated": "once, at the end"},
                         "ptmlab_setfit": "defaults (--strategy setfit)",
                         "setfit_package": "defaults: batch 16, 20 iterations, 1 epoch, logistic regression",
                         "threads": torch.get_num_threads(),
                         "glue_dir": portable(args.glue_dir) if args.glue_dir else "glue (shared data)"},
            "setfit_package": {"available": why_not is None, **({"why_not": why_not} if why_not else {})},
            "runs": runs, "summary": summary, "targets": targets,
            "seconds": round(time.perf_counter() - began, 1),
            "load_average_1min": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, out)
        return result

    with tempfile.TemporaryDirectory(prefix="fewshot-") as work:
        for k in sizes:
            for seed in range(args.draws):
                for m in list(runs):
                    if m == "ptmlab-setfit":
                        r = run_ptmlab(args, k, seed, Path(work), strategy="setfit")
                    elif m == "standard":
                        r = run_ptmlab(args, k, seed, Path(work), strategy="full", epochs=args.standard_epochs,
                                       batch_size=args.standard_batch_size, lr=args.standard_lr,
                                       eval_steps=10**6, keep_best=False)
                    else:
                        try:
                            r = run_setfit_package(args, k, seed)
                        except Exception as e:  # the package broke on this stack: say why, keep the other methods
                            why_not = f"setfit failed: {type(e).__name__}: {e}".splitlines()[0][:300]
                            print(why_not, flush=True)
                            runs.pop(m)
                            break
                    runs[m][str(k)].append({"seed": seed, **r})
                    print(f"{k}/class draw {seed} {m}: accuracy {r['accuracy']:.4f} ({r['seconds']}s)", flush=True)
                    write(False)
    result = write(True)

    print(f"\nSST-2 dev ({result['settings']['dev_rows']} rows), {args.model}, mean accuracy and 95% interval over "
          f"{args.draws} draws\n")
    print("| method | " + " | ".join(f"{k}/class" for k in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    names = list(runs) + ([] if "setfit-package" in runs or "setfit-package" not in methods else ["setfit-package"])
    for m in names:
        cells = []
        for k in sizes:
            s = result["summary"].get(m, {}).get(str(k))
            cells.append(f"{s['mean']:.3f} ({s['low']:.3f}-{s['high']:.3f})" if s else f"n/a ({why_not})")
        print(f"| {m} | " + " | ".join(cells) + " |")
    for name, t in result["targets"].items():
        print(f"target {name}: {t['value']} ({t['target']}) {'met' if t['met'] else 'MISSED'}")
    print(f"wrote {out.relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
