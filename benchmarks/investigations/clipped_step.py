"""Benchmark: gradient clipping folded into the fused AdamW update (``train.optim.clipped_step``) vs torch's
``clip_grad_norm_`` followed by ``step()``.

Torch's clipping reads every gradient once for the total norm and then reads and writes every gradient again to
scale it (on a CPU, 100-odd small kernels over all 22.7M of minilm's gradients, the 30,522 x 384 embedding matrix's
dense one included); ptmlab's loop computes the norm and hands the factor to the fused AdamW kernel as its
``grad_scale``, so the scaling happens inside the update's own pass. Per training step of minilm as ptmlab's loop runs
it on a CPU (forward, backward, clip, fused AdamW with weight decay, inside ``reuse_host_memory``), three sides
alternate in one process on the same model, optimizer and batches: ``torch`` (clip_grad_norm_ then step),
``ptmlab`` (clipped_step) and ``unclipped`` (step alone: the floor, so ``1 - unclipped / torch`` is clipping's share
of a step). Median over ``--rounds`` alternating rounds, each the median of ``STEPS`` steps; ``speedup_paired`` is
the median over rounds of each round's own ratio, steadier on a host whose speed drifts. The gradient norms
seen are recorded (the fold works the same whether the factor clips or is 1).

    python benchmarks/investigations/clipped_step.py [--rounds 8] [--precision fp32|bf16] [--shapes 32x8,32x16,32x32]
"""

from __future__ import annotations

# isort: off
import _shared  # noqa: F401  (first: the benchmarks' helpers and offline defaults)
# isort: on

import os
import statistics

from _timing import rotating_step_times, step_benchmark_args

STEPS = 5  # timed steps per side and shape in each round, after one untimed one
SIDES = ("torch", "ptmlab", "unclipped")


def main() -> None:
    a, shapes = step_benchmark_args(__doc__.splitlines()[0], "clipped_step")
    import torch

    from ptmlab.core.host_memory import reuse_host_memory
    from ptmlab.core.io import atomic_write_json
    from ptmlab.models.zoo import load_model
    from ptmlab.train.evaluate import autocast_ctx
    from ptmlab.train.optim import build_optimizer, clipped_step

    torch.manual_seed(0)
    model = load_model(a.model, num_labels=2).train()
    optimizer = build_optimizer(model, lr=1e-5, weight_decay=0.01)
    norms: list[float] = []

    def step(side: str, batch: tuple) -> None:
        ids, mask, labels = batch
        with autocast_ctx(a.precision, torch.device("cpu")):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        if side == "torch":
            norms.append(float(torch.nn.utils.clip_grad_norm_(
                [p for p in model.parameters() if p.grad is not None], 1.0)))
            optimizer.step()
        elif side == "ptmlab":
            clipped_step(optimizer, 1.0)
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with reuse_host_memory() as applied:
        times = rotating_step_times(step, SIDES, shapes, a.rounds, STEPS)
    rows = []
    for k, v in times.items():
        med = {s: statistics.median(v[s]) for s in SIDES}
        rows.append({"shape": k, **{f"{s}_ms": round(med[s], 1) for s in SIDES},
                     **{f"{s}_ms_range": [round(min(v[s]), 1), round(max(v[s]), 1)] for s in SIDES},
                     "speedup": round(med["torch"] / med["ptmlab"], 3),
                     # each round's two medians were taken minutes apart at most: their ratio cancels slow drift
                     "speedup_paired": round(statistics.median(t / p for t, p in zip(v["torch"], v["ptmlab"],
                                                                                     strict=True)), 3),
                     "clipping_share_torch": round(1 - med["unclipped"] / med["torch"], 3),
                     "clipping_share_ptmlab": round(1 - med["unclipped"] / med["ptmlab"], 3)})
    result = {"model": a.model, "precision": a.precision, "rounds": a.rounds, "steps_per_round": STEPS,
              "threads": torch.get_num_threads(), "host_memory_reuse": applied,
              "grad_norm_median": round(statistics.median(norms), 3), "grad_norm_range": [round(min(norms), 3),
                                                                                          round(max(norms), 3)],
              "load_average_end": list(os.getloadavg()), "rows": rows,
              "speedup_is": "median step time with clip_grad_norm_(1.0) then fused AdamW step, over the same with "
                            "ptmlab's clipped_step (norm, then the factor as the fused kernel's grad_scale); "
                            "alternating rounds in one process, same model, optimizer, batches and precision"}
    print(f"{'batch x tokens':>15} {'torch ms':>9} {'ptmlab ms':>10} {'unclipped ms':>13} {'speed-up':>9} "
          f"{'paired':>7}")
    for row in rows:
        print(f"{row['shape']:>15} {row['torch_ms']:>9.1f} {row['ptmlab_ms']:>10.1f} {row['unclipped_ms']:>13.1f} "
              f"{row['speedup']:>8.2f}x {row['speedup_paired']:>6.2f}x")
    atomic_write_json(a.output, result)
    print(f"written: {a.output}")


if __name__ == "__main__":
    main()
