"""What the handlers share (``ServeContext``: the config, the state store, the model, the batcher, the metrics and
the defences) and the state store's calls under ``--state-timeout``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ptmlab.serve.batcher import Batcher
from ptmlab.serve.config import ServeConfig
from ptmlab.serve.defences import ServingDefences
from ptmlab.serve.metrics import Metrics
from ptmlab.serve.policy import parse_policy
from ptmlab.serve.state import Store, StoreBusy, open_store

if TYPE_CHECKING:
    from ptmlab.serve.predictor import ModelInfo, Predictor


class StoreHealth:
    """Whether the state store answers, for ``/healthz``: a ping on a thread of its own (never queued behind
    requests waiting on a stalled store), at most one per second, each given ``timeout`` seconds."""

    def __init__(self, store: Store, timeout: float, every: float = 1.0):
        self.store, self.timeout, self.every = store, timeout, every
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ptmlab-store-ping")
        self.checked, self.ok, self.pending = float("-inf"), True, None

    async def reachable(self) -> bool:
        if time.monotonic() - self.checked < self.every:
            return self.ok
        loop = asyncio.get_running_loop()
        if self.pending is None or self.pending.done() or self.pending.get_loop() is not loop:
            self.pending = loop.run_in_executor(self.pool, self.store.ping)  # a ping still waiting is waited on
            self.pending.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            await asyncio.wait_for(asyncio.shield(self.pending), self.timeout)
            ok = True
        except Exception:  # noqa: BLE001 (StoreBusy, a timeout, the back-end's error: all say "unreachable")
            ok = False
        self.checked, self.ok = time.monotonic(), ok
        return ok

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class ServeContext:
    """The state every handler reads; one per app (``app.state.context``)."""
    cfg: ServeConfig
    store: Store
    predictor: Predictor
    info: ModelInfo
    metrics: Metrics
    batcher: Batcher
    defences: ServingDefences
    health: StoreHealth
    name: str  # what clients see of the model: its folder's name, never the path
    hold_seconds: float  # a hold outlives its request; a killed server's holds expire after this

    @classmethod
    def build(cls, model_dir: str, cfg: ServeConfig, store: Store | None = None) -> ServeContext:
        """Validate ``cfg``, open the store (unless given), load the model and start its batcher."""
        from ptmlab.serve.predictor import Predictor

        cfg.validate()
        if cfg.trust_pickle:
            from ptmlab.models.loader import trust_pickle

            trust_pickle(model_dir)
        policy = parse_policy(cfg.output_policy)
        store = store or open_store(cfg.state or None, cfg.state_timeout)
        predictor = Predictor(model_dir, cfg.max_length or None, cfg.precision, cfg.chunk)
        metrics = Metrics()
        batcher = Batcher(predictor.forward, cfg.max_batch, cfg.max_wait_ms / 1000, cfg.max_queue, metrics)
        defences = ServingDefences.build(cfg, store, policy)
        return cls(cfg, store, predictor, predictor.info, metrics, batcher, defences,
                   StoreHealth(store, cfg.state_timeout), Path(predictor.info.path).name, cfg.timeout + 60)

    async def in_store(self, fn, *args, **kw):
        """A state-store call in a thread, given up after --state-timeout (503 + Retry-After): a store that stopped
        answering (a frozen database, a dead network path) never holds a request longer."""
        try:
            return await asyncio.wait_for(asyncio.to_thread(fn, *args, **kw), self.cfg.state_timeout)
        except TimeoutError:
            raise StoreBusy(f"the state store did not answer within {self.cfg.state_timeout:g}s") from None

    def close(self) -> None:
        self.batcher.close()
        self.health.close()
