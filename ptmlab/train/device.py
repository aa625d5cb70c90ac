"""Where training runs (``--device auto|cpu|cuda|mps``) and the gradient scaler of ``--precision fp16``."""

from __future__ import annotations

import torch

from ptmlab.core.errors import PtmlabError

DEVICES = ("auto", "cpu", "cuda", "mps")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def resolve_device(name: str) -> str:
    """'auto' -> cuda when a GPU is visible, else mps (Apple GPUs), else cpu; an asked-for device that is not
    there is a one-line error."""
    if name not in DEVICES:
        raise PtmlabError(f"--device '{name}' is unknown: choose {', '.join(DEVICES)}")
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise PtmlabError("--device cuda: no CUDA GPU is visible to torch (use --device auto or cpu)")
    if name == "mps" and not _mps_available():
        raise PtmlabError("--device mps: the Apple GPU backend is not available here (use --device auto or cpu)")
    return name


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """fp16 gradients underflow without loss scaling: a ``GradScaler`` for fp16 training, None otherwise (bf16 has
    fp32's range and needs none)."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None
