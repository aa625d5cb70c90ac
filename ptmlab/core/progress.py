"""Progress bars: tqdm on a terminal or when asked, quiet under tests and on non-main ranks."""

from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm


def progress(iterable=None, total=None, desc: str = "", disable: bool | None = None, **kw):
    if disable is None:
        disable = os.environ.get("PTMLAB_PROGRESS", "1") == "0" or int(os.environ.get("RANK", "0")) != 0
    return tqdm(iterable, total=total, desc=desc, disable=disable, file=sys.stderr, dynamic_ncols=True,
                leave=False, **kw)
