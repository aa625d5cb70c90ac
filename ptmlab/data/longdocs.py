"""The built-in ``longdocs`` task: which of 13 Project Gutenberg books is a 2,000-4,000-token passage from?

Passages are the long documents the long-input work needs (far past 512 tokens) with a label that depends on the
whole passage's style and vocabulary. Each book's Project Gutenberg header, small print and end notice are removed;
its body is tokenized with the MiniLM tokenizer (the cut is cached under ``PTMLAB_CACHE``), and consecutive,
non-overlapping passages of a seeded random length in [2000, 4000] tokens are cut from it. Training passages come
from the first part of every book and development passages from its last part (the last 20%, and never less than
one passage), so no text is shared between the splits. The cut depends only on the files and ``LONGDOCS_SEED``,
never on the training seed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json

LONGDOCS_SEED = 20214
MIN_TOKENS, MAX_TOKENS = 2000, 4000
DEV_SHARE = 0.2
BOOKS = ("austen-emma", "austen-persuasion", "austen-sense", "blake-poems", "blake-songs", "chesterton-ball",
         "chesterton-brown", "chesterton-thursday", "milton-paradise", "shakespeare-caesar", "shakespeare-hamlet",
         "shakespeare-macbeth", "whitman-leaves")

_START = re.compile(r"^\*\*\* ?START OF TH(E|IS) PROJECT GUTENBERG.*$|^\*+END\*? ?THE SMALL PRINT.*$", re.M | re.I)
_NOTE = re.compile(r"gutenberg|etext", re.I)
FRONT_MATTER_CHARS = 5000
_END = re.compile(r"^\*\*\* ?END OF TH(E|IS) PROJECT GUTENBERG|^End of (the )?Project Gutenberg", re.M | re.I)


def default_dir() -> Path:
    env = os.environ.get("PTMLAB_GUTENBERG_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[3] / "shared" / "data" / "text" / "gutenberg"
    cwd = Path.cwd().parent / "shared" / "data" / "text" / "gutenberg"
    return cwd if cwd.is_dir() else here


def strip_gutenberg(text: str) -> str:
    """The book without the Project Gutenberg header, licence ("small print") and end notice."""
    head = text[: len(text) // 2]
    starts = [m.end() for m in _START.finditer(head)]
    body = text[max(starts):] if starts else text
    end = _END.search(body)
    if end:
        body = body[: end.start()]
    notes = [m.end() for m in _NOTE.finditer(body[:FRONT_MATTER_CHARS])]
    if notes:  # title lines and editor's notes about the etext right after the licence
        para = body.find("\n\n", notes[-1])
        body = body[para if para >= 0 else notes[-1]:]
    return body.replace("\x1a", "").strip()


def _cuts(n_tokens: int, rng: random.Random) -> list[tuple[int, int]]:
    """Consecutive (start, end) token spans of random length in [MIN_TOKENS, MAX_TOKENS] covering n_tokens."""
    spans, at = [], 0
    while n_tokens - at >= MIN_TOKENS:
        size = min(rng.randint(MIN_TOKENS, MAX_TOKENS), n_tokens - at)
        spans.append((at, at + size))
        at += size
    return spans


def book_passages(text: str, tokenizer, seed: int) -> dict[str, list[str]]:
    """Train and dev passages of one book (texts cut at token boundaries)."""
    body = strip_gutenberg(text)
    enc = tokenizer(body, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    offsets = enc["offset_mapping"]
    n = len(offsets)
    dev_tokens = max(int(n * DEV_SHARE), MAX_TOKENS)
    if n - dev_tokens < MIN_TOKENS:
        dev_tokens = n - MIN_TOKENS
    boundary = n - dev_tokens
    rng = random.Random(seed)
    out: dict[str, list[str]] = {}
    for split, (lo, hi) in (("train", (0, boundary)), ("dev", (boundary, n))):
        out[split] = [body[offsets[lo + a][0]: offsets[lo + b - 1][1]] for a, b in _cuts(hi - lo, rng)]
    return out


def longdocs_passages(folder: str | Path | None = None, tokenizer=None) -> dict[str, list[tuple[str, int]]]:
    """{split: [(passage, book index)]} for all 13 books, deterministic."""
    folder = Path(folder) if folder else default_dir()
    missing = [b for b in BOOKS if not (folder / f"{b}.txt").is_file()]
    if missing:
        raise PtmlabError(f"the 'longdocs' task needs the 13 Gutenberg books in '{folder}' ({len(missing)} missing, "
                          f"e.g. {missing[0]}.txt): put them there or set PTMLAB_GUTENBERG_DIR")
    texts = [(folder / f"{b}.txt").read_text(encoding="utf-8", errors="replace") for b in BOOKS]
    cache = _cache_path(texts) if tokenizer is None else None
    if cache is not None and cache.is_file():
        try:
            return {k: [(t, int(y)) for t, y in v] for k, v in json.loads(cache.read_text(encoding="utf-8")).items()}
        except (OSError, ValueError):
            pass  # a broken cache is rebuilt
    if tokenizer is None:
        from ptmlab.models.zoo import load_tokenizer

        tokenizer = load_tokenizer("minilm")
    splits: dict[str, list[tuple[str, int]]] = {"train": [], "dev": []}
    for label, text in enumerate(texts):
        for split, passages in book_passages(text, tokenizer, LONGDOCS_SEED + label).items():
            splits[split].extend((p, label) for p in passages)
    if cache is not None:
        try:
            atomic_write_json(cache, splits)
        except OSError:
            pass  # a read-only cache only costs time
    return splits


def _cache_path(texts: list[str]) -> Path:
    h = hashlib.sha256(f"{LONGDOCS_SEED}:{MIN_TOKENS}:{MAX_TOKENS}:{DEV_SHARE}:{FRONT_MATTER_CHARS}:v1".encode())
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass"))
    home = Path(os.environ.get("PTMLAB_CACHE", Path.home() / ".cache" / "ptmlab"))
    return home / "longdocs" / f"{h.hexdigest()[:24]}.json"
