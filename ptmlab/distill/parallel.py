"""Parallel text: two line-aligned files (``.gz`` accepted), line i of one the translation of line i of the other.

Misaligned files (different line counts), empty files and empty lines inside a pair are the user's data errors:
each raises a one-line ``PtmlabError`` naming the file, before anything is written.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.errors import PtmlabError


@dataclass(frozen=True)
class Pairs:
    src_file: str
    tgt_file: str
    src: list[str]
    tgt: list[str]

    def __len__(self) -> int:
        return len(self.src)

    @property
    def name(self) -> str:
        return f"{Path(self.src_file).name}->{Path(self.tgt_file).name}"


def read_lines(path: str | Path) -> list[str]:
    """The lines of a text file (gzip when it ends in .gz), without line ends; errors name the file. A name
    ``newstest:LANG:PART[:SIDE]`` reads one side of the shared news test sets' split (``ptmlab.data.parallel``)."""
    if str(path).startswith("newstest:"):
        from ptmlab.data.parallel import newstest_side

        return newstest_side(str(path))
    p = Path(path).expanduser()
    if not p.is_file():
        raise PtmlabError(f"parallel file '{path}' does not exist: check the path")
    try:
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise PtmlabError(f"cannot read parallel file '{path}' as UTF-8 text{' (gzip)' if p.suffix == '.gz' else ''}: "
                          f"{e}") from None
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise PtmlabError(f"parallel file '{path}' is empty: pass a file with one sentence per line")
    return lines


def read_pairs(src_file: str, tgt_file: str, limit: int | None = None) -> Pairs:
    """Line-aligned pairs; ``limit`` keeps the first N (files are read whole to check the alignment)."""
    src, tgt = read_lines(src_file), read_lines(tgt_file)
    if len(src) != len(tgt):
        raise PtmlabError(f"parallel files are misaligned: '{src_file}' has {len(src)} lines but '{tgt_file}' has "
                          f"{len(tgt)}: pass line-aligned translations")
    for i, (a, b) in enumerate(zip(src, tgt, strict=True), 1):
        if not a.strip() or not b.strip():
            bad = src_file if not a.strip() else tgt_file
            raise PtmlabError(f"{bad}:{i}: empty line inside a parallel pair: remove the pair from both files")
    if limit:
        src, tgt = src[:limit], tgt[:limit]
    return Pairs(str(src_file), str(tgt_file), [s.strip() for s in src], [t.strip() for t in tgt])


def pair_files(flat: list[str]) -> list[tuple[str, str]]:
    """``--pairs SRC TGT [--pairs ...]`` arrives flat ([src, tgt, src, tgt, ...]) -> [(src, tgt), ...]."""
    if not flat:
        raise PtmlabError("no parallel data: pass --pairs SRC_FILE TGT_FILE (repeatable)")
    if len(flat) % 2:
        raise PtmlabError(f"--pairs takes two files (source, target) each time; got an odd list {flat}")
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


def add_pairs_arg(parser, required: bool = True) -> None:
    """The repeatable ``--pairs SRC TGT`` flag (collected flat in the config's ``pairs`` field)."""
    import argparse

    parser.add_argument("--pairs", nargs=2, action="extend", metavar=("SRC", "TGT"), required=required,
                        default=argparse.SUPPRESS, dest="pairs",
                        help="line-aligned source and target files (.gz accepted); repeat for more pairs")
