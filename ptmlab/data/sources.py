"""Whatever a user hands ptmlab as data, read into one shape: a ``Table`` (column names, rows as dicts) per split.

Sources: files (``READERS``, one reader per suffix: csv, tsv, jsonl/json, parquet, arrow; add a format with
``@READERS.register(".ext")``), a directory written by ``Dataset.save_to_disk``, a hub dataset (``hf:NAME[:CONFIG]``;
a cached one loads offline), and objects in memory: a ``datasets.Dataset`` / ``DatasetDict``, a pandas
``DataFrame``, a list of dicts, or a dict of split name -> any of these. ``datasets`` is the backbone for everything
except csv/tsv/jsonl (whose readers name the bad line of a file). Labels of a ``ClassLabel`` column arrive as their
class names, with the names in id order in ``Table.class_names``.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry

# split names a source may use for the evaluation split, in the order they are looked for
EVAL_SPLIT_NAMES = ("validation", "dev", "valid", "val", "eval")


@dataclass
class Table:
    where: str  # a file path or a description ("DataFrame", "hf:glue:sst2[train]"), for error messages
    columns: list[str]
    rows: list[dict]
    first_line: int = 0  # the line (files) or row number of rows[0] in error messages
    class_names: dict[str, list[str]] = field(default_factory=dict)  # ClassLabel columns: names in id order

    def __len__(self) -> int:
        return len(self.rows)


Reader = Callable[[Path, bool], Table]
READERS: Registry[Reader] = Registry("data file format")


# ----------------------------------------------------------------------------------------------------- files
def _must_exist(path: Path) -> None:
    if not path.is_file():
        raise PtmlabError(f"data file '{path}' does not exist: check the path")


def read_table(path: Path, header: bool = True) -> tuple[list[str] | None, list[list[str]]]:
    """Read a TSV/CSV file. GLUE TSVs have quote characters inside sentences, so quoting is off for .tsv."""
    path = Path(path)
    _must_exist(path)
    csv.field_size_limit(sys.maxsize)
    suffix = path.suffix.lower()
    with open(path, encoding="utf-8-sig", newline="") as f:
        if suffix == ".tsv":
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        else:
            reader = csv.reader(f)
        try:
            rows = [r for r in reader if r]
        except (csv.Error, UnicodeDecodeError) as e:
            raise PtmlabError(f"cannot read '{path}' as {suffix[1:] or 'csv'}: {e}") from None
    if not rows:
        raise PtmlabError(f"data file '{path}' is empty")
    if header:
        return [c.strip() for c in rows[0]], rows[1:]
    return None, rows


@READERS.register(".csv", help="comma-separated values with a header row")
@READERS.register(".tsv", help="tab-separated values (no quoting, as GLUE writes them)")
@READERS.register(".txt", help="comma-separated values")
def _read_delimited(path: Path, header: bool = True) -> Table:
    head, body = read_table(path, header=header)
    if head is None:
        width = max(len(r) for r in body)
        head = [str(i) for i in range(width)]
    return Table(str(path), head, [dict(zip(head, r, strict=False)) for r in body], 2 if header else 1)


@READERS.register(".jsonl", help="one JSON object per line")
@READERS.register(".json", help="one JSON object per line")
def _read_jsonl(path: Path, header: bool = True) -> Table:
    _must_exist(path)
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    row = None
                if not isinstance(row, dict):
                    raise PtmlabError(f"{path}:{n}: not a JSON object per line")
                rows.append(row)
    if not rows:
        raise PtmlabError(f"data file '{path}' is empty")
    return Table(str(path), list(rows[0].keys()), rows, 1)


@READERS.register(".parquet", help="Apache Parquet (read with datasets)")
def _read_parquet(path: Path, header: bool = True) -> Table:
    return _read_with_datasets(path, "parquet")


@READERS.register(".arrow", help="an Arrow file written by datasets (Dataset.save_to_disk's data files)")
def _read_arrow(path: Path, header: bool = True) -> Table:
    _must_exist(path)
    import datasets

    try:
        ds = datasets.Dataset.from_file(str(path))
    except Exception as e:  # not an Arrow stream/file
        raise PtmlabError(f"cannot read '{path}' as an Arrow file: {_short(e)}") from None
    return dataset_table(ds, str(path))


def _read_with_datasets(path: Path, builder: str) -> Table:
    _must_exist(path)
    import datasets

    try:
        ds = datasets.load_dataset(builder, data_files=str(path), split="train")
    except Exception as e:
        raise PtmlabError(f"cannot read '{path}' as {builder}: {_short(e)}") from None
    return dataset_table(ds, str(path))


def read_file(path: str | Path, header: bool = True) -> Table:
    """A data file through the reader registered for its suffix."""
    path = Path(path).expanduser()
    suffix = path.suffix.lower()
    if suffix not in READERS:
        raise PtmlabError(f"unsupported data file '{path}': use {', '.join(READERS.names())}")
    table = READERS.get(suffix)(path, header)
    if not table.rows:
        raise PtmlabError(f"data file '{path}' is empty")
    return table


def read_rows(path: Path, header: bool = True) -> tuple[list[str], list[dict]]:
    """Column names and rows of a data file (positions as strings for a headerless csv/tsv)."""
    table = read_file(path, header)
    return table.columns, table.rows


# ------------------------------------------------------------------------------------------- in-memory objects
def dataset_table(ds, where: str) -> Table:
    """A ``datasets.Dataset`` as a Table; ClassLabel values become their names."""
    features = ds.features
    class_names = {c: list(f.names) for c, f in features.items() if hasattr(f, "names")}
    rows = ds.to_list()
    for c, names in class_names.items():
        for r in rows:
            v = r.get(c)
            r[c] = names[v] if isinstance(v, int) and 0 <= v < len(names) else None
    return Table(where, list(features), rows, 0, class_names)


def _frame_table(df, where: str) -> Table:
    cols = [str(c) for c in df.columns]
    rows = [{str(k): _plain(v) for k, v in r.items()} for r in df.to_dict("records")]
    class_names = {}
    for c in df.columns:
        if str(df[c].dtype) == "category":
            class_names[str(c)] = [str(x) for x in df[c].cat.categories]
    return Table(where, cols, rows, 0, class_names)


def _plain(v):
    """numpy scalars as Python values; NaN as None (a missing value in a frame)."""
    if hasattr(v, "item") and not isinstance(v, list | dict | str):
        try:
            v = v.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(v, float) and v != v:
        return None
    return v


def _records_table(rows: list, where: str) -> Table:
    if not rows:
        raise PtmlabError(f"{where} is empty: pass at least one example")
    if not all(isinstance(r, dict) for r in rows):
        raise PtmlabError(f"{where} must be a list of dicts (one per example, e.g. {{'text': ..., 'label': ...}})")
    cols = list(dict.fromkeys(k for r in rows[:1000] for k in r))
    return Table(where, [str(c) for c in cols], [dict(r) for r in rows], 0)


def _kind(obj: Any) -> str:
    mod = type(obj).__module__.split(".")[0]
    name = type(obj).__name__
    if mod == "datasets" and name in ("Dataset", "DatasetDict", "IterableDataset", "IterableDatasetDict"):
        return name
    if mod == "pandas" and name == "DataFrame":
        return "DataFrame"
    if isinstance(obj, str | os.PathLike):
        return "path"
    if isinstance(obj, list):
        return "records"
    if isinstance(obj, dict):
        return "splits"
    return name


def table_of(obj: Any, where: str | None = None) -> Table:
    """One split's Table from a Dataset, DataFrame, list of dicts or data file path."""
    kind = _kind(obj)
    if kind == "Dataset":
        return dataset_table(obj, where or "Dataset")
    if kind == "DataFrame":
        return _frame_table(obj, where or "DataFrame")
    if kind == "records":
        return _records_table(obj, where or "list of examples")
    if kind == "path":
        return read_file(obj)
    if kind in ("IterableDataset", "IterableDatasetDict"):
        raise PtmlabError(f"a streaming {kind} cannot be trained on here: load it without streaming=True")
    raise PtmlabError(f"cannot read data from a {type(obj).__name__}: pass a datasets.Dataset or DatasetDict, a "
                      f"pandas DataFrame, a list of dicts, a data file or hf:NAME")


