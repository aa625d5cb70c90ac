"""Raw text for TinyBERT's general distillation: text files cut into passages of about ``max_length`` tokens."""

from __future__ import annotations

import random
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.data.encode import Encoded, encode_split
from ptmlab.data.loaders import Split


def text_files(spec: str) -> list[Path]:
    """Files named in a comma-separated list of files and folders (folders: every .txt below them)."""
    files: list[Path] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        p = Path(part).expanduser()
        if p.is_dir():
            files.extend(sorted(p.rglob("*.txt")))
        elif p.is_file():
            files.append(p)
        else:
            raise PtmlabError(f"general text '{part}' does not exist: pass text files or folders, e.g. "
                              f"../shared/data/text")
    if not files:
        raise PtmlabError(f"no .txt files under '{spec}': pass text files or folders holding them")
    return files


def passages(spec: str, limit: int, seed: int, chars: int = 300) -> list[str]:
    """Up to ``limit`` passages (consecutive non-empty lines joined up to ~``chars`` characters), seeded sample."""
    out: list[str] = []
    for f in text_files(spec):
        buf = ""
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            line = line.strip()
            if not line or line.startswith("="):
                if len(buf) > 40:
                    out.append(buf)
                buf = ""
                continue
            buf = f"{buf} {line}".strip()
            if len(buf) >= chars:
                out.append(buf)
                buf = ""
        if len(buf) > 40:
            out.append(buf)
    random.Random(seed).shuffle(out)
    return out[:limit]


def text_examples(spec: str, tokenizer, max_length: int, limit: int, seed: int) -> Encoded:
    texts = passages(spec, limit, seed)
    if not texts:
        raise PtmlabError(f"the text under '{spec}' has no passages: pass files with prose")
    return encode_split(tokenizer, Split(texts), max_length)
