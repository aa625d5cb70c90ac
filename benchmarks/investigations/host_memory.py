"""Benchmark: a CPU training step with and without ptmlab's host-memory setting (``train.host_memory``).

Per step of minilm (forward, backward, fused AdamW, gradients freed as ptmlab's loop frees them), at several
batch x length shapes and one precision: milliseconds and page faults per step, glibc's malloc as it comes
("default") against ``reuse_host_memory()`` ("reuse"). Each side runs in a fresh process of its own (a malloc
setting changed in a process cannot be fully undone there), the two alternate ``--rounds`` times, and the median
of each side's per-round medians is reported with the ratio default / reuse. Same model, batch, data, precision
and dropout (torch's, on both sides: the fast dropout is measured by ``fast_dropout.py``).

``--what inference`` times a forward pass in eval mode under ``torch.inference_mode`` instead (what evaluation,
prediction and serving run).

    python benchmarks/investigations/host_memory.py [--rounds 3] [--precision fp32|bf16]
                                                    [--shapes 32x16,32x64,32x128,8x512]
                                                    [--what train|inference]
"""

from __future__ import annotations

# isort: off
import _shared  # noqa: F401  (first: the benchmarks' helpers and offline defaults)
# isort: on

import json
import os
import resource
import statistics
import subprocess
import sys
import time

from _timing import random_batch, step_benchmark_args

STEPS = 5  # timed steps per shape in each process, after two untimed ones


def child(mode: str, model_name: str, shapes: list[tuple[int, int]], precision: str, what: str) -> dict:
    """One process's measurements: {shape: {"ms": median, "faults": median}}."""
    import torch

    from ptmlab.core.host_memory import reuse_host_memory
    from ptmlab.models.zoo import load_model
    from ptmlab.train.evaluate import autocast_ctx

    torch.manual_seed(0)
    model = load_model(model_name, num_labels=2).train(what == "train")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)

    def train_step(ids, mask, labels):
        with autocast_ctx(precision, torch.device("cpu")):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def forward(ids, mask, labels):
        with torch.inference_mode(), autocast_ctx(precision, torch.device("cpu")):
            model(input_ids=ids, attention_mask=mask)

    step = train_step if what == "train" else forward
    out = {}
    with reuse_host_memory(mode == "reuse") as applied:
        for b, n in shapes:
            batch = random_batch(b, n)
            ms, faults = [], []
            for i in range(STEPS + 2):
                f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
                step(*batch)
                if i >= 2:
                    ms.append(1000 * (time.perf_counter() - t0))
                    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
            out[f"{b}x{n}"] = {"ms": statistics.median(ms), "faults": statistics.median(faults)}
    return {"applied": applied, "shapes": out}


def main() -> None:
    a, shapes = step_benchmark_args(__doc__.splitlines()[0],
                                    lambda a: "host_memory" if a.what == "train" else "host_memory_inference",
                                    extra=lambda p: p.add_argument("--what", default="train",
                                                                   choices=["train", "inference"]))
    if os.environ.get("PTMLAB_HOST_MEMORY_CHILD"):
        print(json.dumps(child(os.environ["PTMLAB_HOST_MEMORY_CHILD"], a.model, shapes, a.precision, a.what)))
        return
    runs = {"default": [], "reuse": []}
    for r in range(a.rounds):
        for mode in (("default", "reuse") if r % 2 == 0 else ("reuse", "default")):
            env = {**os.environ, "PTMLAB_HOST_MEMORY_CHILD": mode}
            done = subprocess.run([sys.executable, *sys.argv], env=env, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"error: the {mode} process failed: {done.stderr.strip().splitlines()[-1:]}")
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {r} {mode:8} " + "  ".join(f"{k}: {v['ms']:.0f} ms, {v['faults']:.0f} faults"
                                                    for k, v in runs[mode][-1]["shapes"].items()), flush=True)
    rows = []
    for b, n in shapes:
        k = f"{b}x{n}"
        med = {m: statistics.median(run["shapes"][k]["ms"] for run in runs[m]) for m in runs}
        flt = {m: statistics.median(run["shapes"][k]["faults"] for run in runs[m]) for m in runs}
        rows.append({"shape": k, "default_ms": round(med["default"], 1), "reuse_ms": round(med["reuse"], 1),
                     "speedup": round(med["default"] / med["reuse"], 3), "default_faults": flt["default"],
                     "reuse_faults": flt["reuse"]})
    unit = "training step" if a.what == "train" else "forward pass"
    result = {"model": a.model, "what": a.what, "precision": a.precision, "rounds": a.rounds,
              "steps_per_process": STEPS, "threads": len(os.sched_getaffinity(0)),
              "load_average_end": list(os.getloadavg()),
              "applied": all(run["applied"] for run in runs["reuse"]), "rows": rows,
              "ratio_is": f"median ms per {unit} with glibc malloc as it comes / inside reuse_host_memory(), "
                          "each in its own processes, alternating"}
    print(f"{'batch x tokens':>15} {'default ms':>11} {'reuse ms':>9} {'speed-up':>9} {'faults/step':>16}")
    for row in rows:
        print(f"{row['shape']:>15} {row['default_ms']:>11.1f} {row['reuse_ms']:>9.1f} {row['speedup']:>8.2f}x "
              f"{row['default_faults']:>8.0f} -> {row['reuse_faults']:.0f}")
    os.makedirs(os.path.dirname(a.output), exist_ok=True)
    with open(a.output, "w") as f:
        json.dump(result, f, indent=2)
    print(f"written: {a.output}")


if __name__ == "__main__":
    main()
