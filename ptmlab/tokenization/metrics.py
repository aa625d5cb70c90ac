"""Tokenizer quality on a text, as in Rust et al. (ACL 2021) "How Good is Your Tokenizer?".

Words are whitespace-separated (``split_punct``: every punctuation character is a word of its own as well,
like BERT's basic tokenizer); each word is tokenized on its own, without special tokens. Over all words:

- fertility: pieces per word;
- continued_words: share of words split into two or more pieces;
- whole_words: share of words kept whole (exactly one piece, and not the unknown token);
- unk_rate: share of pieces that are the unknown token;
- chars_per_token: characters of the words (no whitespace) per piece;
- vocab_use: share of the vocabulary the text used.

Counting runs once per distinct word (weighted by its count), so it costs one tokenizer call per word type.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from ptmlab.tokenization.load import LoadedTokenizer

_PUNCT_SPLIT = re.compile(r"[^\W_]+|\S")  # runs of letters/digits, or any other single character
METRICS = ("fertility", "continued_words", "whole_words", "unk_rate", "chars_per_token", "vocab_use")


def split_words(line: str, split_punct: bool = False) -> list[str]:
    """Words of a line: whitespace-separated, or with each punctuation character split off as well."""
    if not split_punct:
        return line.split()
    return _PUNCT_SPLIT.findall(line)


def count_words(lines: Iterable[str], split_punct: bool = False) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in lines:
        counts.update(split_words(line, split_punct))
    return counts


@dataclass
class Counts:
    """Sums that merge across files (and languages); :meth:`metrics` turns them into the ratios."""

    vocab_size: int
    words: int = 0
    tokens: int = 0
    continued: int = 0
    whole: int = 0
    unk: int = 0
    chars: int = 0
    ids: set[int] = field(default_factory=set)

    def merge(self, other: Counts) -> Counts:
        return Counts(self.vocab_size, self.words + other.words, self.tokens + other.tokens,
                      self.continued + other.continued, self.whole + other.whole, self.unk + other.unk,
                      self.chars + other.chars, self.ids | other.ids)

    def metrics(self) -> dict[str, float | int]:
        w, t = max(self.words, 1), max(self.tokens, 1)
        return {
            "fertility": self.tokens / w,
            "continued_words": self.continued / w,
            "whole_words": self.whole / w,
            "unk_rate": self.unk / t,
            "chars_per_token": self.chars / t,
            "vocab_use": len(self.ids) / max(self.vocab_size, 1),
            "words": self.words,
            "tokens": self.tokens,
            "distinct_tokens": len(self.ids),
        }


def measure(tok: LoadedTokenizer, words: Counter[str], batch: int = 20000) -> Counts:
    """Count pieces of every word in ``words`` (a word -> occurrences table) with ``tok``."""
    c = Counts(tok.vocab_size)
    unk = tok.unk_id
    types = list(words)
    for start in range(0, len(types), batch):
        chunk = types[start:start + batch]
        for word, ids in zip(chunk, tok.encode_words(chunk), strict=True):
            n, k = len(ids), words[word]
            c.words += k
            c.tokens += k * n
            c.chars += k * len(word)
            if n >= 2:
                c.continued += k
            elif n == 1 and ids[0] != unk:
                c.whole += k
            if unk is not None:
                c.unk += k * ids.count(unk)
            c.ids.update(ids)
    return c
