"""Benchmark: what the cheaper CPU dropout (ptmlab/train/fast_dropout.py) saves per training step.

One model, the same batch, alternating within each round (median of --rounds): a training step (forward, loss,
backward) of a sequence classifier with torch's dropout ("torch"), with ptmlab's fast dropout installed as the
training loop installs it ("fast": dropout modules and, on sdpa, attention dropout), and with dropout off ("none",
the floor no dropout implementation can beat). Every side uses the same precision, batch, data and the first-token
cut ptmlab trains with; the ratio is torch / fast step time.

    python benchmarks/investigations/fast_dropout.py [--model minilm] [--rounds 8] [--shapes 32x16,32x64,32x128,8x512]
                                      [--precision fp32|bf16]
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
    a, shapes = step_benchmark_args(__doc__.splitlines()[0], "fast_dropout")
    import torch

    from ptmlab.core.io import atomic_write_json
    from ptmlab.models.first_token import first_token_only
    from ptmlab.train.fast_dropout import fast_dropout

    with_dropout, without = training_models(a.model)
    models = {"torch": with_dropout, "none": without}

    rows = []
    for b, n in shapes:
        batch = random_batch(b, n)
        cells = {"torch": partial(training_step, models["torch"], batch, a.precision, [first_token_only]),
                 "fast": partial(training_step, models["torch"], batch, a.precision, [first_token_only, fast_dropout]),
                 "none": partial(training_step, models["none"], batch, a.precision, [first_token_only])}
        med = alternate_medians(cells, a.rounds)
        rows.append({"batch": b, "length": n, **{f"{k}_ms": round(1000 * v, 1) for k, v in med.items()},
                     "speedup_fast": round(med["torch"] / med["fast"], 3),
                     "dropout_share_torch": round(1 - med["none"] / med["torch"], 3),
                     "dropout_share_fast": round(1 - med["none"] / med["fast"], 3)})
        r = rows[-1]
        print(f"batch {b:>3} x {n:>4} tokens: torch {r['torch_ms']:8.1f} ms  fast {r['fast_ms']:8.1f} ms  "
              f"none {r['none_ms']:8.1f} ms  speed-up {r['speedup_fast']:.3f}x  dropout share "
              f"{100 * r['dropout_share_torch']:.0f}% -> {100 * r['dropout_share_fast']:.0f}%", flush=True)
    result = {"model": a.model, "precision": a.precision, "threads": torch.get_num_threads(), "rounds": a.rounds,
              "load_average_end": os.getloadavg(), "rows": rows,
              "ratio_is": "median training step time with torch's dropout / with ptmlab's fast dropout, same model, "
                          "batch and precision, alternating; 'none' is the same step with dropout 0"}
    out = Path(a.output)
    atomic_write_json(out, result)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
