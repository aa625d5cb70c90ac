"""Benchmark: how much of a CPU training step the dense word-embedding matrix costs (its gradient, clipping, AdamW).

A classifier's fine-tuning batch touches a few hundred of the 30,522 rows of minilm's word-embedding matrix, yet
every step materialises its whole gradient (a 47 MB fill and scatter), clips it and runs AdamW over all of it (the
moments of untouched rows still decay, and weight decay moves every row). Per training step of minilm as ptmlab's
loop runs it on a CPU (forward, backward, gradient clipping, fused AdamW, inside ``reuse_host_memory``), two sides
alternate in one process: ``full`` (every parameter trains: the real job) and ``frozen`` (the word-embedding matrix
does not train: no gradient, no clipping, no update). ``1 - frozen / full`` is the share of the step that matrix
costs: the most that any sparse or lazy update of it could save. Same model, batches, precision and dropout on both
sides; median over ``--rounds`` of alternating rounds, each the median of ``STEPS`` steps.

    python benchmarks/investigations/embedding_share.py [--rounds 8] [--precision fp32|bf16]
                                                        [--shapes 32x16,32x32,32x64]
"""

from __future__ import annotations

# isort: off
import _shared  # noqa: F401  (first: the benchmarks' helpers and offline defaults)
# isort: on

import os
import statistics

from _timing import rotating_step_times, step_benchmark_args

STEPS = 5  # timed steps per side and shape in each round, after one untimed one


def main() -> None:
    a, shapes = step_benchmark_args(__doc__.splitlines()[0], "embedding_share")
    import torch

    from ptmlab.core.host_memory import reuse_host_memory
    from ptmlab.core.io import atomic_write_json
    from ptmlab.models.zoo import load_model
    from ptmlab.train.evaluate import autocast_ctx

    torch.manual_seed(0)
    model = load_model(a.model, num_labels=2).train()
    emb = model.get_input_embeddings().weight
    others = [p for p in model.parameters() if p is not emb]
    optimizers = {"full": torch.optim.AdamW([emb, *others], lr=1e-5, weight_decay=0.01, fused=True),
                  "frozen": torch.optim.AdamW(others, lr=1e-5, weight_decay=0.01, fused=True)}

    def step(side: str, batch: tuple) -> None:
        emb.requires_grad_(side == "full")
        ids, mask, labels = batch
        with autocast_ctx(a.precision, torch.device("cpu")):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], 1.0)
        optimizers[side].step()
        model.zero_grad(set_to_none=True)

    with reuse_host_memory() as applied:
        times = rotating_step_times(step, ("full", "frozen"), shapes, a.rounds, STEPS)
    rows = []
    for k, v in times.items():
        full, frozen = statistics.median(v["full"]), statistics.median(v["frozen"])
        rows.append({"shape": k, "full_ms": round(full, 1), "frozen_ms": round(frozen, 1),
                     "full_ms_range": [round(min(v["full"]), 1), round(max(v["full"]), 1)],
                     "frozen_ms_range": [round(min(v["frozen"]), 1), round(max(v["frozen"]), 1)],
                     "embedding_share": round(1 - frozen / full, 3)})
    result = {"model": a.model, "precision": a.precision, "rounds": a.rounds, "steps_per_round": STEPS,
              "embedding_rows": emb.shape[0], "embedding_width": emb.shape[1],
              "threads": torch.get_num_threads(), "host_memory_reuse": applied,
              "load_average_end": list(os.getloadavg()), "rows": rows,
              "share_is": "1 - (step with the word-embedding matrix frozen) / (step with it trained), medians over "
                          "alternating rounds in one process; forward, backward, clip_grad_norm_ and fused AdamW "
                          "(weight decay 0.01) on both sides"}
    print(f"{'batch x tokens':>15} {'full ms':>9} {'frozen ms':>10} {'embedding share':>16}")
    for row in rows:
        print(f"{row['shape']:>15} {row['full_ms']:>9.1f} {row['frozen_ms']:>10.1f} {row['embedding_share']:>15.1%}")
    atomic_write_json(a.output, result)
    print(f"written: {a.output}")


if __name__ == "__main__":
    main()
