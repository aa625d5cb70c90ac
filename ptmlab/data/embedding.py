"""Data of the embedding task kind (``--task-kind embedding``): texts whose vectors are trained to be close.

Four layouts, recognised by their column names (or named with ``--text-col`` / ``--text-pair-col`` /
``--label-col``):

- pairs: ``anchor``, ``positive``: each anchor's positive is its match; every other positive in the batch is a
  negative (in-batch negatives);
- triplets: ``anchor``, ``positive``, ``negative``: a hard negative per anchor, added to the in-batch ones;
- scored pairs: ``sentence1``, ``sentence2``, ``score``: a similarity score within ``--score-range LOW,HIGH``
  (STS-B: 0..5), mapped linearly to a cosine target in [0, 1];
- retrieval (dev data): ``query``, ``positive``: each query's relevant document; the corpus is every positive plus
  the texts of an optional corpus file (``--corpus-file``, one ``text`` column).

A dev split with scores is scored by Spearman (cosine vs gold); any other by retrieval (recall@1/5/10, MRR): the
anchors (queries) against the corpus of all positives (and negatives). The built-in ``stsb`` task reads as scored
pairs (0..5). Every check happens before anything is written: an empty side names its row, a score outside the range
names its row and the range, missing columns are named with the layouts that were expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.data.loaders import TaskData, record_origin
from ptmlab.data.sources import Table, read_file, source_tables
from ptmlab.data.tasks import EMBEDDING, TASKS, TaskSpec

PAIRS, TRIPLETS, SCORED, RETRIEVAL = "pairs", "triplets", "scored", "retrieval"
LAYOUTS = {  # layout -> (anchor, positive, negative, score) column names
    TRIPLETS: ("anchor", "positive", "negative", None),
    PAIRS: ("anchor", "positive", None, None),
    RETRIEVAL: ("query", "positive", None, None),
    SCORED: ("sentence1", "sentence2", None, "score"),
}
EXPECTED = ("anchor, positive (pairs); anchor, positive, negative (triplets); sentence1, sentence2, score (scored "
            "pairs); query, positive (retrieval)")
RETRIEVAL_METRICS = ("mrr", "recall@1", "recall@5", "recall@10")
STS_METRICS = ("spearman", "pearson")


@dataclass
class EmbeddingSplit:
    """One split: anchors with their positives (pairs, retrieval), hard negatives (triplets) or scores (scored
    pairs, already mapped to [0, 1]); ``corpus``: extra retrieval documents (dev)."""

    layout: str
    anchor: list[str]
    positive: list[str]
    negative: list[str] | None = None
    score: list[float] | None = None
    corpus: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.anchor)

    @property
    def text(self) -> list[str]:  # what generic code reads as a split's texts
        return self.anchor

    def select(self, idx: list[int]) -> EmbeddingSplit:
        pick = (lambda xs: [xs[i] for i in idx] if xs is not None else None)  # noqa: E731
        return EmbeddingSplit(self.layout, pick(self.anchor), pick(self.positive), pick(self.negative),
                              pick(self.score), list(self.corpus))

    @property
    def scored(self) -> bool:
        return self.score is not None


def _layout(columns: list[str], where: str, text_col: str | None, pair_col: str | None, label_col: str | None
            ) -> tuple[str, tuple[str, str, str | None, str | None]]:
    """The layout of a table and its columns; a one-line error naming what is missing and what was expected."""
    cols = set(columns)
    if pair_col:  # columns named by the user: a score when --label-col is one of them
        missing = [c for c in (text_col, pair_col) if c not in cols]
        if missing:
            raise PtmlabError(f"{where}: missing column(s) {', '.join(missing)} (--text-col / --text-pair-col); its "
                              f"columns are {', '.join(columns)}")
        if label_col and label_col in cols:
            return SCORED, (text_col, pair_col, None, label_col)
        return PAIRS, (text_col, pair_col, None, None)
    for layout, names in LAYOUTS.items():
        if all(c in cols for c in names if c):
            return layout, names
    # the layout the columns start to describe: name what it lacks
    for layout, names in (x for x in LAYOUTS.items() if x[0] != TRIPLETS):
        if names[0] in cols or (layout == SCORED and names[1] in cols):
            missing = [c for c in names if c and c not in cols]
            raise PtmlabError(f"{where}: missing column(s) {', '.join(missing)} for {layout} data; its columns are "
                              f"{', '.join(columns)}; expected {EXPECTED}")
    raise PtmlabError(f"{where}: no embedding columns among {', '.join(columns)}: expected {EXPECTED} (or name "
                      f"them with --text-col and --text-pair-col)")


def _text(row: dict, col: str, where: str, line: int, query: bool = False) -> str:
    v = row.get(col)
    if v is None or not isinstance(v, str | int | float) or not str(v).strip():
        if query:
            raise PtmlabError(f"{where}:{line}: the query has no relevant document (empty '{col}'): give every "
                              f"query its relevant document or remove the row")
        raise PtmlabError(f"{where}:{line}: empty '{col}' text: every pair needs both sides; remove or fill the row")
    return str(v)


def table_split(table: Table, text_col: str | None = None, pair_col: str | None = None,
                label_col: str | None = None, score_range: tuple[float, float] = (0.0, 1.0)) -> EmbeddingSplit:
    """An ``EmbeddingSplit`` from a table, every row checked."""
    layout, (a, p, n, s) = _layout(table.columns, table.where, text_col, pair_col, label_col)
    lo, hi = score_range
    first = table.first_line or 2
    out = EmbeddingSplit(layout, [], [], [] if n else None, [] if s else None)
    for k, row in enumerate(table.rows):
        line = k + first
        out.anchor.append(_text(row, a, table.where, line))
        out.positive.append(_text(row, p, table.where, line, query=layout == RETRIEVAL))
        if n:
            out.negative.append(_text(row, n, table.where, line))
        if s:
            raw = row.get(s)
            try:
                value = float(raw)
            except (TypeError, ValueError):
                raise PtmlabError(f"{table.where}:{line}: score {str(raw)[:40]!r} in '{s}' is not a number") from None
            if not lo <= value <= hi:
                raise PtmlabError(f"{table.where}:{line}: score {value:g} in '{s}' is outside the stated range "
                                  f"[{lo:g}, {hi:g}]: fix the row or set --score-range LOW,HIGH")
            out.score.append((value - lo) / (hi - lo))
    return out


def corpus_texts(path: str) -> list[str]:
    """The documents of a corpus file: its ``text`` column (or its only column)."""
    table = read_file(path)
    col = "text" if "text" in table.columns else table.columns[0] if len(table.columns) == 1 else None
    if col is None:
        raise PtmlabError(f"{table.where}: missing column 'text' for corpus documents; its columns are "
                          f"{', '.join(table.columns)}")
    return [_text(r, col, table.where, k + (table.first_line or 2)) for k, r in enumerate(table.rows)]


def check_retrieval(split: EmbeddingSplit, where: str) -> None:
    """A retrieval split has queries, each with its relevant document (a query without one was refused, naming its
    row, when the split was read): the corpus is every positive plus the corpus file's documents."""
    if not len(split):
        raise PtmlabError(f"{where}: no queries to evaluate retrieval on")


