"""Per-key token buckets: ``burst`` requests at once, refilled at ``rate`` requests per second."""

from __future__ import annotations

import math
import threading
import time


class TokenBuckets:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.lock = threading.Lock()
        self.buckets: dict[int, tuple[float, float]] = {}  # key id -> (tokens, last refill time)

    def take(self, key_id: int, rate: float, burst: float, cost: float = 1.0) -> float:
        """Take ``cost`` tokens; returns 0 on success, else the seconds to wait before retrying."""
        now = self.clock()
        with self.lock:
            tokens, last = self.buckets.get(key_id, (burst, now))
            tokens = min(burst, tokens + (now - last) * rate)
            if tokens >= cost:
                self.buckets[key_id] = (tokens - cost, now)
                return 0.0
            self.buckets[key_id] = (tokens, now)
            return (cost - tokens) / rate


def retry_after_header(seconds: float) -> str:
    """Retry-After is whole seconds; never 0 for a refused request."""
    return str(max(1, math.ceil(seconds)))
