"""Benchmark: what the first-token cut (ptmlab/models/first_token.py) saves per training step, and what dropout costs.

One model, the same batch, alternating within each round (median of --rounds): a training step (forward, loss,
backward) of a sequence classifier with the last layer's feed-forward block on position 0 only ("cut") and on every
position ("full"), at several (batch, length) shapes, with the model's dropout (0.1) on. Then the same step with
dropout off, to show how much of a CPU step dropout takes (every side of the fine-tuning benchmark pays it alike).
Both sides run at the same precision (``--precision``, fp32 by default), batch and data; the ratio is full / cut
step time.

    python benchmarks/investigations/first_token.py [--model minilm] [--rounds 8] [--shapes 32x16,32x64,32x128,8x512]
"""

from __future__ import annotations

# isort: off
import _shared  # noqa: F401  (first: the benchmarks' helpers and offline defaults)
# isort: on

import os
from functools import partial
from pathlib import Path

from _timing import alternate_medians, random_batch, step_benchmark_args, training_models, training_step


def main() -> None:
    a, shapes = step_benchmark_args(__doc__.splitlines()[0], "first_token")
    import torch

    from ptmlab.core.io import atomic_write_json
    from ptmlab.models.first_token import first_token_only

    with_dropout, without = training_models(a.model)
    models = {"dropout 0.1": with_dropout, "dropout 0": without}

    rows = []
    for b, n in shapes:
        batch = random_batch(b, n)
        cells = {(d, cut): partial(training_step, models[d], batch, a.precision, [first_token_only] if cut else [])
                 for d in models for cut in (True, False)}
        med = alternate_medians(cells, a.rounds)
        rows.append({"batch": b, "length": n,
                     "cut_ms": round(1000 * med[("dropout 0.1", True)], 1),
                     "full_ms": round(1000 * med[("dropout 0.1", False)], 1),
                     "speedup_cut": round(med[("dropout 0.1", False)] / med[("dropout 0.1", True)], 3),
                     "full_no_dropout_ms": round(1000 * med[("dropout 0", False)], 1),
                     "dropout_share_of_full_step": round(1 - med[("dropout 0", False)] / med[("dropout 0.1", False)],
                                                         3)})
        r = rows[-1]
        print(f"batch {b:>3} x {n:>4} tokens: cut {r['cut_ms']:8.1f} ms  full {r['full_ms']:8.1f} ms  "
              f"speed-up {r['speedup_cut']:.3f}x   dropout = {100 * r['dropout_share_of_full_step']:.0f}% of the "
              f"full step", flush=True)
    result = {"model": a.model, "precision": a.precision, "threads": torch.get_num_threads(), "rounds": a.rounds,
              "load_average_end": os.getloadavg(), "rows": rows,
              "ratio_is": "median full-model training step time / median step time with the first-token cut, "
                          "same batch, alternating; dropout 0.1 on both"}
    out = Path(a.output)
    atomic_write_json(out, result)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