def source_tables(source: Any, train_split: str = "train", eval_split: str | None = None) -> dict[str, Table]:
    """ptmlab's splits ("train", "dev", "test") of a data source.

    A single Dataset, DataFrame, list or file is the training split (dev is carved from it later). A DatasetDict,
    a dict of splits, a ``save_to_disk`` directory or ``hf:NAME[:CONFIG]`` name their splits: ``train_split`` is
    trained on, ``eval_split`` (default: the first of validation/dev/valid/val/eval) becomes dev, and a split named
    test stays the test split."""
    kind = _kind(source)
    if kind == "path" and str(source).startswith("hf:"):
        return _split_tables(hub_dataset(str(source)), train_split, eval_split, str(source))
    if kind == "path" and Path(source).expanduser().is_dir():
        return _split_tables(_load_from_disk(Path(source).expanduser()), train_split, eval_split, str(source))
    if kind in ("DatasetDict", "splits"):
        return _split_tables(dict(source), train_split, eval_split, kind)
    return {"train": table_of(source)}


def _split_tables(splits: dict, train_split: str, eval_split: str | None, where: str) -> dict[str, Table]:
    names = list(splits)
    if eval_split is not None and eval_split not in splits:
        raise PtmlabError(f"{where} has no split '{eval_split}' (--eval-split): it has {', '.join(names)}")
    if train_split not in splits and not (eval_split or _default_eval(names)):
        raise PtmlabError(f"{where} has no split '{train_split}' (--train-split): it has {', '.join(names)}")
    out = {}
    if train_split in splits:
        out["train"] = table_of(splits[train_split], f"{where}[{train_split}]")
    ev = eval_split or _default_eval([n for n in names if n != train_split])
    if ev is not None:
        out["dev"] = table_of(splits[ev], f"{where}[{ev}]")
    if "test" in splits and "test" not in (train_split, ev):
        out["test"] = table_of(splits["test"], f"{where}[test]")
    return out


