"""The shared news test sets (``../shared/data/parallel/newstest``) as general-domain parallel text, split once.

Each file is ``english<TAB>other<TAB>origin`` (English-German, English-French). One split serves every user of it
(tokenizer studies, multilingual distillation): the **test** part is the news test sets named in ``HELD_OUT`` (the
2008 news test set: the same English sentences in both files, about 2,000 pairs per language), the **train** part is
every other pair of that file minus any pair whose English or other sentence also occurs in the test part of either
file (the news test sets of 2009-2014 are multi-parallel, and a few sentences repeat across years). So nothing of
the test part, in any language, is seen in training.
"""

from __future__ import annotations

import gzip
from functools import lru_cache
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.data.shared import shared_data_dir

FILES = {"de": "en-de.newstest.tsv.gz", "fr": "en-fr.newstest.tsv.gz"}
HELD_OUT = ("news-test2008",)     # origins (the part after the last '/') kept for testing
PARTS = ("train", "test")


def newstest_dir() -> Path:
    root = shared_data_dir()
    path = root / "parallel" / "newstest" if root else None
    if path is None or not path.is_dir():
        raise PtmlabError("the news test sets are not there: expected ../shared/data/parallel/newstest "
                          "(or set PTMLAB_DATA_DIR to the shared data folder)")
    return path


def _held_out(origin: str) -> bool:
    return origin.rsplit("/", 1)[-1] in HELD_OUT


@lru_cache(maxsize=4)
def _read(path: str) -> tuple[tuple[str, str, str], ...]:
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                raise PtmlabError(f"{path}:{n}: expected english<TAB>other<TAB>origin, found {len(parts)} fields")
            rows.append((parts[0], parts[1], parts[2]))
    return tuple(rows)


def newstest_pairs(lang: str, part: str) -> list[tuple[str, str]]:
    """(English, ``lang``) pairs of the ``part`` ('train' or 'test') of the news test sets (see the module)."""
    if lang not in FILES:
        raise PtmlabError(f"no news test set for language '{lang}': choose one of {', '.join(FILES)}")
    if part not in PARTS:
        raise PtmlabError(f"news test sets have no part '{part}': choose train or test")
    base = newstest_dir()
    rows = {code: _read(str(base / name)) for code, name in FILES.items() if (base / name).is_file()}
    if lang not in rows:
        raise PtmlabError(f"{base / FILES[lang]} is missing")
    if part == "test":
        return [(en, other) for en, other, origin in rows[lang] if _held_out(origin)]
    seen = {s for file_rows in rows.values() for en, other, origin in file_rows if _held_out(origin)
            for s in (en, other)}
    return [(en, other) for en, other, origin in rows[lang]
            if not _held_out(origin) and en not in seen and other not in seen]


def newstest_lines(lang: str, part: str) -> list[str]:
    """The sentences of one language in ``part``: German or French from its file, English from the English-German
    file (the larger one)."""
    if lang == "en":
        return [en for en, _ in newstest_pairs("de", part)]
    return [other for _, other in newstest_pairs(lang, part)]


SPEC = "newstest:LANG:PART[:SIDE]"


def newstest_side(spec: str) -> list[str]:
    """One side of a part of the English-``LANG`` news test pairs, named ``newstest:LANG:PART[:SIDE]`` (SIDE ``en``
    or LANG, the default): ``newstest:de:train:en`` and ``newstest:de:train`` are line-aligned translations."""
    parts = spec.split(":")
    if parts[0] != "newstest" or len(parts) not in (3, 4):
        raise PtmlabError(f"'{spec}' is not {SPEC}: write e.g. newstest:de:test (German) and newstest:de:test:en "
                          "(its English side)")
    lang, part = parts[1], parts[2]
    side = parts[3] if len(parts) == 4 else lang
    if side not in ("en", lang):
        raise PtmlabError(f"'{spec}': the side of English-{lang} pairs is en or {lang}, not '{side}'")
    pairs = newstest_pairs(lang, part)
    return [en if side == "en" else other for en, other in pairs]


def write_pairs(lang: str, part: str, out_dir: Path, limit: int = 0) -> tuple[Path, Path]:
    """Write ``part`` of the English-``lang`` pairs as two line-aligned files (``newstest.PART.en-LANG.en`` and
    ``.LANG``) under ``out_dir`` for commands that take ``--pairs SRC TGT``; the first ``limit`` pairs (0: all),
    sentences with a line break inside dropped."""
    from ptmlab.core.io import atomic_write_text

    pairs = [(a, b) for a, b in newstest_pairs(lang, part) if a.strip() and b.strip()]
    pairs = pairs[:limit] if limit > 0 else pairs
    stem = Path(out_dir) / f"newstest.{part}.en-{lang}"
    src, tgt = stem.with_name(stem.name + ".en"), stem.with_name(stem.name + f".{lang}")
    atomic_write_text(src, "".join(a + "\n" for a, _ in pairs))
    atomic_write_text(tgt, "".join(b + "\n" for _, b in pairs))
    return src, tgt
