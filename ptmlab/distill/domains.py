"""Multi-domain data for Meta-KD: one labelled file per domain, split deterministically, pooled with domain ids.

Domains are names under ``../shared/data/domains`` (``books``, ``dvd``, ``electronics``, ``imdb``, ``airline``:
``text<TAB>label``) or any local file given as ``NAME=FILE`` (csv, tsv or jsonl). Every file is split the same way
whatever the training seed (a fixed seeded shuffle, 80% train / 10% dev / 10% test), so teachers, students and
baselines of every seed see the same test sentences. All domains must share one label set; a file without the named
columns, an empty file, or a file whose labels differ from the others is a one-line error naming the file.

Cross-validation (``folds`` K > 1): the same fixed shuffle cut into K folds; fold k is the test split and the dev
split comes from the other rows, so nothing chosen on dev has seen a tested row. Studies run seed i on fold i mod K
(``seed_folds``), so that K seeds test every row of every domain once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.data.loaders import Split, TaskData, read_rows
from ptmlab.data.tasks import TaskSpec

SPLIT_SEED = 20210
SHARES = (0.8, 0.1, 0.1)
SPLITS = ("train", "dev", "test")
DEFAULT_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "domains"


FOLDS_HELP = ("test on fold i mod K of each domain's rows for the i-th seed (0: the fixed tenth kept for testing); K "
              "seeds with --folds K test every row once")


def check_folds(folds: int) -> None:
    """``--folds``: 0 (the fixed test part) or K >= 2."""
    if folds < 0 or folds == 1:
        raise PtmlabError(f"--folds {folds}: give 0 (the fixed test part) or 2 or more")


def seed_folds(seeds: list[int], folds: int) -> dict[int, int | None]:
    """The fold each seed is tested on: the i-th seed on fold i mod K (None without folds: the fixed test part)."""
    check_folds(folds)
    return {seed: (i % folds if folds > 1 else None) for i, seed in enumerate(seeds)}


def split_dir(out: Path, fold: int | None) -> Path:
    """Where a study writes its domains' split files: OUTPUT/data, or OUTPUT/data-foldK for fold K."""
    return out / ("data" if fold is None else f"data-fold{fold}")


def default_domain_dir() -> Path:
    """../shared/data/domains from the working directory, else next to the repository."""
    here = Path.cwd().parent / "shared" / "data" / "domains"
    return here if here.is_dir() else DEFAULT_DIR


@dataclass
class Domain:
    name: str
    path: Path
    splits: dict[str, Split] = field(default_factory=dict)


@dataclass
class DomainData:
    """Domains with their splits and the shared label names (sorted label strings, as ``--train-file`` tasks)."""

    domains: list[Domain]
    labels: list[str]

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.domains]

    def get(self, name: str) -> Domain:
        for d in self.domains:
            if d.name == name:
                return d
        raise PtmlabError(f"domain '{name}' is not among the loaded domains ({', '.join(self.names)})")

    def pooled(self, names: list[str] | None = None, task: str = "domains") -> tuple[TaskData, dict[str, list[int]]]:
        """One task whose splits concatenate the named domains (all by default), and each split's domain ids
        (indices into ``self.domains``)."""
        names = names or self.names
        spec = TaskSpec(task, "classification", tuple(self.labels), ("accuracy", "macro_f1"), text_col="text",
                        label_col="label", id_col=None, extra={"label_names": list(self.labels)})
        splits, dom_ids = {}, {}
        for s in SPLITS:
            text, label, ids, dom = [], [], [], []
            for name in names:
                k = self.names.index(name)
                part = self.get(name).splits[s]
                text += part.text
                label += part.label
                ids += [f"{name}:{i}" for i in part.ids]
                dom += [k] * len(part)
            splits[s] = Split(text, None, label, ids)
            dom_ids[s] = dom
        return TaskData(spec, splits), dom_ids


def resolve_domains(names: list[str], files: list[str], data_dir: str | None = None) -> list[tuple[str, Path]]:
    """(name, file) for ``--domains a,b`` (files under the domain directory) and ``--domain NAME=FILE``."""
    base = Path(data_dir).expanduser() if data_dir else default_domain_dir()
    out: list[tuple[str, Path]] = []
    for n in names:
        path = base / f"{n}.tsv"
        if not path.is_file():
            raise PtmlabError(f"domain '{n}' has no file '{path}': pass --domain {n}=FILE or set --domain-dir")
        out.append((n, path))
    for item in files:
        name, eq, f = item.partition("=")
        if not eq or not name.strip() or not f.strip():
            raise PtmlabError(f"--domain '{item}' is not NAME=FILE (e.g. --domain kitchen=reviews.tsv)")
        out.append((name.strip(), Path(f.strip()).expanduser()))
    seen = [n for n, _ in out]
    dup = sorted({n for n in seen if seen.count(n) > 1})
    if dup:
        raise PtmlabError(f"domain '{dup[0]}' is given twice: give each domain once")
    if not out:
        raise PtmlabError("no domains: pass --domains books,dvd,... and/or --domain NAME=FILE")
    return out


