"""Watermarking: a secret, deterministic small fraction of queries is answered with a wrong label and recorded.

A query is chosen by an HMAC, under a server secret, of what the model actually reads: its tokens after the
tokenizer's own normalisation, lower-cased, with function words and punctuation dropped. Variants the model treats
(nearly) alike -- other case, spacing, accents, trailing punctuation, padding with "the", "of", "and" -- therefore
get the same mark, and a vote over such variants cannot outvote it. An equal fraction of other queries is recorded
as controls (answered truthfully): how often a suspect model disagrees with the truth on controls is the rate at
which it would "reproduce" a mark by chance. Only hashes of the queries are stored.
"""

from __future__ import annotations

import hashlib
import hmac
import unicodedata

from ptmlab.data.wordlists import FUNCTION_WORDS
from ptmlab.serve.state import WatermarkRow, text_hash


def normalised_tokens(tokens: list[str]) -> list[str]:
    """The tokens that carry content: lower-cased, word-piece markers kept, function words and punctuation gone."""
    out = []
    for t in tokens:
        core = t.lower().removeprefix("##").lstrip("\u2581\u0120")  # WordPiece, SentencePiece, byte-level BPE
        if not core or all(unicodedata.category(c)[0] in "PSZC" for c in core):
            continue
        if core in FUNCTION_WORDS and not t.startswith("##"):
            continue
        out.append(t.lower().lstrip("\u2581\u0120"))
    return out


class Watermarker:
    def __init__(self, secret: bytes, rate: float):
        self.secret = secret
        self.rate = rate

    def _u(self, tokens: list[str]) -> float:
        msg = "\x1f".join(normalised_tokens(tokens)).encode("utf-8", "surrogatepass")
        digest = hmac.new(self.secret, msg, hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def apply(self, tokens: list[str], text: str, pair: str | None, probs: list[float],
              task: str | None = None) -> tuple[list[float], WatermarkRow | None]:
        """The probabilities to answer with, and the record to keep (None for ordinary queries).

        ``tokens``: the model's tokens of the query (both texts of a pair); ``text``/``pair`` are only hashed, with
        ``task``, the head of a multi-task server that answered (each head's answers are recorded apart)."""
        if self.rate <= 0:
            return probs, None
        u = self._u(tokens)
        true = max(range(len(probs)), key=probs.__getitem__)
        if u < self.rate:
            wrong = max((i for i in range(len(probs)) if i != true), key=probs.__getitem__)
            swapped = list(probs)
            swapped[true], swapped[wrong] = probs[wrong], probs[true]
            return swapped, WatermarkRow("mark", text_hash(text, pair, task), true, wrong)
        if u < 2 * self.rate:
            return probs, WatermarkRow("control", text_hash(text, pair, task), true, true)
        return probs, None
