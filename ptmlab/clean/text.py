"""Text helpers shared by the cleaning rules: words, sentences, hard-wrap repair and normal forms for hashing.

datatrove's filters take a ``WordTokenizer``; its English default needs spaCy, which this project does not install.
``SimpleTokenizer`` keeps datatrove's own regex sentence splitter and splits words on whitespace, as the Gopher
paper counts words, so the published thresholds apply to the same units and no model or download is involved.
"""

from __future__ import annotations

import re
from functools import lru_cache

from datatrove.utils.word_tokenizers import WhitespaceTokenizer

TERMINAL = (".", "!", "?", '"', "'", "\u201d", "\u2019")
_WS = re.compile(r"\s+")
_NON_WORD = re.compile(r"[^\w\s]")


class SimpleTokenizer(WhitespaceTokenizer):
    """Whitespace words and datatrove's regex sentences (no spaCy, no NLTK data)."""

    def word_tokenize(self, text: str) -> list[str]:
        return text.split()


@lru_cache(1)
def tokenizer() -> SimpleTokenizer:
    return SimpleTokenizer()


def sentences(text: str) -> list[str]:
    """Sentences of one line, by datatrove's regex; a trailing fragment without terminal punctuation is one more."""
    out, end = [], 0
    for m in tokenizer()._sent_regex.finditer(text):
        out.append(m.group().strip())
        end = m.end()
    rest = text[end:].strip()
    return [s for s in out if s] + ([rest] if rest else [])


def unwrap(text: str, max_width: int = 100, min_width: int = 40, fill: float = 0.6) -> tuple[str, int]:
    """Join hard-wrapped lines (plain-text books wrap paragraphs at ~70 columns) into one line per paragraph.

    A document counts as wrapped when its longest line is between ``min_width`` and ``max_width`` characters; a line
    then joins the next non-blank line when it fills at least ``fill`` of that width. Returns (text, lines merged).
    Documents written one paragraph per line (the usual web extraction) are left as they are.
    """
    lines = text.split("\n")
    width = max((len(line.rstrip()) for line in lines), default=0)
    if not (min_width <= width <= max_width):
        return text, 0
    out: list[str] = []
    merged = 0
    joining = False
    for line in lines:
        stripped = line.strip()
        if joining and stripped:
            out[-1] = out[-1].rstrip() + " " + stripped
            merged += 1
        else:
            out.append(line)
        joining = bool(stripped) and len(line.rstrip()) >= fill * width
    return "\n".join(out), merged


def normal_form(text: str) -> str:
    """Lower case, punctuation dropped, whitespace collapsed: what exact and near deduplication compare."""
    return _WS.sub(" ", _NON_WORD.sub(" ", text.lower())).strip()


def count_lines(text: str) -> int:
    """Non-blank lines: the unit of line-level statistics."""
    return sum(1 for line in text.split("\n") if line.strip())
