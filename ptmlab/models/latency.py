"""Inference latency and size: the numbers every compression and distillation table reports."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from ptmlab.models.loader import model_inputs

WEIGHT_SUFFIXES = (".safetensors", ".onnx", ".bin")


@torch.no_grad()
def measure_latency(model, tokenizer, texts: list[str], batch_size: int, repeats: int = 5, max_length: int = 64,
                    warmup: int = 1) -> float:
    """Median milliseconds for one forward pass over ``batch_size`` texts (fp32 unless the model is not)."""
    model.eval()
    texts = (texts * (batch_size // max(1, len(texts)) + 1))[:batch_size]
    batch = tokenizer(texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt",
                      return_token_type_ids=True)
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in model_inputs(model, dict(batch)).items()}
    for _ in range(warmup):
        model(**inputs)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model(**inputs)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


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
