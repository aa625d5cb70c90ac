"""Inference latency and size: the numbers every compression and distillation table reports."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from ptmlab.models.loader import model_inputs

WEIGHT_SUFFIXES = (".safetensors", ".onnx", ".bin")
# a pause before timing another model: onnxruntime's workers spin-wait after a call and slow whatever runs next
# (a torch matmul ran at 51-71 GFLOP/s right after one, 78-116 without; 5 ms of pause is not enough, 50 ms is)
SETTLE_S = 0.05


@torch.no_grad()
def measure_latency(model, tokenizer, texts: list[str], batch_size: int, repeats: int = 5, max_length: int = 64,
                    warmup: int = 1) -> float:
    """Median milliseconds for one forward pass over ``batch_size`` texts (fp32 unless the model is not), after a
    pause (``SETTLE_S``) and ``warmup`` untimed passes, so that no model is timed in what the one before it left
    behind (an onnxruntime model's spinning workers). On a CPU the passes run with freed memory kept in the process
    (``reuse_host_memory``), as ``ptmlab serve`` and evaluation run them."""
    from ptmlab.core.host_memory import reuse_host_memory

    time.sleep(SETTLE_S)
    model.eval()
    texts = (texts * (batch_size // max(1, len(texts)) + 1))[:batch_size]
    batch = tokenizer(texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt",
                      return_token_type_ids=True)
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in model_inputs(model, dict(batch)).items()}
    times = []
    with reuse_host_memory(device.type == "cpu"):
        for _ in range(warmup):
            model(**inputs)
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(**inputs)
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def time_side_by_side(variants: list[tuple], texts: list[str], rounds: int, max_length: int = 64,
                      b1_repeats: int = 1, batches: tuple[int, ...] = (1, 32), desc: str = "latency rounds") -> None:
    """Fill ``latency_b{N}_ms`` for each batch size N of ``batches`` (by default ``latency_b1_ms`` and
    ``latency_b32_ms``) of each ``(row, model, tokenizer)`` in ``variants``: rounds of round-robin over the variants
    (every batch size in turn, each variant in turn), the median of its rounds per variant, so that a slow stretch of
    a shared machine hits every variant alike (each call pauses and warms up first: ``measure_latency``). Batch 1
    takes ``b1_repeats`` timed passes per round, larger batches one."""
    from ptmlab.core.progress import progress

    times: dict[int, dict[int, list[float]]] = {i: {b: [] for b in batches} for i in range(len(variants))}
    for _ in progress(range(rounds), desc=desc):
        for i, (_row, model, tok) in enumerate(variants):
            for batch in batches:
                times[i][batch].append(measure_latency(model, tok, texts, batch,
                                                       repeats=b1_repeats if batch == 1 else 1,
                                                       max_length=max_length))
    for i, (row, _m, _t) in enumerate(variants):
        for batch in batches:
            row[f"latency_b{batch}_ms"] = round(statistics.median(times[i][batch]), 2)


def size_on_disk_mb(path: str | Path) -> float:
    """Megabytes of a model's weight files: a file, or a model directory's own weight files. Only a directory
    without weights at its top (weights in a subfolder) is searched below it; a run directory's nested variants
    (the demo's distilled/, pruned/, ...) and checkpoints are not the model and are not counted."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size / 2**20

    def weights(files) -> list[Path]:
        return [f for f in files if f.is_file() and f.suffix in WEIGHT_SUFFIXES
                and not any(part.startswith("checkpoint") for part in f.relative_to(p).parts)]

    files = weights(p.iterdir()) or weights(p.rglob("*"))
    return sum(f.stat().st_size for f in files) / 2**20


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())
