"""Streaming input for ``ptmlab clean``: ``.jsonl`` (a ``text`` field, optional ``id``), ``.txt`` (one document per
file, or blank-line separated with ``--doc-sep blank``), folders of those, each optionally gzipped.

Documents are yielded one at a time, so memory does not grow with the corpus. A file that is not valid UTF-8 stops
the run with an error naming the file and the line (nothing is written): silently skipping or repairing it would
change the corpus without the user knowing.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.errors import PtmlabError

SUFFIXES = (".jsonl", ".txt", ".jsonl.gz", ".txt.gz")


@dataclass(frozen=True)
class RawDoc:
    id: str
    text: str


def input_files(inputs: list[str]) -> list[Path]:
    """Expand files and folders (recursively, sorted) into the files to read; unknown inputs are errors."""
    if not inputs:
        raise PtmlabError("no input given: pass one or more .jsonl/.txt files or folders (optionally .gz)")
    files: list[Path] = []
    for name in inputs:
        p = Path(name)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(SUFFIXES))
            if not found:
                raise PtmlabError(f"folder '{p}' holds no {', '.join(SUFFIXES)} files: point at a folder of documents")
            files.extend(found)
        elif p.is_file():
            if not p.name.endswith(SUFFIXES):
                raise PtmlabError(f"input '{p}' is not one of {', '.join(SUFFIXES)}: convert it or rename it")
            files.append(p)
        else:
            raise PtmlabError(f"input '{p}' does not exist: pass existing files or folders")
    return files


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, decoded line) of a possibly gzipped file; a non-UTF-8 line is a one-line error."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for no, raw in enumerate(f, start=1):
                try:
                    yield no, raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise PtmlabError(f"'{path}' is not UTF-8 (line {no}, byte {e.start}): convert it, e.g. "
                                      f"iconv -f latin1 -t utf-8, or leave it out") from None
    except (OSError, EOFError) as e:
        if isinstance(e, gzip.BadGzipFile) or isinstance(e, EOFError):
            raise PtmlabError(f"'{path}' is not a readable gzip file ({e}): recompress it or leave it out") from None
        raise PtmlabError(f"cannot read '{path}': {e.strerror or e}") from None


def _jsonl(path: Path, text_field: str, id_field: str) -> Iterator[RawDoc]:
    stem = path.name
    for no, line in _lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise PtmlabError(f"'{path}' line {no} is not JSON: each line must be one JSON object") from None
        if not isinstance(row, dict) or not isinstance(row.get(text_field), str):
            raise PtmlabError(f"'{path}' line {no} has no string '{text_field}' field: add it or pass "
                              f"--text-col NAME")
        doc_id = row.get(id_field)
        yield RawDoc(str(doc_id) if doc_id is not None else f"{stem}:{no}", row[text_field])


def _txt(path: Path, doc_sep: str) -> Iterator[RawDoc]:
    if doc_sep == "file":
        text = "".join(line for _, line in _lines(path))
        if text.strip():
            yield RawDoc(str(path), text.rstrip("\n"))
        return
    buf: list[str] = []
    n = 0
    for _, line in _lines(path):
        if line.strip():
            buf.append(line.rstrip("\n"))
        elif buf:
            n += 1
            yield RawDoc(f"{path.name}:{n}", "\n".join(buf))
            buf = []
    if buf:
        yield RawDoc(f"{path.name}:{n + 1}", "\n".join(buf))


def read_documents(files: list[Path], doc_sep: str = "file", text_field: str = "text",
                   id_field: str = "id") -> Iterator[RawDoc]:
    """Every document of every file, in order."""
    for path in files:
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            yield from _jsonl(path, text_field, id_field)
        else:
            yield from _txt(path, doc_sep)
