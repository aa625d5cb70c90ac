"""The per-seed and per-example records a study's interval is computed from, kept compactly in results.json.

A result is only checkable when the numbers its rule read travel with it: ``python -m ptmlab.studies.rederive`` and
``tests/test_studies_validity.py`` recompute every interval, condition and outcome from them. Per-example 1/0
correctness of a seed is written as ``"N:BASE64"`` (N values, packed 8 to a byte: 872 examples take 148 characters);
per-example real values as lists rounded to ``DIGITS`` decimals, and the run computes its interval from the rounded
values it writes, so that the record gives the same interval again to the last digit.

``record["evidence"]`` holds a study's records under names the study chooses (``{"base": [...], "removed": {...}}``);
``recomputed(record)`` says whether a result carries what its rule needs (``record["recompute"]``, written by
``ptmlab.studies.rederive``).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence

DIGITS = 6  # decimals kept of per-example real values (Kendall taus, TVDs)
PACKED = r"^\d+:[A-Za-z0-9+/]*={0,2}$"  # what ``pack_bits`` writes: base64 holds "/", which is no path


def is_packed(text: str) -> bool:
    """Whether ``text`` is a ``pack_bits`` record (to be kept verbatim, never read as a path)."""
    import re

    return re.match(PACKED, text) is not None


def pack_bits(values: Sequence[float]) -> str:
    """1/0 values (correctness of one seed on each example, in order) as ``"N:BASE64"``; anything but 0 and 1 is an
    error (a NaN or a probability is not a bit)."""
    import numpy as np

    a = np.asarray(values, dtype=float)
    if a.ndim != 1 or not np.isin(a, (0.0, 1.0)).all():
        raise ValueError("pack_bits takes a flat sequence of 0/1 values")
    return f"{a.size}:" + base64.b64encode(np.packbits(a.astype(np.uint8)).tobytes()).decode("ascii")


def unpack_bits(text: str):
    """The float array ``pack_bits`` wrote."""
    import numpy as np

    n, _, data = str(text).partition(":")
    bits = np.unpackbits(np.frombuffer(base64.b64decode(data), dtype=np.uint8))[:int(n)]
    if bits.size != int(n):
        raise ValueError(f"packed record holds {bits.size} values, not {n}")
    return bits.astype(float)


def pack_runs(runs: Sequence[Sequence[float]]) -> list[str]:
    """One ``pack_bits`` string per seed."""
    return [pack_bits(r) for r in runs]


def unpack_runs(texts: Sequence[str]) -> list:
    return [unpack_bits(t) for t in texts]


def rounded(values: Sequence[float], digits: int = DIGITS) -> list[float | None]:
    """Real per-example values as written (NaN, an undefined value, as null)."""
    import math

    return [None if v is None or not math.isfinite(float(v)) else round(float(v), digits) for v in values]


def unrounded(values: Sequence[float | None]):
    """The float array ``rounded`` wrote (null back to NaN)."""
    import numpy as np

    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def evidence_of(record: Mapping) -> dict:
    """``record["evidence"]`` (empty when the result carries no records)."""
    ev = record.get("evidence")
    return dict(ev) if isinstance(ev, Mapping) else {}


def recomputed_or_partly(record: Mapping, full: str, partly: str) -> tuple[str, str]:
    """A ``recomputed_from`` answer: ``("recomputed", full)`` when ``record`` carries its per-example records, else
    ``("partly recomputed", partly)``."""
    return ("recomputed", full) if evidence_of(record) else ("partly recomputed", partly)
