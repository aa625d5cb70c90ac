"""Benchmark: one fine-tuning job with ptmlab and with transformers' Trainer, at equal precision, side by side.

Job (defaults): minilm on SST-2, the first 4,000 training rows after a seed-0 shuffle, max length 64, batch 32,
lr 5e-5, 1 epoch, linear schedule with 6% warm-up. Sides: ptmlab (length-grouped batches), the Trainer with its
default random sampler, the Trainer with ``train_sampling_strategy="group_by_length"``, a bare PyTorch loop
(the floor), and ptmlab with ``first_token_only=False`` (``ptmlab_no_cut``: the last layer's feed-forward block on
every position, as the Trainer runs it), so that the ratio can be split into what the loop and what the cut
bring. ``trainer_grouped_host_memory`` is the grouped Trainer inside ptmlab's ``reuse_host_memory`` (what
ptmlab's loop does on a CPU: freed memory stays in the process instead of page-faulting back every step), so that
the ratio can also be split into what that setting and what the rest of the loop bring; it is reported beside the
Trainer, not counted as a Trainer configuration. Every side runs at the SAME precision (``--precision``; ``auto`` =
what ptmlab's auto picks on this machine, applied to all), is scored by the same evaluation code, and runs
``--repeats`` times alternately (see benchmarks/_finetune_job.py for the rules). The ratio reported is ptmlab's
median examples/s over the best Trainer configuration's median, training loop time only.

Why the earlier "grouped Trainer collapses to 0.5115": with ``group_by_length`` the Trainer also orders its
*evaluation* batches by length (``Trainer._get_eval_sampler`` returns a ``LengthGroupedSampler``), so
``trainer.predict(dev).predictions`` come back in a shuffled order; comparing them with the labels in file order
gives chance accuracy (SST-2 dev is 51% positive). The model itself was fine. Here every side is evaluated by
ptmlab's evaluation in the dev set's own order.

    python benchmarks/finetune_throughput.py [--precision auto|fp32|bf16] [--repeats 2] [--max-train 4000] [--isolate]

``--isolate`` runs every side's every round in a fresh process (needed for a clean comparison since ptmlab's loop
changes the C allocator's settings while it trains, and a setting changed and restored leaves glibc's dynamic
thresholds off for the rest of the process).
"""

from __future__ import annotations

# isort: off
from _env import ROOT, machine_info, result_path  # first: offline defaults
# isort: on

import argparse
import json
import os
import sys
import tempfile
from functools import partial
from pathlib import Path

from _finetune_job import (
    Job,
    alternate,
    load_average,
    print_summary,
    run_bare,
    run_one_side,
    run_ptmlab,
    run_trainer,
    run_trainer_host_memory,
    summarise,
)

TRAINER_SIDES = ("trainer_random", "trainer_grouped")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--glue-dir", default=str(ROOT.parent / "shared/data/glue"))
    p.add_argument("--model", default="minilm")
    p.add_argument("--max-train", type=int, default=4000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-bare", action="store_true", help="skip the bare-loop floor")
    p.add_argument("--sides", default="", help="comma-separated subset of the sides to run (default: all; ptmlab and "
                                               "at least one Trainer side are always kept)")
    p.add_argument("--isolate", action="store_true", help="every run in a fresh process of its own")
    p.add_argument("--output", default=str(result_path("finetune_throughput")))
    p.add_argument("--run-side", help=argparse.SUPPRESS)  # internal: the child process of --isolate
    p.add_argument("--side-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not Path(args.glue_dir, "SST-2", "train.tsv").is_file():
        sys.exit(f"SST-2 not found under {args.glue_dir}: pass --glue-dir")
    import torch

    from ptmlab.train.evaluate import resolve_precision

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    job = Job(model=args.model, glue_dir=args.glue_dir, max_train=args.max_train, batch_size=args.batch_size,
              precision=resolve_precision(args.precision, device))
    sides = {"ptmlab": partial(run_ptmlab, job),
             "ptmlab_no_cut": partial(run_ptmlab, job, first_token_only=False),
             "trainer_random": partial(run_trainer, job, sampling="random"),
             "trainer_grouped": partial(run_trainer, job, sampling="group_by_length"),
             "trainer_grouped_host_memory": partial(run_trainer_host_memory, job)}
    if not args.no_bare:
        sides["bare_loop"] = lambda _out: run_bare(job)
    if args.run_side:
        run_one_side(sides, args.run_side, args.side_dir)
        return
    if args.sides:
        keep = set(args.sides.split(",")) | {"ptmlab"}
        unknown = keep - set(sides)
        if unknown or not keep & set(TRAINER_SIDES):
            sys.exit(f"--sides {args.sides}: choose from {', '.join(sides)}, with at least one of "
                     f"{', '.join(TRAINER_SIDES)}")
        sides = {k: v for k, v in sides.items() if k in keep}
    print(f"job: {job.describe()} on {device}; {args.repeats} alternating rounds")
    with tempfile.TemporaryDirectory() as tmp:
        summary = summarise(alternate(sides, args.repeats, Path(tmp), isolate=args.isolate))
    best = max((k for k in TRAINER_SIDES if k in summary), key=lambda k: summary[k]["examples_per_second_median"])
    ours = summary["ptmlab"]["examples_per_second_median"]
    result = {
        "machine": machine_info(),
        "job": job.describe(), "device": str(device), "threads": torch.get_num_threads(),
        "precision_all_sides": job.precision, "repeats": args.repeats, "isolated_processes": args.isolate,
        "load_average_end": load_average(),
        "sides": summary, "best_trainer": best,
        "speedup_vs_best_trainer": round(ours / summary[best]["examples_per_second_median"], 3),
        "accuracy_delta_points": round(100 * (summary["ptmlab"]["accuracy_median"] - summary[best]["accuracy_median"]),
                                       2),
        "ratio_is": "median training-loop examples/s of ptmlab / the faster Trainer configuration, same precision, "
                    "batch, rows and evaluation; model loading, tokenisation and evaluation excluded",
        "targets": {"speedup_vs_best_trainer": 1.3, "accuracy_delta_points": -0.5},
    }
    if "trainer_grouped_host_memory" in summary:  # the part of the ratio that is not the allocator setting
        result["speedup_vs_trainer_grouped_host_memory"] = round(
            ours / summary["trainer_grouped_host_memory"]["examples_per_second_median"], 3)
    if "ptmlab_no_cut" in summary:  # the part of the ratio that the last layer's first-token cut brings
        result["speedup_first_token_cut"] = round(ours / summary["ptmlab_no_cut"]["examples_per_second_median"], 3)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print_summary(summary)
    print(f"ptmlab / {best}: {result['speedup_vs_best_trainer']:.2f}x at {job.precision} (target >= 1.3x); accuracy "
          f"delta {result['accuracy_delta_points']:+.2f} points")
    if "speedup_vs_trainer_grouped_host_memory" in result:
        print(f"ptmlab / grouped Trainer with ptmlab's host-memory setting: "
              f"{result['speedup_vs_trainer_grouped_host_memory']:.2f}x")
    if "speedup_first_token_cut" in result:
        print(f"ptmlab / ptmlab without the first-token cut: {result['speedup_first_token_cut']:.2f}x")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
