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
    """Use the cores this process may run on; keep tokenizers single-threaded under forked workers."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        n = os.cpu_count() or 1
    world = int(os.environ.get("WORLD_SIZE", "1"))
    torch.set_num_threads(max(1, n // world))