def load_domains(named: list[tuple[str, Path]], text_col: str = "text", label_col: str = "label",
                 max_per_domain: int | None = None, fold: int | None = None, folds: int = 0) -> DomainData:
    """Read, check and split every domain file. ``max_per_domain`` caps each domain's training split. With
    ``folds`` K > 1, the test split is fold ``fold`` of K (of the same fixed shuffle: over K folds every row is
    tested once), the dev split the first 10% of the other rows, the training split the rest."""
    if folds > 1 and (fold is None or not 0 <= fold < folds):
        raise PtmlabError(f"fold {fold} is not one of the {folds} folds (0..{folds - 1})")
    raw: list[tuple[str, Path, list[str], list[str]]] = []
    for name, path in named:
        if not path.is_file():
            raise PtmlabError(f"domain file '{path}' ({name}) does not exist: check the path")
        cols, rows = read_rows(path)
        missing = [c for c in (text_col, label_col) if c not in cols]
        if missing:
            raise PtmlabError(f"domain file '{path}' has no column '{missing[0]}' (columns: {', '.join(cols)}): "
                              f"set --text-col/--label-col")
        if len(rows) < 10:
            raise PtmlabError(f"domain file '{path}' has {len(rows)} rows: a domain needs at least 10 to split")
        texts = [str(r.get(text_col) or "").strip() for r in rows]
        labels = [str(r.get(label_col) or "").strip() for r in rows]
        for i, (t, y) in enumerate(zip(texts, labels, strict=True)):
            if not t or not y:
                raise PtmlabError(f"{path}:{i + 2}: empty {'text' if not t else 'label'}: fix or remove the row")
        raw.append((name, path, texts, labels))
    label_sets = [sorted(set(lab)) for _, _, _, lab in raw]
    if len(label_sets[0]) < 2:
        raise PtmlabError(f"domain file '{raw[0][1]}' has a single label {label_sets[0]}: a domain needs two or more")
    for (_, path, _, _), labs in zip(raw[1:], label_sets[1:], strict=True):
        if labs != label_sets[0]:
            raise PtmlabError(f"domain file '{path}' has labels {labs} but '{raw[0][1]}' has {label_sets[0]}: "
                              f"every domain needs the same label set")
    names = label_sets[0]
    ids = {v: i for i, v in enumerate(names)}
    domains = []
    for name, path, texts, labels in raw:
        order = list(range(len(texts)))
        random.Random(SPLIT_SEED).shuffle(order)
        n_train, n_dev = int(SHARES[0] * len(order)), int(SHARES[1] * len(order))
        parts = {"train": order[:n_train], "dev": order[n_train:n_train + n_dev], "test": order[n_train + n_dev:]}
        if folds > 1:
            lo, hi = round(len(order) * fold / folds), round(len(order) * (fold + 1) / folds)
            rest = order[:lo] + order[hi:]
            parts = {"train": rest[n_dev:], "dev": rest[:n_dev], "test": order[lo:hi]}
        if max_per_domain:
            parts["train"] = parts["train"][:max_per_domain]
        splits = {s: Split([texts[i] for i in idx], None, [ids[labels[i]] for i in idx], list(idx))
                  for s, idx in parts.items()}
        domains.append(Domain(name, path, splits))
    return DomainData(domains, names)


def write_split_files(data: DomainData, out_dir: Path) -> dict[str, dict[str, Path]]:
    """Each domain's splits as ``text<TAB>label`` files (for commands that read --train-file/--dev-file)."""
    from ptmlab.core.io import atomic_write_text

    out: dict[str, dict[str, Path]] = {}
    for d in data.domains:
        out[d.name] = {}
        for s, split in d.splits.items():
            path = out_dir / f"{d.name}.{s}.tsv"
            lines = ["text\tlabel"] + [f"{_clean(t)}\t{data.labels[y]}" for t, y in zip(split.text, split.label,
                                                                                        strict=True)]
            atomic_write_text(path, "\n".join(lines) + "\n")
            out[d.name][s] = path
    return out


def _clean(text: str) -> str:
    return " ".join(text.replace("\t", " ").split())
