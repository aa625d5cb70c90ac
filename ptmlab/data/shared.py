"""Where the shared data folder is (GLUE, BLiMP, SQuAD, CoNLL-2003, parallel and raw text): one answer for every
reader of it."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir_candidates() -> list[Path]:
    """Where the shared data folder is looked for, in order: ``$PTMLAB_DATA_DIR``, then ``../shared/data`` from the
    working directory and from the repository."""
    cands = [os.environ.get("PTMLAB_DATA_DIR"), "../shared/data", Path(__file__).resolve().parents[2] / ".." / "shared"
             / "data"]
    return list(dict.fromkeys(Path(c).resolve() for c in cands if c))


def shared_data_dir() -> Path | None:
    """``$PTMLAB_DATA_DIR``, else ``../shared/data`` from the working directory or from the repository: the first of
    ``data_dir_candidates`` that is a folder."""
    return next((c for c in data_dir_candidates() if c.is_dir()), None)


def looked_in(rel: str) -> list[str]:
    """Where ``rel`` below the shared data folder was looked for: in the shared data folder when there is one, else
    in each place it may be."""
    root = shared_data_dir()
    return [str(r / rel) for r in ([root] if root is not None else data_dir_candidates())]


def shared_subdir(rel: str, probe: str, env: str | None = None) -> Path | None:
    """A folder of the shared data (``$env`` when set, else ``rel`` below the shared data folder) that holds the file
    ``probe``, or None."""
    candidates = [Path(os.environ[env])] if env and os.environ.get(env) else []
    root = shared_data_dir()
    if root is not None:
        candidates.append(root / rel)
    for c in candidates:
        if (c / probe).is_file():
            return c
    return None


# what ``--corpus`` names for the pre-training studies: the WikiText-2 validation and test text, or that and the
# Gutenberg books beside it (about three times the text: the budget sized for a GPU repeats it less)
CORPORA = ("wikitext-2", "english")
CORPUS_HELP = ("shared text to pre-train on without --files: wikitext-2 (its validation and test text), or english "
               "(that and the 13 Gutenberg books, about 3 times the text)")


def more_text(corpus: str, folder: str | Path) -> list[str]:
    """The text files ``corpus`` adds to WikiText-2: none for ``wikitext-2``; for ``english`` the 13 shared Gutenberg
    books as one UTF-8 file written in ``folder`` once (two of the books are Latin-1, which the pre-training reader,
    strict about a user's files, refuses). A one-line error when the books are not on this machine."""
    from ptmlab.core.errors import PtmlabError
    from ptmlab.core.io import atomic_write_text

    if corpus not in CORPORA:
        raise PtmlabError(f"--corpus '{corpus}' is not a corpus: choose {' or '.join(CORPORA)}")
    if corpus == "wikitext-2":
        return []
    books = shared_subdir("text/gutenberg", "austen-emma.txt")
    if books is None:
        raise PtmlabError("--corpus english needs the shared Gutenberg books (../shared/data/text/gutenberg): pass "
                          "--files with English text instead, or --corpus wikitext-2")
    target = Path(folder) / "gutenberg-books.txt"
    if not target.is_file():
        texts = []
        for path in sorted(books.glob("*.txt")):
            raw = path.read_bytes()
            try:
                texts.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append(raw.decode("latin-1"))
        atomic_write_text(target, "\n\n".join(t.strip() for t in texts) + "\n")
    return [str(target)]
