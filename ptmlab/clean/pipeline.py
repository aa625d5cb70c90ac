"""``ptmlab clean``: stream documents through the selected rules and write clean.jsonl, removed.jsonl, stats.json
and report.html.

Document rules and the ``prepare`` half of the corpus rules run in ``--workers`` processes on batches of documents;
the parent keeps at most two batches per worker in flight (bounded memory), takes results back in input order, runs
the corpus rules' ``decide`` half and writes each document as it is settled. The two JSONL outputs are written to
temporary files and renamed only when the whole input has been read, so a failed run leaves nothing half-written.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptmlab.clean.filters import lines_dropped
from ptmlab.clean.reader import input_files, read_documents
from ptmlab.clean.rules import Rule, build_rules, describe_params, parse_overrides, select_rules
from ptmlab.clean.text import count_lines
from ptmlab.core.config import Validated, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json
from ptmlab.core.progress import progress

OUTPUTS = ("clean.jsonl", "removed.jsonl", "stats.json", "report.html")
EXAMPLES_PER_RULE = 5


@dataclass(frozen=True)
class CleanConfig(Validated):
    inputs: list[str] = opt([], "input .jsonl/.txt files or folders (optionally .gz)", cli=False)
    output: str = opt("", "output folder for clean.jsonl, removed.jsonl, stats.json, report.html", cli=False)
    rules: list[str] = opt([], "rules to run (default: all, in pipeline order)")
    skip_rules: list[str] = opt([], "rules to leave out")
    set: list[str] = opt([], "rule parameters RULE.PARAM=VALUE (repeatable)", cli=False)
    params: dict = opt({}, "rule parameters from YAML: {rule: {param: value}}", cli=False)
    workers: int = opt(1, "worker processes for the per-document rules")
    doc_sep: str = opt("file", "documents in .txt files: one per file, or separated by blank lines",
                       choices=["file", "blank"])
    text_col: str = opt("text", "JSONL field holding the text", deprecated=("--text-field",))
    id_field: str = opt("id", "JSONL field holding the document id")
    batch_size: int = opt(64, "documents per worker batch")
    overwrite: bool = opt(False, "replace the outputs of an earlier run in the output folder")

    def validate(self) -> None:
        if self.workers < 1:
            raise PtmlabError(f"--workers {self.workers} must be at least 1")
        if self.batch_size < 1:
            raise PtmlabError(f"--batch-size {self.batch_size} must be at least 1")
        if not self.output:
            raise PtmlabError("no output folder: pass --output OUT")


def rule_params(cfg: CleanConfig) -> dict[str, dict[str, Any]]:
    """YAML ``params`` overridden by ``--set`` pairs."""
    merged: dict[str, dict[str, Any]] = {}
    if not isinstance(cfg.params, dict):
        raise PtmlabError("config 'params' must map rule names to {param: value} mappings")
    for rule, values in cfg.params.items():
        if not isinstance(values, dict):
            raise PtmlabError(f"config params.{rule} must be a mapping of param: value")
        merged[str(rule)] = dict(values)
    for rule, values in parse_overrides(cfg.set).items():
        merged.setdefault(rule, {}).update(values)
    return merged


# ---------------------------------------------------------------------------------------------- worker side
_RULES: list[Rule] = []


def _init_worker(names: list[str], params: dict) -> None:
    global _RULES
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _RULES = build_rules(names, params)


def _process_batch(batch: list[tuple[str, str]]) -> list[dict]:
    return [process_document(_RULES, doc_id, text) for doc_id, text in batch]


def process_document(rules: list[Rule], doc_id: str, text: str) -> dict:
    """Run the document rules, then the corpus rules' ``prepare``, on one document."""
    res: dict[str, Any] = {"id": doc_id, "chars_in": len(text), "lines_in": count_lines(text),
                           "bytes_in": len(text.encode("utf-8")), "changes": [], "prepared": {}, "removed": None}
    for rule in rules:
        if rule.kind != "document":
            continue
        out = rule.apply(text)
        if out.removed:
            res["removed"] = (rule.name, out.reason, count_lines(text), len(text), text[:400])
            return res
        if out.text != text or out.merged:
            res["changes"].append((rule.name, count_lines(text) - count_lines(out.text) - out.merged,
                                   len(text) - len(out.text), out.merged, lines_dropped(text, out.text)))
            text = out.text
    for rule in rules:
        if rule.kind == "corpus":
            res["prepared"][rule.name] = rule.prepare(text)
    res["text"] = text
    return res


# ---------------------------------------------------------------------------------------------- parent side
class Tally:
    """Per-rule and total counts, and a few removed examples per rule."""

    def __init__(self, names: list[str]):
        self.rules = {n: {"docs": 0, "lines": 0, "chars": 0, "lines_merged": 0, "reasons": {}} for n in names}
        self.examples: dict[str, list[str]] = {n: [] for n in names}
        self.totals = {"docs_in": 0, "docs_out": 0, "docs_removed": 0, "lines_in": 0, "lines_out": 0,
                       "chars_in": 0, "chars_out": 0, "bytes_in": 0}

    def change(self, rule: str, lines: int, chars: int, merged: int, dropped: list[str]) -> None:
        r = self.rules[rule]
        r["lines"] += lines
        r["chars"] += chars
        r["lines_merged"] += merged
        for line in dropped:
            if len(self.examples[rule]) < EXAMPLES_PER_RULE:
                self.examples[rule].append(line[:300])

    def remove(self, rule: str, reason: str, lines: int, chars: int, snippet: str) -> None:
        r = self.rules[rule]
        r["docs"] += 1
        r["lines"] += lines
        r["chars"] += chars
        r["reasons"][reason] = r["reasons"].get(reason, 0) + 1
        self.totals["docs_removed"] += 1
        if len(self.examples[rule]) < EXAMPLES_PER_RULE:
            self.examples[rule].append(f"[{reason}] {snippet[:300]}")


