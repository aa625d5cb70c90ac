"""Batched, length-sorted inference and task metrics."""

from __future__ import annotations

import numpy as np
import torch

from ptmlab.core.progress import progress
from ptmlab.data.batching import collate, eval_batches
from ptmlab.data.encode import Encoded
from ptmlab.data.labels import DEFAULT_THRESHOLD, MULTI_LABEL, decision_threshold
from ptmlab.data.metrics import compute_metrics
from ptmlab.data.tasks import SPAN_KINDS, TaskSpec
from ptmlab.models.loader import model_inputs


def autocast_ctx(precision: str, device: torch.device):
    if precision in ("bf16", "fp16"):
        return torch.autocast(device_type=device.type,
                              dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
    import contextlib

    return contextlib.nullcontext()


def resolve_precision(precision: str, device: torch.device | None = None) -> str:
    """'auto' -> bf16 where matmuls in bf16 are fast (CUDA with bf16, CPUs with AVX512-BF16/AMX), else fp32."""
    if precision != "auto":
        return precision
    device = device or torch.device("cpu")
    if device.type == "mps":
        return "fp32"
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    try:
        fast = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    except AttributeError:  # pragma: no cover
        fast = False
    return "bf16" if fast else "fp32"


@torch.no_grad()
def predict_logits(model, enc: Encoded, pad_id: int, batch_size: int = 128, precision: str = "fp32",
                   desc: str = "evaluate", bar: bool = False) -> np.ndarray:
    """Logits for every example, in the original order (a progress bar over 2000 examples, or with ``bar``)."""
    from ptmlab.core.host_memory import reuse_host_memory
    from ptmlab.models.first_token import first_token_only

    model.eval()
    device = next(model.parameters()).device
    out: list[np.ndarray | None] = [None] * len(enc)
    batches = eval_batches(enc.lengths, batch_size)
    # only logits are read here: the last feed-forward block on position 0 alone (exact), unless someone else's
    # hooks (a distillation objective, an analysis) are watching the model
    watched = any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    cut = None if watched else first_token_only(model)
    try:
        with reuse_host_memory(device.type == "cpu"):  # freed activations reuse their pages (host_memory.py)
            for idx in progress(batches, desc=desc, disable=None if bar or len(enc) > 2000 else True):
                batch = collate(enc, idx, pad_id)
                inputs = {k: v.to(device) for k, v in model_inputs(model, batch).items()}
                with autocast_ctx(precision, device):
                    logits = model(**inputs).logits.float().cpu().numpy()
                for row, i in enumerate(idx):
                    out[i] = logits[row]
    finally:
        if cut is not None:
            cut.remove()
    return np.stack(out) if out else np.zeros((0, 1))


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))


def logits_to_predictions(logits: np.ndarray, spec: TaskSpec, threshold: float | None = None) -> np.ndarray:
    """Class ids (argmax), scores (regression) or multi-hot label sets (multi-label: every class whose sigmoid
    probability reaches ``threshold``, 0.5 when None)."""
    if spec.kind == "regression":
        return logits[:, 0]
    if spec.kind == MULTI_LABEL:
        return (sigmoid(logits) >= (DEFAULT_THRESHOLD if threshold is None else threshold)).astype(np.int64)
    return logits.argmax(-1)


def evaluate(model, enc: Encoded, spec: TaskSpec, pad_id: int, batch_size: int = 128,
             precision: str = "fp32", choose_threshold: bool = False) -> tuple[dict[str, float], np.ndarray]:
    """Official metrics of the task (and the predictions; tags per word or answers for the span kinds).

    Multi-label: label sets at the model's saved decision threshold (``decision_threshold``), or with
    ``choose_threshold`` (dev evaluations while training) at the threshold that maximises micro-F1 on these
    labels (``best_threshold``); the metrics carry the ``threshold`` used."""
    if spec.kind in SPAN_KINDS:
        from ptmlab.train.spans import evaluate_span

        return evaluate_span(model, enc, spec, batch_size, precision)
    logits = predict_logits(model, enc, pad_id, batch_size, precision)
    if spec.kind == MULTI_LABEL:
        return _evaluate_multi_label(model, logits, enc.labels, spec, choose_threshold)
    preds = logits_to_predictions(logits, spec)
    if enc.labels is None:
        return {}, preds
    return compute_metrics(spec.metrics, preds, enc.labels), preds


def _evaluate_multi_label(model, logits: np.ndarray, labels, spec: TaskSpec,
                          choose: bool) -> tuple[dict[str, float], np.ndarray]:
    from ptmlab.data.metrics import best_threshold

    probs = sigmoid(logits)
    if choose and labels is not None and len(labels):
        threshold = best_threshold(probs, np.asarray(labels))
    else:
        threshold = decision_threshold(getattr(model, "config", None))
    preds = (probs >= threshold).astype(np.int64)
    if labels is None:
        return {}, preds
    return {**compute_metrics(spec.metrics, preds, labels), "threshold": threshold}, preds
