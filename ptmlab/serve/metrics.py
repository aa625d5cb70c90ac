"""Prometheus text-format metrics: counters, a latency histogram and a batch-size histogram."""

from __future__ import annotations

import threading
from collections import defaultdict

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class Histogram:
    def __init__(self, buckets: tuple):
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, v: float) -> None:
        self.total += 1
        self.sum += v
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1

    def lines(self, name: str) -> list[str]:
        out = [f'{name}_bucket{{le="{b}"}} {c}' for b, c in zip(self.buckets, self.counts, strict=True)]
        out += [f'{name}_bucket{{le="+Inf"}} {self.total}', f"{name}_sum {self.sum:.6f}", f"{name}_count {self.total}"]
        return out


class Metrics:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests: dict[str, int] = defaultdict(int)  # by status code
        self.rejects: dict[str, int] = defaultdict(int)  # by reason
        self.queries = 0
        self.latency = Histogram(LATENCY_BUCKETS)
        self.batch = Histogram(BATCH_BUCKETS)

    def request(self, status: int, seconds: float) -> None:
        with self.lock:
            self.requests[str(status)] += 1
            self.latency.observe(seconds)

    def reject(self, reason: str) -> None:
        with self.lock:
            self.rejects[reason] += 1

    def answered(self, n_texts: int) -> None:
        with self.lock:
            self.queries += n_texts

    def batch_size(self, n: int) -> None:
        with self.lock:
            self.batch.observe(n)

    def render(self) -> str:
        with self.lock:
            lines = ["# HELP ptmlab_requests_total Prediction requests by HTTP status.",
                     "# TYPE ptmlab_requests_total counter"]
            lines += [f'ptmlab_requests_total{{status="{s}"}} {n}' for s, n in sorted(self.requests.items())]
            lines += ["# HELP ptmlab_rejects_total Refused requests by reason.", "# TYPE ptmlab_rejects_total counter"]
            lines += [f'ptmlab_rejects_total{{reason="{r}"}} {n}' for r, n in sorted(self.rejects.items())]
            lines += ["# HELP ptmlab_queries_total Texts answered.", "# TYPE ptmlab_queries_total counter",
                      f"ptmlab_queries_total {self.queries}",
                      "# HELP ptmlab_request_seconds Latency of prediction requests.",
                      "# TYPE ptmlab_request_seconds histogram"]
            lines += self.latency.lines("ptmlab_request_seconds")
            lines += ["# HELP ptmlab_batch_size Texts per model forward pass.", "# TYPE ptmlab_batch_size histogram"]
            lines += self.batch.lines("ptmlab_batch_size")
        return "\n".join(lines) + "\n"
