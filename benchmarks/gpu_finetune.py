"""Benchmark: ptmlab's loop on a GPU against transformers' Trainer and a bare PyTorch loop, in one script.

Job: minilm on the full SST-2 training set, 1 epoch, batch 32, max length 64, bf16 autocast on every side,
lr 5e-5, linear schedule with 6% warm-up; every side scored by the same evaluation on the full dev set
(benchmarks/_finetune_job.py holds the job, the sides and the fairness rules). Sides, alternating: ptmlab (eager),
the Trainer (length-grouped and random sampling), ptmlab with ``--compile reduce-overhead`` (length buckets of 32
tokens, CUDA graphs). Then the FLOP rate: ptmlab at ``--mfu-batch`` (default 1024), reported as 6 * N * tokens /
second with N the non-embedding parameters and tokens the non-padding tokens the loop counted (padding is not useful
work), as a fraction of ``--peak-tflops`` (H200 dense bf16: 989). Last, as a reference, the bare loop (eager and
compiled, alternating between themselves). This order puts the targets' numbers first: the JSON is rewritten after
every run, so a run cut short by a time limit keeps them; a side that fails is recorded and the rest still run.

Targets: ptmlab >= 2x the better Trainer configuration at batch 32 with equal dev accuracy; >= 30% of peak at the
largest batch. On a CPU the script still runs (``--max-train`` small, fp32 unless the CPU has fast bf16) so it can
be checked anywhere; its numbers then say nothing about GPUs.

    python benchmarks/gpu_finetune.py [--max-train 0] [--repeats 2] [--mfu-batch 1024] [--peak-tflops 989]
"""

from __future__ import annotations

# isort: off
from _env import ROOT, machine_info, result_path  # first: offline defaults
# isort: on

import argparse
import dataclasses
import sys
import tempfile
from functools import partial
from pathlib import Path

from _finetune_job import Job, alternate, load_average, print_summary, run_bare, run_ptmlab, run_trainer, summarise
from _timing import sig


