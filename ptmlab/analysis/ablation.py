"""Head and layer ablation: remove (or make uniform) one head or layer at a time and measure the dev metric.

Fast path: one clean, length-sorted pass caches the hidden states entering every layer; ablating something in
layer l then reruns only layers l..L-1 (layers below l are bypassed and the cached state is injected at l), in
large padded-to-length batches, optionally under bf16 autocast. The gates themselves are ``ptmlab.models.gates``.
``naive_head_ablation`` is the reference: one full forward per example and head.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from ptmlab.core.progress import progress
from ptmlab.data.batching import collate, eval_batches
from ptmlab.data.encode import Encoded
from ptmlab.data.metrics import compute_metrics
from ptmlab.data.tasks import TaskSpec
from ptmlab.models.gates import Gates
from ptmlab.models.loader import model_inputs
from ptmlab.models.structure import structure_of
from ptmlab.train.evaluate import autocast_ctx, logits_to_predictions


@dataclass
class AblationTable:
    """Dev metric of the intact model and of each ablation (``removed[l, h]``, ``uniform[l, h]``)."""

    metric: str
    base: float
    removed: np.ndarray
    uniform: np.ndarray

    def rows(self) -> list[dict]:
        """One row per head (or layer when the arrays are 1-D): the metric and its change for each ablation."""
        out = []
        for idx in np.ndindex(self.removed.shape):
            row = {"layer": int(idx[0])} | ({"head": int(idx[1])} if len(idx) > 1 else {})
            for name, arr in (("removed", self.removed), ("uniform", self.uniform)):
                if np.isnan(arr).all():
                    continue  # not measured (--no-uniform)
                row[f"{name}_{self.metric}"] = float(arr[idx])
                row[f"{name}_delta"] = float(arr[idx] - self.base)
            out.append(row)
        return out

    def helpful(self, kind: str = "removed", tol: float = 0.0) -> list[tuple[int, ...]]:
        """Units whose ablation raises the metric by more than ``tol``."""
        arr = self.removed if kind == "removed" else self.uniform
        return [tuple(int(i) for i in idx) for idx in np.ndindex(arr.shape) if arr[idx] - self.base > tol]


class CachedAblation:
    """Clean hidden states cached per batch; ``evaluate(layer, configure)`` reruns layers ``layer..L-1`` only."""

    def __init__(self, model, enc: Encoded, spec: TaskSpec, pad_id: int, batch_size: int = 128,
                 precision: str = "fp32"):
        self.model, self.enc, self.spec = model.eval(), enc, spec
        self.precision = precision
        self.device = next(model.parameters()).device
        self.s = structure_of(model)
        self.layers = self.s.layer_list(model)
        self.batches = eval_batches(enc.lengths, batch_size)
        self.inputs = [{k: v.to(self.device) for k, v in model_inputs(model, collate(enc, idx, pad_id)).items()}
                       for idx in self.batches]
        self.gates = Gates(model)
        self.hidden: list[list[torch.Tensor]] = []  # [batch][layer] hidden state entering the layer
        self._tuple_out = [False] * len(self.layers)
        self.base_logits = self._clean_pass()

    @torch.no_grad()
    def _clean_pass(self) -> np.ndarray:
        current: list[torch.Tensor] = []

        def grab(i):
            def hook(module, args, kwargs):
                current.append((args[0] if args else kwargs["hidden_states"]).detach())
            return hook

        def out_kind(i):
            def hook(module, args, output):
                self._tuple_out[i] = isinstance(output, tuple)
            return hook

        handles = [layer.register_forward_pre_hook(grab(i), with_kwargs=True) for i, layer in enumerate(self.layers)]
        handles += [layer.register_forward_hook(out_kind(i)) for i, layer in enumerate(self.layers)]
        logits = []
        try:
            for inp in progress(self.inputs, desc="clean pass"):
                current = []
                with autocast_ctx(self.precision, self.device):
                    logits.append(self.model(**inp).logits.float())
                self.hidden.append(current)
        finally:
            for h in handles:
                h.remove()
        return self._reorder(logits)

    def _reorder(self, logits: list[torch.Tensor]) -> np.ndarray:
        out = np.zeros((len(self.enc), logits[0].shape[-1]), dtype=np.float32)
        for idx, lg in zip(self.batches, logits, strict=True):
            out[idx] = lg.cpu().numpy()
        return out

    @contextlib.contextmanager
    def _start_at(self, layer: int, batch: int):
        """Bypass layers below ``layer`` and feed it the cached hidden state of ``batch``."""
        cached = self.hidden[batch][layer]

        def passthrough(i):
            def forward(hidden_states, *args, **kwargs):
                return (hidden_states,) if self._tuple_out[i] else hidden_states
            return forward

        def inject(module, args, kwargs):
            if args:
                return (cached, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": cached}

        for i in range(layer):
            self.layers[i].forward = passthrough(i)
        handle = self.layers[layer].register_forward_pre_hook(inject, with_kwargs=True)
        try:
            yield
        finally:
            handle.remove()
            for i in range(layer):
                del self.layers[i].forward

    @torch.no_grad()
    def logits(self, layer: int, configure) -> np.ndarray:
        """Logits for every example with ``configure(gates)`` applied, rerunning layers ``layer..`` only."""
        self.gates.reset()
        configure(self.gates)
        out = []
        with self.gates:
            for b, inp in enumerate(self.inputs):
                with self._start_at(layer, b), autocast_ctx(self.precision, self.device):
                    out.append(self.model(**inp).logits.float())
        self.gates.reset()
        return self._reorder(out)

    def score(self, logits: np.ndarray) -> float:
        preds = logits_to_predictions(logits, self.spec)
        return float(compute_metrics(self.spec.metrics, preds, self.enc.labels)[self.spec.main_metric])


def head_ablation(model, enc: Encoded, spec: TaskSpec, pad_id: int, batch_size: int = 128,
                  precision: str = "fp32", kinds: tuple[str, ...] = ("removed", "uniform")) -> AblationTable:
    """Every head removed in turn (gate 0) and made uniform in turn (every token attends 1/L)."""
    run = CachedAblation(model, enc, spec, pad_id, batch_size, precision)
    g = run.gates
    shape = (g.num_layers, max(g.heads_in(i) for i in range(g.num_layers)))
    tables = {k: np.full(shape, np.nan) for k in ("removed", "uniform")}
    jobs = [(k, layer, h) for k in kinds for layer in range(g.num_layers) for h in range(g.heads_in(layer))]
    for kind, layer, head in progress(jobs, desc="head ablation"):
        act = (lambda gt, la=layer, he=head: gt.remove_head(la, he)) if kind == "removed" else \
            (lambda gt, la=layer, he=head: gt.uniform_head(la, he))
        tables[kind][layer, head] = run.score(run.logits(layer, act))
    return AblationTable(spec.main_metric, run.score(run.base_logits), tables["removed"], tables["uniform"])


def layer_ablation(model, enc: Encoded, spec: TaskSpec, pad_id: int, batch_size: int = 128,
                   precision: str = "fp32") -> AblationTable:
    """Every layer skipped in turn (identity) and with all its heads uniform in turn."""
    run = CachedAblation(model, enc, spec, pad_id, batch_size, precision)
    g = run.gates
    removed, uniform = np.zeros(g.num_layers), np.zeros(g.num_layers)
    for layer in progress(range(g.num_layers), desc="layer ablation"):
        removed[layer] = run.score(run.logits(layer, lambda gt, la=layer: gt.skip_layer(la)))
        uniform[layer] = run.score(run.logits(layer, lambda gt, la=layer: [gt.uniform_head(la, h)
                                                                           for h in range(gt.heads_in(la))]))
    return AblationTable(spec.main_metric, run.score(run.base_logits), removed, uniform)


@torch.no_grad()
def naive_head_logits(model, enc: Encoded, layer: int, head: int, kind: str = "removed") -> np.ndarray:
    """Reference: one full forward pass per example (no batching, no caching) with one head ablated."""
    model.eval()
    out = []
    with Gates(model) as g:
        (g.remove_head if kind == "removed" else g.uniform_head)(layer, head)
        for i in range(len(enc)):
            batch = collate(enc, [i], 0, pad_to=1)
            out.append(model(**model_inputs(model, batch)).logits[0].float().numpy())
    return np.stack(out)


def naive_head_ablation(model, enc: Encoded, spec: TaskSpec) -> AblationTable:
    """The reference table, one head at a time with ``naive_head_logits`` (slow; for tests and benchmarks)."""
    g = Gates(model)
    shape = (g.num_layers, g.num_heads)
    tables = {k: np.full(shape, np.nan) for k in ("removed", "uniform")}

    def score(logits):
        preds = logits_to_predictions(logits, spec)
        return float(compute_metrics(spec.metrics, preds, enc.labels)[spec.main_metric])

    for kind in tables:
        for layer in range(g.num_layers):
            for head in range(g.heads_in(layer)):
                tables[kind][layer, head] = score(naive_head_logits(model, enc, layer, head, kind))
    base = []
    with torch.no_grad():
        for i in range(len(enc)):
            base.append(model(**model_inputs(model, collate(enc, [i], 0, pad_to=1))).logits[0].float().numpy())
    return AblationTable(spec.main_metric, score(np.stack(base)), tables["removed"], tables["uniform"])
