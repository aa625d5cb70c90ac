"""What the API accepts for ``model`` and ``data``, turned into the options (and in-memory source) a config takes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ptmlab.core.errors import PtmlabError


def _is_model(obj: Any) -> bool:
    return hasattr(obj, "save_pretrained") and hasattr(obj, "config") and hasattr(obj, "named_parameters")


def model_label(obj: Any) -> str:
    """How a model object is named in a run's record: its hub id or path, else its class (a PEFT model: its base's,
    with ``+peft``)."""
    if _is_peft(obj):
        return f"{model_label(obj.get_base_model())}+peft"
    return str(getattr(obj.config, "_name_or_path", "") or type(obj).__name__)


@contextlib.contextmanager
def model_option(model: Any, tokenizer: Any = None):
    """Yields the ``model`` option: a string as given, or a transformers model (``(model, tokenizer)`` or
    ``tokenizer=``) written with its tokenizer to a temporary directory (safetensors) for the run to load."""
    if isinstance(model, tuple):
        if len(model) != 2:
            raise PtmlabError("model=(model, tokenizer) takes exactly two items")
        model, tokenizer = model
    from ptmlab.api.run import Run

    if isinstance(model, Run):  # a run is its directory, as in every other verb
        model = model.path
    if isinstance(model, str | os.PathLike):
        if tokenizer is not None:
            raise PtmlabError("tokenizer= goes with a model object; a model name or directory brings its own")
        yield str(model), None
        return
    if not _is_model(model):
        raise PtmlabError(f"model must be a zoo name, a directory, a hub id, a Run or a transformers or PEFT model, "
                          f"not a {type(model).__name__}")
    if tokenizer is None or not hasattr(tokenizer, "save_pretrained"):
        raise PtmlabError("a model object needs its tokenizer: pass model=(model, tokenizer) or tokenizer=...")
    label = model_label(model)
    if _is_peft(model):  # its adapters folded into a copy of the base weights; the caller's model is untouched
        import copy

        model = copy.deepcopy(model).merge_and_unload()
    tmp = Path(tempfile.mkdtemp(prefix="ptmlab-model-"))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        try:
            yield str(tmp), label
        except PtmlabError as e:  # name the object, not the temporary directory it was read from
            if str(tmp) not in str(e):
                raise
            text = str(e).replace(f"model '{tmp}'", f"'{tmp}'").replace(f"'{tmp}'", f"the model object ({label})")
            raise PtmlabError(text.replace(str(tmp), label)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _is_peft(obj: Any) -> bool:
    return hasattr(obj, "peft_config") and hasattr(obj, "merge_and_unload")


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


def training_data(data: Any, options: dict) -> tuple[dict, Any]:
    """``data_options`` for a verb that trains on a task (finetune, distill, prune, compress): data held in memory
    or a data file is the task ``custom`` unless ``task=`` names it (not the default task)."""
    opts, source = data_options(data)
    if (source is not None or "train_file" in opts) and "task" not in options:
        opts["task"] = "custom"
    return opts, source


def _is_path_list(data: Any) -> bool:
    """A list naming files or folders (not texts): every item a Path, or a string naming one that exists."""
    items = list(data)
    paths = [isinstance(x, os.PathLike) or (isinstance(x, str) and Path(x).expanduser().exists()) for x in items]
    if any(paths) and not all(paths):
        raise PtmlabError("data mixes files with other strings: pass a list of texts, or a list of existing text "
                          "files and folders (files=[...])")
    return bool(items) and all(paths)


def _texts(table, text_col: str) -> list[str]:
    if text_col not in table.columns:
        raise PtmlabError(f"{table.where} has no text column '{text_col}' (it has {', '.join(table.columns)}): "
                          f"pass text_col=")
    texts = []
    for i, row in enumerate(table.rows):
        value = row.get(text_col)
        if value is not None and not isinstance(value, str):
            raise PtmlabError(f"{table.where} row {i + table.first_line}: '{text_col}' holds a "
                              f"{type(value).__name__}, not text")
        if value and value.strip():
            texts.append(value)
    return texts


@contextlib.contextmanager
def text_options(data: Any, text_col: str = "text", train_split: str = "train", eval_split: str | None = None):
    """Yields (options, label): the ``files`` (and ``valid_files``) options of pre-training for ``data``, and how
    the run's record names data held in memory (None for files): a text file or folder, or
    a list of them, as given; raw text in memory (a list of strings, one document each; a Dataset, DataFrame or
    list of dicts, one document per row of ``text_col``; a DatasetDict, a save_to_disk directory or
    ``hf:NAME[:CONFIG]``, whose evaluation split becomes the held-out text) is read through the data layer and
    written, one JSON line per document, to a temporary folder for the corpus reader."""
    from ptmlab.data.sources import source_tables

    if data is None:
        yield {}, None
        return
    if isinstance(data, str | os.PathLike):
        text = str(data)
        saved = Path(text).expanduser()
        if not (text.startswith("hf:") or (saved / "dataset_dict.json").is_file()
                or (saved / "dataset_info.json").is_file()):
            yield {"files": [text]}, None
            return
    elif isinstance(data, list | tuple) and _is_path_list(data):
        yield {"files": [str(x) for x in data]}, None
        return
    if isinstance(data, list | tuple) and all(isinstance(x, str) for x in data):
        splits = {"train": [t for t in data if t.strip()]}
    else:
        splits = {name: _texts(table, text_col) for name, table in
                  source_tables(data, train_split, eval_split).items() if name in ("train", "dev")}
    if not splits.get("train"):
        raise PtmlabError("the data holds no training text: pass non-empty texts")
    tmp = Path(tempfile.mkdtemp(prefix="ptmlab-text-"))
    try:
        opts = {}
        for name, texts in splits.items():
            path = tmp / f"{name}.jsonl"
            path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts),
                            encoding="utf-8")
            opts["files" if name == "train" else "valid_files"] = [str(path)]
        yield opts, f"<{type(data).__name__}>" if not isinstance(data, str | os.PathLike) else str(data)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
