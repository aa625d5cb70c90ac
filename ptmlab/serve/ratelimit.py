"""Retry-After values. The token buckets themselves live in the state store (``Store.admit``), charged per text,
so that every replica sharing a store enforces one rate per key."""

from __future__ import annotations

import math

MAX_RETRY_AFTER = 10**7  # seconds (about 4 months): a wait past it is a limit that never refills


def retry_after_header(seconds: float) -> str:
    """Retry-After is whole seconds; never 0 for a refused request, never more than ``MAX_RETRY_AFTER`` (a key
    stored with a rate slow enough to overflow the division still gets an answer)."""
    if not seconds <= MAX_RETRY_AFTER:  # inf and NaN too
        return str(MAX_RETRY_AFTER)
    return str(max(1, math.ceil(seconds)))