def _batches(docs, size: int):
    batch: list[tuple[str, str]] = []
    for d in docs:
        batch.append((d.id, d.text))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _settle(res: dict, corpus_rules: list[Rule], tally: Tally, clean_f, removed_f) -> None:
    t = tally.totals
    t["docs_in"] += 1
    t["chars_in"] += res["chars_in"]
    t["lines_in"] += res["lines_in"]
    t["bytes_in"] += res["bytes_in"]
    for change in res["changes"]:
        tally.change(*change)
    removed = res["removed"]
    if removed is None:
        text = res["text"]
        for rule in corpus_rules:
            out = rule.decide(text, res["prepared"][rule.name])
            if out.removed:
                removed = (rule.name, out.reason, count_lines(text), len(text), text[:400])
                break
            if out.text != text:
                tally.change(rule.name, count_lines(text) - count_lines(out.text), len(text) - len(out.text), 0,
                             lines_dropped(text, out.text))
                text = out.text
    if removed is not None:
        tally.remove(*removed)
        removed_f.write(json.dumps({"id": res["id"], "rule": removed[0], "reason": removed[1]}) + "\n")
        return
    t["docs_out"] += 1
    t["chars_out"] += len(text)
    t["lines_out"] += count_lines(text)
    clean_f.write(json.dumps({"id": res["id"], "text": text}, ensure_ascii=False) + "\n")


def _check_output(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise PtmlabError(f"output '{out}' is a file: pass a folder to --output")
    existing = [n for n in OUTPUTS if (out / n).exists()]
    if existing and not overwrite:
        raise PtmlabError(f"output folder '{out}' already holds {', '.join(existing)}: pass --overwrite or choose "
                          f"another --output")


def run_clean(cfg: CleanConfig) -> dict:
    """Clean ``cfg.inputs`` into ``cfg.output``; returns the stats written to stats.json."""
    names = select_rules(cfg.rules, cfg.skip_rules)
    params = rule_params(cfg)
    rules = build_rules(names, params)  # validates every parameter before anything is read or written
    files = input_files(cfg.inputs)
    out = Path(cfg.output)
    _check_output(out, cfg.overwrite)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    tmp = {n: out / f".{n}.{os.getpid()}.tmp" for n in ("clean.jsonl", "removed.jsonl")}
    corpus_rules = [r for r in rules if r.kind == "corpus"]
    tally = Tally(names)
    start = time.perf_counter()
    try:
        with open(tmp["clean.jsonl"], "w", encoding="utf-8") as clean_f, \
                open(tmp["removed.jsonl"], "w", encoding="utf-8") as removed_f:
            docs = read_documents(files, cfg.doc_sep, cfg.text_col, cfg.id_field)
            bar = progress(desc="clean", unit="doc")
            for results in _results(docs, names, params, rules, cfg):
                for res in results:
                    _settle(res, corpus_rules, tally, clean_f, removed_f)
                bar.update(len(results))
            bar.close()
            for f in (clean_f, removed_f):
                f.flush()
                os.fsync(f.fileno())
        if tally.totals["docs_in"] == 0:
            raise PtmlabError(f"no documents in {', '.join(map(str, cfg.inputs))}: the input is empty")
        seconds = time.perf_counter() - start
        stats = _stats(cfg, files, rules, tally, seconds)
        for name, path in tmp.items():
            os.replace(path, out / name)
        atomic_write_json(out / "stats.json", stats)
        from ptmlab.clean.report import write_report

        write_report(out / "report.html", stats, tally.examples)
        return stats
    except BaseException:
        for path in tmp.values():
            path.unlink(missing_ok=True)
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise


def _results(docs, names: list[str], params: dict, rules: list[Rule], cfg: CleanConfig):
    """Processed batches in input order: in this process for one worker, else from a pool with bounded look-ahead."""
    batches = _batches(docs, cfg.batch_size)
    if cfg.workers == 1:
        for batch in batches:
            yield [process_document(rules, i, t) for i, t in batch]
        return
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(cfg.workers, initializer=_init_worker, initargs=(names, params)) as pool:
        pending: deque = deque()
        for batch in batches:
            pending.append(pool.apply_async(_process_batch, (batch,)))
            if len(pending) >= 2 * cfg.workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def _stats(cfg: CleanConfig, files: list[Path], rules: list[Rule], tally: Tally, seconds: float) -> dict:
    t = tally.totals
    return {
        "inputs": [str(f) for f in files],
        "rules": [r.name for r in rules],
        "params": {r.name: describe_params(r) for r in rules},
        "totals": {**t, "docs_kept_fraction": t["docs_out"] / max(1, t["docs_in"]),
                   "chars_kept_fraction": t["chars_out"] / max(1, t["chars_in"])},
        "per_rule": tally.rules,
        "workers": cfg.workers,
        "seconds": seconds,
        "mb_per_s": t["bytes_in"] / 1e6 / max(seconds, 1e-9),
    }

