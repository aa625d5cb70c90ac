"""Timing shared by the benchmark scripts: callables alternated in rotation, so that a slow stretch of a shared
machine falls on every side alike."""

from __future__ import annotations

import statistics
import time

from ptmlab.models.latency import SETTLE_S  # onnxruntime's spinning workers are parked after this pause


def sig(x: float) -> float:
    """Four significant digits for a reported rate (a tiny model's rate is a small fraction of the machine's: not
    rounded to 0)."""
    return float(f"{x:.4g}")


def alternate_medians(fns: dict, repeats: int, warm_each: bool = False) -> dict[str, float]:
    """Each callable warmed up once, then called ``repeats`` times in rotation; the median seconds of each.
    ``warm_each``: before every timed call, a 50 ms pause and an untimed call of the same side, so that each side is
    timed in its own steady state and not in what the previous side left behind (onnxruntime's workers spin-wait
    after a call and halve a torch matmul started within that time; a short warm call alone does not outlast them;
    BENCHMARKS.md, "CPU FLOP rates")."""
    for f in fns.values():
        f()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            if warm_each:
                time.sleep(SETTLE_S)
                f()
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def rotating_step_times(step, sides: tuple[str, ...], shapes, rounds: int, steps: int) -> dict:
    """Per-step timing of several sides on the same batches: in each round, for each (batch, length) shape, a fresh
    random batch, then every side in turn (the side that leads rotates with the round), one untimed step and the
    median of ``steps`` timed ones. Returns ``{"BxN": {side: [ms per round]}}`` and prints each round."""
    times: dict[str, dict[str, list[float]]] = {f"{b}x{n}": {s: [] for s in sides} for b, n in shapes}
    for r in range(rounds):
        for b, n in shapes:
            batch = random_batch(b, n)
            for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                step(side, batch)
                ms = []
                for _ in range(steps):
                    t = time.perf_counter()
                    step(side, batch)
                    ms.append(1000 * (time.perf_counter() - t))
                times[f"{b}x{n}"][side].append(statistics.median(ms))
        print(f"round {r}: " + "  ".join(f"{k} " + " / ".join(f"{s} {v[s][-1]:.0f}" for s in sides) + " ms"
                                         for k, v in times.items()), flush=True)
    return times


def step_benchmark_args(description: str, name, extra=None):
    """The options of the per-step training investigations (``first_token.py``, ``fast_dropout.py``,
    ``host_memory.py``, ``embedding_share.py``, ``clipped_step.py`` in benchmarks/investigations; ``extra(parser)``
    adds a script's own): the parsed arguments and ``--shapes`` as (batch, length) pairs. ``--output`` defaults to
    ``benchmarks/investigations/results/NAME_PRECISION.MACHINE.json``, NAME being ``name`` or ``name(args)``."""
    import argparse

    from _env import result_path

    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default="minilm")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--shapes", default="32x16,32x64,32x128,8x512", help="BATCHxLENGTH,...")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--output", default=None, help="result JSON (default: NAME_PRECISION.MACHINE.json)")
    if extra is not None:
        extra(p)
    a = p.parse_args()
    if a.output is None:
        a.output = str(result_path(f"{name(a) if callable(name) else name}_{a.precision}", investigation=True))
    try:
        shapes = [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]
    except ValueError:
        raise SystemExit(f"error: --shapes {a.shapes}: give BATCHxLENGTH pairs, e.g. 32x16,8x512") from None
    return a, shapes


def training_models(name: str):
    """The same classifier twice, seeded alike, in train mode: with its dropout (0.1) and with dropout 0."""
    import torch

    from ptmlab.models.zoo import load_model

    torch.manual_seed(0)
    return load_model(name, num_labels=2).train(), load_model(name, num_labels=2, dropout=0.0).train()


def training_step(model, batch: tuple, precision: str, installs=()) -> None:
    """One forward/backward of a classifier on ``batch`` (ids, mask, labels) at ``precision``, with each of
    ``installs`` (callables taking the model and returning a handle with ``remove()``, or None) in place for it."""
    import torch

    from ptmlab.train.evaluate import autocast_ctx

    handles = [install(model) for install in installs]
    ids, mask, labels = batch
    with autocast_ctx(precision, torch.device("cpu")):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    for h in handles:
        if h is not None:
            h.remove()


def random_batch(batch: int, length: int) -> tuple:
    """A (ids, mask, labels) batch of random in-vocabulary ids, no padding."""
    import torch

    ids = torch.randint(1000, 20000, (batch, length))
    return ids, torch.ones_like(ids), torch.zeros(batch, dtype=torch.long)