def _default_eval(names: list[str]) -> str | None:
    return next((n for n in EVAL_SPLIT_NAMES if n in names), None)


def _load_from_disk(path: Path):
    if not ((path / "dataset_dict.json").is_file() or (path / "dataset_info.json").is_file()):
        raise PtmlabError(f"'{path}' is a directory but not one written by Dataset.save_to_disk: pass a data file")
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as e:
        raise PtmlabError(f"cannot load the dataset saved in '{path}': {_short(e)}") from None
    return ds if _kind(ds) == "DatasetDict" else {"train": ds}


def hub_dataset(name: str):
    """``hf:NAME[:CONFIG]`` through ``datasets.load_dataset``; offline (HF_DATASETS_OFFLINE=1) a cached copy loads
    and a missing one is a one-line error naming the dataset."""
    import datasets

    parts = name.split(":")[1:]
    if not parts or not parts[0]:
        raise PtmlabError(f"'{name}' names no dataset: write hf:NAME or hf:NAME:CONFIG (e.g. hf:glue:sst2)")
    offline = os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1"
    try:
        return datasets.load_dataset(*parts)
    except Exception as e:  # network, cache or name problems
        if offline:
            raise PtmlabError(f"hub dataset '{':'.join(parts)}' is not in the local datasets cache and the hub is "
                              f"offline (HF_DATASETS_OFFLINE=1): load it once online (HF_DATASETS_OFFLINE=0) or "
                              f"pass --train-file") from None
        raise PtmlabError(f"cannot load hub dataset '{name}': {_short(e)}") from None


def _short(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:300]