def parse_score_range(text: str) -> tuple[float, float]:
    """``--score-range LOW,HIGH`` as two finite numbers, LOW below HIGH."""
    import math

    parts = str(text).split(",")
    try:
        lo, hi = (float(x) for x in parts) if len(parts) == 2 else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise PtmlabError(f"--score-range '{text}' must be LOW,HIGH with LOW below HIGH, e.g. 0,5")
    return lo, hi


def embedding_spec(name: str, dev: EmbeddingSplit | None) -> TaskSpec:
    metrics = STS_METRICS if dev is not None and dev.scored else RETRIEVAL_METRICS
    return TaskSpec(name, EMBEDDING, (), metrics, text_col="anchor", pair_col="positive", id_col=None,
                    description="sentence embeddings (pairs, triplets or scored pairs)")


def load_embedding_task(cfg, source=None) -> TaskData:
    """The embedding data ``cfg`` names (files, a data object, or the built-in ``stsb``)."""
    score_range = parse_score_range(getattr(cfg, "score_range", "0,1"))
    given = {k: getattr(cfg, k, None) for k in ("text_col", "text_pair_col", "label_col")}
    cols = (given["text_col"], given["text_pair_col"], given["label_col"]) if given["text_pair_col"] else \
        (None, None, None)
    files = {"train": cfg.train_file, "dev": cfg.dev_file, "test": cfg.test_file}
    task = cfg.task
    if source is None and not any(files.values()) and task in TASKS:
        return _builtin(task, cfg)
    if source is not None:
        tables = source_tables(source, getattr(cfg, "train_split", "train"), getattr(cfg, "eval_split", None))
        origin = f"{type(source).__name__}"
    elif any(files.values()):
        tables = {k: read_file(v) for k, v in files.items() if v}
        origin = str(files.get("train") or files.get("dev"))
    elif Path(str(task)).expanduser().exists() or str(task).startswith("hf:"):
        tables = source_tables(task, getattr(cfg, "train_split", "train"), getattr(cfg, "eval_split", None))
        origin = str(task)
    else:
        raise PtmlabError(f"task '{task}' is not embedding data: pass --train-file (and --dev-file) with {EXPECTED}, "
                          f"or --task stsb")
    splits = {k: table_split(t, *cols, score_range=score_range) for k, t in tables.items()}
    corpus = getattr(cfg, "corpus_file", None)
    if corpus and "dev" in splits:
        splits["dev"].corpus = corpus_texts(corpus)
    name = task if task not in TASKS else "custom"
    data = TaskData(embedding_spec(name, splits.get("dev")), splits)
    if "dev" in splits and not splits["dev"].scored:
        check_retrieval(splits["dev"], str(files.get("dev") or "the dev data"))
    return record_origin(data, origin) if "train" in splits else data


def _builtin(task: str, cfg) -> TaskData:
    """A built-in pair regression task (STS-B) as scored pairs over its own score range."""
    from ptmlab.data.loaders import load_task

    spec = TASKS.get(task)
    if spec.kind != "regression" or not spec.is_pair:
        raise PtmlabError(f"task '{task}' is {spec.kind}, not scored sentence pairs: the embedding kind reads "
                          f"--task stsb or files with {EXPECTED}")
    data = load_task(task, getattr(cfg, "glue_dir", None))
    lo, hi = 0.0, 5.0  # STS-B's scale
    splits = {}
    for name, s in data.splits.items():
        if s.label is None or s.text_pair is None:
            continue  # an unlabelled test split scores nothing
        splits[name] = EmbeddingSplit(SCORED, list(s.text), list(s.text_pair), None,
                                      [(float(v) - lo) / (hi - lo) for v in s.label])
    out = TaskData(embedding_spec(task, splits.get("dev")), splits, data.origin)
    return out
