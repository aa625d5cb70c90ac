"""``ptmlab longify``: load a model, convert it for long inputs, save it (safetensors) where finetune can load it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import Validated, at_least, opt
from ptmlab.core.errors import PtmlabError


@dataclass(frozen=True)
class LongifyConfig(Validated):
    model: str = opt("minilm", "zoo name, model directory or run directory to convert")
    max_length: int = opt(4096, "longest input in tokens after conversion")
    window: int = opt(256, "attention window, total width (half on each side); odd values are rounded up")
    global_tokens: list[str] = opt(["0"], "positions that attend everywhere and are seen everywhere ([CLS] = 0)",
                                   cli=False)
    output: str | None = opt(None, "directory to write the long model into")

    def validate(self) -> None:
        if not self.output:
            raise PtmlabError("longify needs --output DIR: where to write the long model")
        if self.max_length < 1:
            raise PtmlabError(f"--max-length {self.max_length} must be a positive number of tokens, e.g. 4096")
        at_least(self, 1, "window")
        for p in self.global_tokens:
            if not str(p).lstrip("-").isdigit():
                raise PtmlabError(f"--global {p!r} is not a token position: pass integers like 0 or 0,1")

    @property
    def global_positions(self) -> list[int]:
        return sorted({int(p) for p in self.global_tokens})


def _has_task_head(name: str) -> bool:
    from transformers import AutoConfig

    from ptmlab.models.zoo import resolve

    path, entry = resolve(name)
    if entry is not None and entry.random_config is not None:
        return False
    archs = getattr(AutoConfig.from_pretrained(path), "architectures", None) or []
    return any(a.endswith("ForSequenceClassification") for a in archs)


def run_longify(cfg: LongifyConfig) -> dict:
    """Convert and save; returns what changed (lengths, window, globals, family)."""
    from ptmlab.core.seed import set_seed
    from ptmlab.longseq.convert import longify, max_supported_length
    from ptmlab.longseq.window import even_window
    from ptmlab.models.loader import save_model
    from ptmlab.models.structure import structure_of
    from ptmlab.models.zoo import load_model, load_tokenizer

    head = _has_task_head(cfg.model)
    set_seed(42)  # a random-weight zoo model (tiny) converts to the same weights in every process
    model = load_model(cfg.model, task_head=head)
    tokenizer = load_tokenizer(cfg.model)
    before = max_supported_length(model)
    longify(model, cfg.max_length, cfg.window, cfg.global_positions)
    tokenizer.model_max_length = cfg.max_length
    save_model(model, tokenizer, Path(cfg.output))
    return {"family": structure_of(model).family, "max_length_before": before, "max_length": cfg.max_length,
            "window": even_window(cfg.window), "window_requested": cfg.window, "global_tokens": cfg.global_positions,
            "task_head": head, "output": str(cfg.output)}
