"""long-attention's Q11 rule: document-level noise in its intervals and chunk-and-pool as a second comparison."""

from __future__ import annotations

from ptmlab.studies.long_attention import q11_verdict


def _docs(right: int, n: int = 20, seeds: int = 3, shift: int = 0) -> list[list[float]]:
    """Per seed, per document 1/0: the first ``right`` documents (rotated by ``shift``) correct."""
    return [[1.0 if (i + shift) % n < right else 0.0 for i in range(n)] for _ in range(seeds)]


def test_few_documents_cannot_decide_what_seeds_alone_would():
    acc = {"truncate": [0.50, 0.50, 0.50], "window": [0.60, 0.60, 0.60]}
    # seeds alone: the same +0.10 on every seed, a zero-width interval above 0
    assert q11_verdict(1.0, acc).outcome == "supported"
    # the same accuracies on 20 documents, different ones right: 2 documents' worth is within the documents' noise
    correct = {"truncate": _docs(10, shift=5), "window": _docs(12)}
    v = q11_verdict(1.0, acc, correct)
    assert v.outcome == "inconclusive" and "hierarchical bootstrap" in v.estimate.method
    assert v.estimate.low < 0 < v.estimate.high and abs(v.estimate.value - 0.10) < 1e-9


def test_chunk_and_pool_is_the_second_comparison():
    beats_truncation = {"truncate": [0.30, 0.31, 0.30], "window": [0.60, 0.61, 0.60]}
    assert q11_verdict(1.0, beats_truncation).outcome == "supported"  # no chunk variant: truncation alone
    worse_than_chunk = {**beats_truncation, "chunk": [0.80, 0.81, 0.80]}
    v = q11_verdict(1.0, worse_than_chunk)
    assert v.outcome == "not supported" and "worse than chunk-and-pool" in v.reason
    tied = {**beats_truncation, "chunk": [0.59, 0.62, 0.60]}
    assert q11_verdict(1.0, tied).outcome == "inconclusive"  # window only as good as chunking
