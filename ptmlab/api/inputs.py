"""What the API accepts for ``model`` and ``data``, turned into the options (and in-memory source) a config takes."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ptmlab.core.errors import PtmlabError


def _is_model(obj: Any) -> bool:
    return hasattr(obj, "save_pretrained") and hasattr(obj, "config") and hasattr(obj, "named_parameters")


def model_label(obj: Any) -> str:
    """How a model object is named in a run's record: its hub id or path, else its class."""
    return str(getattr(obj.config, "_name_or_path", "") or type(obj).__name__)


@contextlib.contextmanager
def model_option(model: Any, tokenizer: Any = None):
    """Yields the ``model`` option: a string as given, or a transformers model (``(model, tokenizer)`` or
    ``tokenizer=``) written with its tokenizer to a temporary directory (safetensors) for the run to load."""
    if isinstance(model, tuple):
        if len(model) != 2:
            raise PtmlabError("model=(model, tokenizer) takes exactly two items")
        model, tokenizer = model
    if isinstance(model, str | os.PathLike):
        if tokenizer is not None:
            raise PtmlabError("tokenizer= goes with a model object; a model name or directory brings its own")
        yield str(model), None
        return
    if not _is_model(model):
        raise PtmlabError(f"model must be a zoo name, a directory, a hub id or a transformers model, not a "
                          f"{type(model).__name__}")
    if tokenizer is None or not hasattr(tokenizer, "save_pretrained"):
        raise PtmlabError("a model object needs its tokenizer: pass model=(model, tokenizer) or tokenizer=...")
    tmp = Path(tempfile.mkdtemp(prefix="ptmlab-model-"))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        yield str(tmp), model_label(model)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def data_options(data: Any) -> tuple[dict, Any]:
    """(options, in-memory source) for ``data``: a file trains from ``train_file``, ``hf:NAME`` and directories
    are the ``task``; objects (Dataset, DatasetDict, DataFrame, list of dicts, dict of splits) are read in memory."""
    if data is None:
        return {}, None
    if isinstance(data, str | os.PathLike):
        text = str(data)
        if text.startswith("hf:") or Path(text).expanduser().is_dir():
            return {"task": text}, None
        if Path(text).expanduser().is_file():
            return {"train_file": text}, None
        from ptmlab.data.tasks import TASKS

        if text in TASKS:
            return {"task": text}, None
        raise PtmlabError(f"data '{text}' is not a file, a directory, hf:NAME or a task name "
                          f"({', '.join(TASKS.names())})")
    return {}, data
