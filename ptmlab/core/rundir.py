"""One run directory layout for every command that produces a model or a measurement.

    RUN/config.yaml      resolved config          RUN/metrics.jsonl   one JSON object per log or evaluation
    RUN/summary.json     final numbers            RUN/report.html     plots and tables
    RUN/config.json, model.safetensors, tokenizer files   the model, in save_pretrained layout
    RUN/checkpoint/      resumable state while training (removed when the run finishes)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import append_jsonl, atomic_write_json, atomic_write_yaml, read_jsonl

RUN_MARKERS = ("config.yaml", "summary.json", "metrics.jsonl")


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    # ------------------------------------------------------------------ creation
    @classmethod
    def create(cls, path: str | Path | None, overwrite: bool = False) -> RunDir:
        """Check the output directory can take a new run; create it (call after validating all inputs)."""
        check_output_dir(path, overwrite)
        p = Path(path)
        if overwrite and p.exists():
            for m in RUN_MARKERS + ("report.html",):
                (p / m).unlink(missing_ok=True)
            shutil.rmtree(p / "checkpoint", ignore_errors=True)
        try:
            p.mkdir(parents=True, exist_ok=True)
            probe = p / ".ptmlab-write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise PtmlabError(f"cannot create output '{p}' ({e.strerror}): choose a writable --output whose parent "
                              f"is a directory") from None
        return cls(p)

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        p = Path(path)
        if not (p / "config.yaml").is_file():
            raise PtmlabError(f"'{p}' is not a ptmlab run directory (no config.yaml)")
        return cls(p)

    @classmethod
    def resume_config(cls, path: str | Path, config_cls, command: str):
        """The config a killed run was started with (``config_cls``), to continue it with ``--resume``."""
        from ptmlab.core.config import build_config

        saved = cls.open(path).read_config()
        started_by = saved.pop("command", command)
        if started_by not in (command, "study"):
            raise PtmlabError(f"'{path}' was started by 'ptmlab {started_by}': resume it with "
                              f"'ptmlab {started_by} --resume {path}'")
        saved["output"] = str(path)
        return build_config(config_cls, saved, source=f"{path}/config.yaml")

    # ------------------------------------------------------------------ files
    def file(self, name: str) -> Path:
        return self.path / name

    def write_config(self, cfg: dict, command: str) -> None:
        atomic_write_yaml(self.file("config.yaml"), {"command": command, **cfg})

    def read_config(self) -> dict:
        import yaml

        try:
            data = yaml.safe_load(self.file("config.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise PtmlabError(f"cannot read '{self.file('config.yaml')}': {e}") from None
        if not isinstance(data, dict):
            raise PtmlabError(f"'{self.file('config.yaml')}' must hold a mapping of option: value, not a "
                              f"{type(data).__name__}: the run directory is damaged")
        return data

    def log(self, row: dict[str, Any]) -> None:
        append_jsonl(self.file("metrics.jsonl"), row)

    def metrics(self) -> list[dict]:
        return read_jsonl(self.file("metrics.jsonl"))

    def truncate_metrics(self, max_step: int) -> None:
        """Drop log rows written after a checkpoint (a resumed run writes them again)."""
        rows = [r for r in self.metrics() if r.get("step", 0) <= max_step]
        from ptmlab.core.io import atomic_write_text

        atomic_write_text(self.file("metrics.jsonl"), "".join(json.dumps(r) + "\n" for r in rows))

    def write_summary(self, summary: dict, *, data=None, model=None) -> None:
        """summary.json, with the run's ``provenance`` added (to ``summary`` too): versions, git commit and whether
        the checkout was modified, command line, seed (config.yaml's), the training data's record (``data``: task data
        or its record), the hub commit of ``model`` (the trained model, when it came from the hub cache), start
        (config.yaml's time: the run's first file) and end times, device."""
        from ptmlab.core.provenance import provenance

        config = self.file("config.yaml")
        started = config.stat().st_mtime if config.is_file() else None
        try:
            seed = self.read_config().get("seed") if config.is_file() else None
        except PtmlabError:  # a damaged config.yaml: the summary is still written
            seed = None
        summary.setdefault("provenance", provenance(started, seed=seed if isinstance(seed, int) else None,
                                                    data=data, model=model))
        atomic_write_json(self.file("summary.json"), summary)

    def summary(self) -> dict:
        try:
            return json.loads(self.file("summary.json").read_text())
        except (OSError, json.JSONDecodeError):
            raise PtmlabError(f"'{self.path}' has no readable summary.json: the run did not finish") from None

    def has_model(self) -> bool:
        return (self.path / "config.json").is_file() and any(self.path.glob("model*.safetensors"))


def check_output_dir(p: str | Path | None, overwrite: bool = False) -> None:
    """Refuse a missing output, or a directory holding another run or unrelated files (unless --overwrite)."""
    if not p:
        raise PtmlabError("no output directory: pass --output RUN_DIR")
    p = Path(p)
    if p.exists() and not p.is_dir():
        raise PtmlabError(f"output '{p}' exists and is a file: choose another --output")
    if p.is_dir() and any(p.iterdir()):
        is_run = any((p / m).exists() for m in RUN_MARKERS)
        if is_run and not overwrite:
            raise PtmlabError(f"output directory '{p}' holds another run: choose a new --output, pass --overwrite, "
                              f"or continue it with --resume")
        if not is_run:
            raise PtmlabError(f"output directory '{p}' is not empty and is not a ptmlab run: choose a new --output")
