"""Makes the benchmarks' shared helpers (``benchmarks/_env.py``, ``benchmarks/_timing.py``) importable from this
folder and applies ``_env``'s offline defaults; every investigation imports it first."""

import sys
from pathlib import Path

_BENCHMARKS = str(Path(__file__).resolve().parents[1])
if _BENCHMARKS not in sys.path:
    sys.path.insert(1, _BENCHMARKS)

import _env  # noqa: E402,F401  (offline defaults before anything imports transformers)
