"""Where the shared data folder is (GLUE, BLiMP, SQuAD, CoNLL-2003, parallel and raw text): one answer for every
reader of it."""

from __future__ import annotations

import os
from pathlib import Path


def shared_data_dir() -> Path | None:
    """``$PTMLAB_DATA_DIR``, else ``../shared/data`` from the working directory or from the repository."""
    candidates = [os.environ.get("PTMLAB_DATA_DIR"), "../shared/data",
                  Path(__file__).resolve().parents[2] / ".." / "shared" / "data"]
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c).resolve()
    return None


def shared_subdir(rel: str, probe: str, env: str | None = None) -> Path | None:
    """A folder of the shared data (``$env`` when set, else ``rel`` below the shared data folder) that holds the file
    ``probe``, or None."""
    candidates = [Path(os.environ[env])] if env and os.environ.get(env) else []
    root = shared_data_dir()
    if root is not None:
        candidates.append(root / rel)
    for c in candidates:
        if (c / probe).is_file():
            return c
    return None
