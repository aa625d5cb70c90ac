"""Corpus rules: exact document deduplication, near-duplicate removal (MinHash LSH) and C4's repeated
three-sentence spans.

Each needs every earlier document, so it is split in two: ``prepare`` (hashing, MinHash signatures: the expensive
part) runs in the worker processes, and ``decide`` runs in the parent in input order, holding only hashes: 8 bytes
per document for exact duplicates and per sentence span, one LSH entry per kept document for near duplicates. The
first copy is kept and later copies are removed, so the result does not depend on ``--workers``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import xxhash
from datasketch import LeanMinHash, MinHash, MinHashLSH

from ptmlab.clean.rules import Outcome, Rule, register
from ptmlab.clean.text import normal_form, sentences
from ptmlab.core.errors import PtmlabError


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def _xxh32(data: bytes) -> int:
    return xxhash.xxh32_intdigest(data)


@register
class ExactDedup(Rule):
    """exact duplicates: a document whose normalised text (case, punctuation, spacing ignored) was seen before"""

    name = "exact_dedup"
    kind = "corpus"

    @dataclass(frozen=True)
    class Params:
        normalize: bool = True

    def __init__(self, params):
        super().__init__(params)
        self._seen: set[int] = set()

    def prepare(self, text: str) -> int:
        return _hash64(normal_form(text) if self.params.normalize else text)

    def decide(self, text: str, prepared: int) -> Outcome:
        if prepared in self._seen:
            return Outcome(text, removed=True, reason="exact duplicate")
        self._seen.add(prepared)
        return Outcome(text)


@register
class NearDedup(Rule):
    """near duplicates: MinHash over word 5-grams with LSH (datasketch), estimated Jaccard similarity >= threshold"""

    name = "near_dedup"
    kind = "corpus"

    @dataclass(frozen=True)
    class Params:
        ngram: int = 5
        threshold: float = 0.5  # OpenWebText: 5-gram sets, documents above 0.5 similarity removed
        num_perm: int = 256
        bands: int = 0  # bands and rows > 0 set the LSH banding directly (FineWeb: 14 x 8); 0: datasketch picks
        rows: int = 0  # them for the threshold
        verify: bool = True  # keep only candidates whose estimated Jaccard similarity reaches the threshold
        seed: int = 1

        def validate(self) -> None:
            if self.ngram < 1 or self.num_perm < 2 or self.bands < 0 or self.rows < 0:
                raise PtmlabError("near_dedup.ngram must be >= 1, num_perm >= 2, bands and rows >= 0")
            if not 0.0 < self.threshold <= 1.0:
                raise PtmlabError(f"near_dedup.threshold {self.threshold} must lie in (0, 1]")

        @property
        def perms(self) -> int:
            return self.bands * self.rows if self.bands and self.rows else self.num_perm

    def __init__(self, params):
        super().__init__(params)
        banding = (params.bands, params.rows) if params.bands and params.rows else None
        # with verification a false candidate costs one comparison, a missed one a kept duplicate: weigh misses more
        weights = (0.1, 0.9) if params.verify else (0.5, 0.5)
        self._lsh = MinHashLSH(threshold=params.threshold, num_perm=params.perms, weights=weights, params=banding)
        self._kept: dict[int, LeanMinHash] = {}
        self._next = 0

    def shingles(self, text: str) -> set[bytes]:
        words = normal_form(text).split()
        n = self.params.ngram
        if len(words) <= n:
            return {" ".join(words).encode()} if words else set()
        return {" ".join(words[i:i + n]).encode() for i in range(len(words) - n + 1)}

    def prepare(self, text: str) -> LeanMinHash | None:
        grams = self.shingles(text)
        if not grams:
            return None
        m = MinHash(num_perm=self.params.perms, seed=self.params.seed, hashfunc=_xxh32)
        m.update_batch(list(grams))
        return LeanMinHash(m)

    def decide(self, text: str, prepared: LeanMinHash | None) -> Outcome:
        if prepared is None:
            return Outcome(text)
        candidates = self._lsh.query(prepared)
        if self.params.verify:
            candidates = [c for c in candidates if self._kept[c].jaccard(prepared) >= self.params.threshold]
        if candidates:
            return Outcome(text, removed=True, reason="near duplicate")
        key = self._next
        self._next += 1
        self._lsh.insert(key, prepared)
        if self.params.verify:
            self._kept[key] = prepared
        return Outcome(text)


@register
class SpanDedup(Rule):
    """C4's exact span deduplication: every span of three consecutive sentences seen before is removed"""

    name = "span_dedup"
    kind = "corpus"

    @dataclass(frozen=True)
    class Params:
        span: int = 3
        min_kept_fraction: float = 0.5  # a document that lost more of its sentences is dropped as a copy

    def __init__(self, params):
        super().__init__(params)
        self._seen: set[int] = set()

    def prepare(self, text: str) -> tuple[list[list[str]], list[int]]:
        lines = [sentences(line) for line in text.split("\n") if line.strip()]
        flat = [normal_form(s) for line in lines for s in line]
        k = min(self.params.span, len(flat))
        hashes = [_hash64("\x00".join(flat[i:i + k])) for i in range(len(flat) - k + 1)] if k else []
        return lines, hashes

    def decide(self, text: str, prepared: tuple[list[list[str]], list[int]]) -> Outcome:
        lines, hashes = prepared
        k = min(self.params.span, sum(len(line) for line in lines))
        drop: set[int] = set()
        for i, h in enumerate(hashes):
            if h in self._seen:
                drop.update(range(i, i + k))
        self._seen.update(hashes)
        if not drop:
            return Outcome(text)
        total = sum(len(line) for line in lines)
        if total - len(drop) < self.params.min_kept_fraction * total or len(drop) == total:
            return Outcome(text, removed=True, reason="repeated spans")
        out, i = [], 0
        for line in lines:
            kept = [s for j, s in enumerate(line, start=i) if j not in drop]
            i += len(line)
            if kept:
                out.append(" ".join(kept))
        return Outcome("\n".join(out))
