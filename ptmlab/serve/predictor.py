"""The served model: any ptmlab run or model directory, loaded through the zoo, answering batches of texts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ptmlab.core.errors import PtmlabError


@dataclass(frozen=True)
class ModelInfo:
    path: str
    labels: list[str]
    pair: bool | None  # True: pairs required; False: single texts only; None: either
    max_length: int
    task: str | None


class Predictor:
    """Softmax probabilities for a list of (text, pair) examples, one forward pass per call."""

    def __init__(self, model_dir: str | Path, max_length: int | None = None, precision: str = "fp32",
                 chunk: int = 0):
        from ptmlab.models.zoo import load_model, load_tokenizer
        from ptmlab.train.evaluate import resolve_precision

        path = Path(model_dir)
        if not path.is_dir():
            raise PtmlabError(f"model '{model_dir}' is not a directory: pass a ptmlab run directory")
        cfg = _run_config(path)
        self.model = load_model(str(path))
        self.model.eval()
        self.precision = resolve_precision(precision, next(self.model.parameters()).device)
        self.chunk = chunk
        self.tokenizer = load_tokenizer(str(path))
        if getattr(self.model.config, "problem_type", None) == "regression" or self.model.config.num_labels < 2:
            raise PtmlabError(f"model '{model_dir}' is a regression model: serving supports classifiers only")
        id2label = self.model.config.id2label
        task = cfg.get("task")
        self.info = ModelInfo(str(path), [str(id2label[i]) for i in range(len(id2label))], _is_pair(task),
                              int(max_length or cfg.get("max_length") or 128), task)

    @torch.inference_mode()
    def predict(self, texts: list[str], pairs: list[str] | None = None) -> list[list[float]]:
        """Probabilities per example; with ``chunk`` the examples run as length-sorted chunks (less padding)."""
        if not self.chunk or len(texts) <= self.chunk:
            return self._forward(texts, pairs)
        lengths = [len(t) + len(pairs[i] if pairs else "") for i, t in enumerate(texts)]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        out: list[list[float]] = [[] for _ in texts]
        for s in range(0, len(order), self.chunk):
            idx = order[s:s + self.chunk]
            rows = self._forward([texts[i] for i in idx], [pairs[i] for i in idx] if pairs else None)
            for i, row in zip(idx, rows, strict=True):
                out[i] = row
        return out

    def _forward(self, texts: list[str], pairs: list[str] | None) -> list[list[float]]:
        from ptmlab.models.loader import model_inputs
        from ptmlab.train.evaluate import autocast_ctx

        enc = self.tokenizer(texts, pairs, truncation=True, max_length=self.info.max_length, padding=True,
                             return_tensors="pt")
        with autocast_ctx(self.precision, next(self.model.parameters()).device):
            logits = self.model(**model_inputs(self.model, dict(enc))).logits.float()
        return torch.softmax(logits, -1).tolist()


def _run_config(path: Path) -> dict:
    if not (path / "config.yaml").is_file():
        return {}
    from ptmlab.core.rundir import RunDir

    return RunDir(path).read_config()


def _is_pair(task: str | None) -> bool | None:
    from ptmlab.data.tasks import TASKS

    if task and task in TASKS:
        return TASKS.get(task).is_pair
    return None
