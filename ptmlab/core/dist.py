"""Which process this is under ``torchrun`` / ``accelerate launch`` (one notion of "main process" for all)."""

from __future__ import annotations

import os


def process_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    """Rank 0 writes run directories, reports and caches; other ranks only compute."""
    return process_rank() == 0
