"""Progress bars: tqdm on a terminal or when asked, quiet under tests and on non-main ranks."""

from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm


def quiet() -> bool:
    """No progress output: ``PTMLAB_PROGRESS=0`` (as under tests) or a process other than rank 0."""
    return os.environ.get("PTMLAB_PROGRESS", "1") == "0" or int(os.environ.get("RANK", "0")) != 0


def clock(seconds: float) -> str:
    """``1h 03m``, ``12m 05s`` or ``7s``: a duration as a person reads it."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


def progress(iterable=None, total=None, desc: str = "", disable: bool | None = None, **kw):
    if disable is None:
        disable = quiet()
    return tqdm(iterable, total=total, desc=desc, disable=disable, file=sys.stderr, dynamic_ncols=True,
                leave=False, **kw)
