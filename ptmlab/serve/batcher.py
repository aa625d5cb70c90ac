"""Dynamic batching: requests from many clients are merged into one forward pass.

A worker thread takes the first waiting request, then keeps collecting until ``max_batch`` texts are gathered or
``max_wait`` seconds have passed since that first request, runs the model once, and hands each request its rows.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from dataclasses import dataclass, field

from ptmlab.serve.metrics import Metrics


@dataclass
class Job:
    texts: list[str]
    pairs: list[str] | None
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued: float = field(default_factory=time.monotonic)


class QueueFull(Exception):
    """More texts are waiting than the server accepts; the client should retry shortly."""


class Batcher:
    def __init__(self, predict, max_batch: int = 32, max_wait: float = 0.01, max_queue: int = 4096,
                 metrics: Metrics | None = None):
        self.predict = predict
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.max_queue = max_queue
        self.metrics = metrics
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.waiting = 0  # texts queued, for back-pressure
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="ptmlab-batcher", daemon=True)
        self.thread.start()

    def submit(self, texts: list[str], pairs: list[str] | None) -> asyncio.Future:
        """Queue one request; the returned future resolves to its probabilities."""
        with self.lock:
            if self.waiting + len(texts) > self.max_queue:
                raise QueueFull
            self.waiting += len(texts)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.jobs.put(Job(texts, pairs, fut, loop))
        return fut

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join(timeout=10)

    def _collect(self, first: Job) -> tuple[list[Job], Job | None, bool]:
        """(this batch, a job that starts the next one, whether the batcher was closed)."""
        batch, n = [first], len(first.texts)
        deadline = first.enqueued + self.max_wait
        while n < self.max_batch:
            try:
                job = self.jobs.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                return batch, None, True
            if n + len(job.texts) > self.max_batch or (job.pairs is None) != (first.pairs is None):
                return batch, job, False  # does not fit: it starts the next batch
            batch.append(job)
            n += len(job.texts)
        return batch, None, False

    def _run(self) -> None:
        carry: Job | None = None
        while True:
            job = carry or self.jobs.get()
            if job is None:
                return
            batch, carry, closed = self._collect(job)
            self._answer(batch)
            if closed:
                return

    def _answer(self, batch: list[Job]) -> None:
        texts = [t for j in batch for t in j.texts]
        pairs = [p for j in batch for p in j.pairs] if batch[0].pairs is not None else None
        with self.lock:
            self.waiting -= len(texts)
        if self.metrics:
            self.metrics.batch_size(len(texts))
        try:
            probs = self.predict(texts, pairs)
        except Exception as e:  # a model failure answers these requests with an error, never kills the worker
            for j in batch:
                j.loop.call_soon_threadsafe(_set, j.future, None, e)
            return
        pos = 0
        for j in batch:
            rows = probs[pos:pos + len(j.texts)]
            pos += len(j.texts)
            j.loop.call_soon_threadsafe(_set, j.future, rows, None)


def _set(fut: asyncio.Future, result, error) -> None:
    if fut.done():  # the request timed out meanwhile
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)
