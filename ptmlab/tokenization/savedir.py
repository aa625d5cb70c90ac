"""Write a whole output directory atomically: fill a temporary sibling, then rename it into place.

A failed run leaves nothing half-written; an existing output is replaced only when it holds nothing but files
this kind of output writes (so a typo like ``--output .`` never deletes a user's files).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ptmlab.core.errors import PtmlabError


@contextmanager
def atomic_directory(target: str | Path, allowed: set[str] | None = None) -> Iterator[Path]:
    """Yield a temporary directory that becomes ``target`` when the block ends without an error.

    ``allowed``: names an existing ``target`` may hold for it to be replaced (None: any, for outputs we own).
    """
    target = Path(target)
    if target.exists():
        if not target.is_dir():
            raise PtmlabError(f"output '{target}' exists and is not a directory: pass a new directory")
        foreign = sorted(p.name for p in target.iterdir() if allowed is not None and p.name not in allowed)
        if foreign:
            raise PtmlabError(f"output '{target}' already holds other files ({', '.join(foreign[:3])}): "
                              "pass a new or empty directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the output should look like any new directory
    try:
        yield tmp
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            target.rename(old / "old")
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
