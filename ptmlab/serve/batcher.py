"""Dynamic batching: requests from many clients are merged into one forward pass, and one bad request harms no other.

A worker thread takes the first waiting request, then keeps collecting until ``max_batch`` texts are gathered or
``max_wait`` seconds have passed since that first request, runs the model once, and hands each request its rows.
Requests arrive already tokenized (each on its own), so only the forward pass can fail here; when a batch of several
requests fails, each is retried alone, so only a request whose own input makes the model raise gets the error
(``InputError``). Requests whose client stopped waiting (timeout) are dropped before any work is done for them.
Any other failure while collecting or answering a batch fails that batch's requests (``BatchFailed``: the server's
fault, not charged) and never the worker thread, which goes on to the next batch.

On a multi-task model each request names its head (``task``): requests for different tasks may be collected
together, but each task's requests run as their own forward pass through their own head, and a failure is looked for
within that task's requests only.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from dataclasses import dataclass, field

from ptmlab.serve.metrics import Metrics
from ptmlab.serve.predictor import Encoding, InputError


@dataclass
class Job:
    encs: list[Encoding]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    task: str | None = None  # the head of a multi-task model that answers it (None: the default head)
    enqueued: float = field(default_factory=time.monotonic)


class QueueFull(Exception):
    """More texts are waiting than the server accepts; the client should retry shortly."""


class BatchFailed(Exception):
    """The server failed while answering this request's batch (not the request's input): retry shortly."""


class Batcher:
    def __init__(self, forward, max_batch: int = 32, max_wait: float = 0.01, max_queue: int = 4096,
                 metrics: Metrics | None = None):
        self.forward = forward
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.max_queue = max_queue
        self.metrics = metrics
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.waiting = 0  # texts queued, for back-pressure
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="ptmlab-batcher", daemon=True)
        self.thread.start()

    def submit(self, encs: list[Encoding], task: str | None = None) -> asyncio.Future:
        """Queue one request's encodings (for ``task``'s head); the returned future resolves to its probabilities."""
        with self.lock:
            if self.waiting + len(encs) > self.max_queue:
                raise QueueFull
            self.waiting += len(encs)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.jobs.put(Job(encs, fut, loop, task))
        return fut

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join(timeout=10)

    def _collect(self, first: Job) -> tuple[list[Job], Job | None, bool]:
        """(this batch, a job that starts the next one, whether the batcher was closed)."""
        batch, n = [first], len(first.encs)
        deadline = first.enqueued + self.max_wait
        while n < self.max_batch:
            try:
                wait = min(max(0.0, deadline - time.monotonic()), threading.TIMEOUT_MAX)
                job = self.jobs.get(timeout=wait)
            except queue.Empty:
                break
            if job is None:
                return batch, None, True
            if n + len(job.encs) > self.max_batch:
                return batch, job, False  # does not fit: it starts the next batch
            batch.append(job)
            n += len(job.encs)
        return batch, None, False

    def _run(self) -> None:
        carry: Job | None = None
        while True:
            job = carry or self.jobs.get()
            if job is None:
                return
            batch, carry, closed, counted = [job], None, False, False
            try:
                batch, carry, closed = self._collect(job)
                counted = True  # _answer takes the batch off the queue count first
                self._answer(batch)
            except Exception as e:  # this batch fails; the thread lives on for the next one
                if not counted:
                    with self.lock:
                        self.waiting -= len(job.encs)
                failed = BatchFailed(f"the server failed on this batch ({type(e).__name__}): retry shortly")
                for j in batch:
                    _reply(j, None, failed)
            if closed:
                return

    def _answer(self, batch: list[Job]) -> None:
        with self.lock:
            self.waiting -= sum(len(j.encs) for j in batch)
        live = [j for j in batch if not j.future.done()]  # timed out meanwhile: compute nothing for them
        by_task: dict[str | None, list[Job]] = {}
        for j in live:  # one head per forward pass
            by_task.setdefault(j.task, []).append(j)
        for jobs in by_task.values():
            self._answer_task(jobs)

    def _answer_task(self, live: list[Job]) -> None:
        try:
            self._run_jobs(live)
        except Exception as e:
            if len(live) == 1:
                _reply(live[0], None, _as_input_error(e))
                return
            for j in live:  # find the request at fault: each alone, so the others still get their answers
                try:
                    self._run_jobs([j])
                except Exception as e1:
                    _reply(j, None, _as_input_error(e1))

    def _run_jobs(self, jobs: list[Job]) -> None:
        encs = [e for j in jobs for e in j.encs]
        if self.metrics:
            self.metrics.batch_size(len(encs))
        probs = self.forward(encs, jobs[0].task)
        pos = 0
        for j in jobs:
            _reply(j, probs[pos:pos + len(j.encs)], None)
            pos += len(j.encs)


def _as_input_error(e: Exception) -> InputError:
    first = str(e).splitlines()[0][:200] if str(e) else "no message"
    return InputError(f"the model cannot process this input ({type(e).__name__}: {first})")


def _reply(job: Job, result, error) -> None:
    try:
        job.loop.call_soon_threadsafe(_set, job.future, result, error)
    except RuntimeError:  # the request's event loop is closed: nobody is waiting for this answer
        pass


def _set(fut: asyncio.Future, result, error) -> None:
    if fut.done():  # the request timed out meanwhile
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)
