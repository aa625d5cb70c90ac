"""Retry-After values. The token buckets themselves live in the state store (``Store.admit``), charged per text,
so that every replica sharing a store enforces one rate per key."""

from __future__ import annotations

import math


def retry_after_header(seconds: float) -> str:
    """Retry-After is whole seconds; never 0 for a refused request."""
    return str(max(1, math.ceil(seconds)))