def non_embedding_params(model_name: str) -> int:
    from ptmlab.models.structure import structure_of
    from ptmlab.models.zoo import load_model

    model = load_model(model_name, num_labels=2)
    emb = structure_of(model).embedding_module(model)
    skip = {id(p) for p in emb.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--glue-dir", default=str(ROOT.parent / "shared/data/glue"))
    p.add_argument("--model", default="minilm")
    p.add_argument("--max-train", type=int, default=0, help="training rows (0: all of SST-2)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--mfu-batch", type=int, default=1024, help="batch of the FLOP-rate run (0: skip)")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="the accelerator's dense bf16 peak")
    p.add_argument("--no-compile", action="store_true", help="skip the compiled sides")
    p.add_argument("--output", default=None,
                   help="result JSON (default: benchmarks/results/gpu_finetune.MACHINE.json)")
    args = p.parse_args()
    if not Path(args.glue_dir, "SST-2", "train.tsv").is_file():
        sys.exit(f"SST-2 not found under {args.glue_dir}: pass --glue-dir")
    import torch

    from ptmlab.core.io import atomic_write_json
    from ptmlab.train.evaluate import resolve_precision

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    job = Job(model=args.model, glue_dir=args.glue_dir, max_train=args.max_train or None,
              precision=resolve_precision("auto", device))
    # what the targets compare runs first: ptmlab and the Trainer alternating, then the FLOP-rate run, and only
    # then the bare loops (a reference, alternating among themselves), so a run cut short by a time limit still
    # has the targets' numbers (the JSON is rewritten after every run, "complete": false until the end)
    sides = {"ptmlab": partial(run_ptmlab, job),
             "trainer_grouped": partial(run_trainer, job, sampling="group_by_length"),
             "trainer_random": partial(run_trainer, job, sampling="random")}
    references = {"bare_loop": lambda _out: run_bare(job)}
    if not args.no_compile:
        sides["ptmlab_compiled"] = partial(run_ptmlab, job, compile_mode="reduce-overhead")
        references["bare_loop_compiled"] = lambda _out: run_bare(job, compile_mode="default")
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    print(f"job: {job.describe()} on {name}; {args.repeats} alternating rounds")
    result: dict = {"machine": machine_info(str(device)), "job": job.describe(), "device": name,
                    "repeats": args.repeats, "complete": False,
                    "targets": {"speedup_vs_best_trainer": 2.0, "fraction_of_peak": 0.30}}
    out = Path(args.output or result_path("gpu_finetune", str(device)))

    def write_partial(records: dict) -> None:
        atomic_write_json(out, {**result, "sides": {**result.get("sides", {}), **summarise(records)},
                                "load_average_now": load_average()})

    with tempfile.TemporaryDirectory() as tmp:
        # a side that fails is recorded and the others still run: a GPU run may get one try
        summary = summarise(alternate(sides, args.repeats, Path(tmp), progress=write_partial, keep_going=True))
        ran = {k: v for k, v in summary.items() if "examples_per_second_median" in v}
        trainers = [k for k in ("trainer_random", "trainer_grouped") if k in ran]
        ours = [k for k in ran if k.startswith("ptmlab")]
        result.update(sides=summary)
        if trainers and ours:
            best = max(trainers, key=lambda k: ran[k]["examples_per_second_median"])
            mine = max(ours, key=lambda k: ran[k]["examples_per_second_median"])
            result.update(best_trainer=best, best_ptmlab=mine,
                          speedup_vs_best_trainer=round(ran[mine]["examples_per_second_median"]
                                                        / ran[best]["examples_per_second_median"], 3),
                          accuracy_delta_points=round(100 * (ran[mine]["accuracy_median"]
                                                             - ran[best]["accuracy_median"]), 2))
        atomic_write_json(out, result)  # the ratio is kept if the FLOP-rate run below is cut short
        if args.mfu_batch:
            big = dataclasses.replace(job, batch_size=args.mfu_batch, lr=job.lr * (args.mfu_batch / 32) ** 0.5)
            try:
                rec = run_ptmlab(big, Path(tmp) / "mfu")
            except Exception as e:  # noqa: BLE001 - recorded; the sides above are the main result
                result["flop_rate"] = {"batch": args.mfu_batch, "error": f"{type(e).__name__}: {str(e)[:500]}"}
            else:
                n = non_embedding_params(args.model)
                tflops = 6 * n * rec["tokens"] / rec["train_seconds"] / 1e12
                result["flop_rate"] = {"batch": args.mfu_batch, "non_embedding_params": n, "tokens": rec["tokens"],
                                       "train_seconds": rec["train_seconds"], "tflops": sig(tflops),
                                       "fraction_of_peak": sig(tflops / args.peak_tflops),
                                       "accounting": "6 * N_non_embedding * non-padding tokens / training seconds",
                                       "dev_accuracy": rec["accuracy"]}
            atomic_write_json(out, result)
        refs = summarise(alternate(references, args.repeats, Path(tmp), progress=write_partial, keep_going=True))
        result["sides"] = {**summary, **refs}
    result["load_average_end"] = load_average()
    result["complete"] = True
    atomic_write_json(out, result)
    print_summary(result["sides"])
    if "speedup_vs_best_trainer" in result:
        print(f"{result['best_ptmlab']} / {result['best_trainer']}: {result['speedup_vs_best_trainer']:.2f}x "
              f"(target >= 2x); accuracy delta {result['accuracy_delta_points']:+.2f} points")
    else:
        print("no ratio: ptmlab or every Trainer side failed (see the errors above and in the JSON)")
    if "flop_rate" in result and "error" in result["flop_rate"]:
        print(f"FLOP-rate run failed: {result['flop_rate']['error']}")
    elif "flop_rate" in result:
        fr = result["flop_rate"]
        print(f"batch {fr['batch']}: {fr['tflops']:.3g} TFLOP/s = {fr['fraction_of_peak']:.3%} of "
              f"{args.peak_tflops:g} (target >= 30%)")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
