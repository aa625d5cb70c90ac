"""Watermarking: a secret, deterministic small fraction of queries is answered with a wrong label and recorded.

A query is chosen by an HMAC of its text under a server secret, so the same text always gets the same answer and
nobody without the secret can tell which answers are marked. An equal fraction of other queries is recorded as
controls (answered truthfully): how often a suspect model disagrees with the truth on controls is the rate at
which it would "reproduce" a mark by chance.
"""

from __future__ import annotations

import hashlib
import hmac

from ptmlab.serve.state import WatermarkRow


class Watermarker:
    def __init__(self, secret: bytes, rate: float):
        self.secret = secret
        self.rate = rate

    def _u(self, text: str, pair: str | None) -> float:
        msg = text.encode("utf-8", "surrogatepass") + b"\x00" + (pair or "").encode("utf-8", "surrogatepass")
        digest = hmac.new(self.secret, msg, hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def apply(self, text: str, pair: str | None, probs: list[float]) -> tuple[list[float], WatermarkRow | None]:
        """The probabilities to answer with, and the record to keep (None for ordinary queries)."""
        if self.rate <= 0:
            return probs, None
        u = self._u(text, pair)
        true = max(range(len(probs)), key=probs.__getitem__)
        if u < self.rate:
            wrong = max((i for i in range(len(probs)) if i != true), key=probs.__getitem__)
            swapped = list(probs)
            swapped[true], swapped[wrong] = probs[wrong], probs[true]
            return swapped, WatermarkRow("mark", text, pair, true, wrong)
        if u < 2 * self.rate:
            return probs, WatermarkRow("control", text, pair, true, true)
        return probs, None
