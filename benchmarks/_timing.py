"""Timing shared by the benchmark scripts: callables alternated in rotation, so that a slow stretch of a shared
machine falls on every side alike."""

from __future__ import annotations

import statistics
import time


def alternate_medians(fns: dict, repeats: int) -> dict[str, float]:
    """Each callable warmed up once, then called ``repeats`` times in rotation; the median seconds of each."""
    for f in fns.values():
        f()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}
