"""Seed every random number generator a run touches."""

import os
import random

import numpy as np
import torch


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))


def configure_threads() -> None:
    """Use the cores this process may run on (at most ``OMP_NUM_THREADS`` when set); keep tokenizers
    single-threaded under forked workers."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        n = os.cpu_count() or 1
    world = int(os.environ.get("WORLD_SIZE", "1"))
    threads = max(1, n // world)
    cap = os.environ.get("OMP_NUM_THREADS", "")
    if cap.isdigit() and int(cap) > 0:  # a user's cap wins (two jobs on two cores: 1 thread each, no spin-waiting)
        threads = min(threads, int(cap))
    torch.set_num_threads(threads)
