"""The long-attention study's verdict rules on synthetic numbers (every outcome), its exponent fit, and its options.
(The study itself runs end to end with --budget small in tests/test_studies_registry.py.)"""

from __future__ import annotations

import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.studies.long_attention import noise_margin, q10_verdict, q11_verdict, top_exponent


def test_q10_outcomes():
    assert q10_verdict(1.8, 8192)[0] == "supported"
    assert q10_verdict(1.5, 1024)[0] == "supported"  # a clear n^2 even below the crossover counts
    label, text = q10_verdict(1.1, 8192)
    assert label == "not supported" and "n^1.10" in text and "8,192" in text
    assert q10_verdict(1.1, 4096)[0] == "inconclusive"  # 4,096 < 2 x 2,304: too short to rule it out
    assert q10_verdict(1.35, 16384)[0] == "inconclusive"  # between the thresholds
    assert q10_verdict(None, 8192)[0] == "inconclusive"
    assert q10_verdict(1.1, 1024, hidden=64)[0] == "not supported"  # the crossover scales with the hidden size


def test_noise_margin_is_one_example_or_the_seed_spread():
    acc = {"window": [0.50, 0.60], "truncate": [0.40, 0.42]}
    assert noise_margin(acc, ("window", "truncate"), 100) == pytest.approx(0.10)
    assert noise_margin({"window": [0.5, 0.5], "truncate": [0.4, 0.4]}, ("window", "truncate"), 20) == 0.05


def test_q11_outcomes():
    n = 100  # margin at least 0.01
    sup = {"truncate": [0.40, 0.42], "chunk": [0.55, 0.57], "window": [0.60, 0.61]}
    label, text = q11_verdict(1.02, sup, n)
    assert label == "supported" and "better than chunk-and-pool" in text and "+0.1950" in text
    # linear cost but no accuracy gain beyond the seed spread
    label, text = q11_verdict(1.02, {"truncate": [0.40, 0.50], "window": [0.44, 0.52]}, n)
    assert label == "inconclusive"
    # window worse than truncation by more than the margin
    assert q11_verdict(1.02, {"truncate": [0.60, 0.61], "window": [0.40, 0.41]}, n)[0] == "not supported"
    # accurate but not linear in cost
    assert q11_verdict(1.7, sup, n)[0] == "not supported"
    # accurate, cost exponent between 1.3 and 1.5
    assert q11_verdict(1.4, sup, n)[0] == "inconclusive"
    # exponent unmeasured: accuracy alone cannot make it supported
    assert q11_verdict(None, sup, n)[0] == "inconclusive"
    # a missing variant
    assert q11_verdict(1.0, {"window": [0.5, 0.6]}, n)[0] == "inconclusive"
    # chunk-and-pool within the margin of window
    text = q11_verdict(1.0, {"truncate": [0.3, 0.3], "chunk": [0.595, 0.6], "window": [0.6, 0.6]}, n)[1]
    assert "as good as chunk-and-pool" in text
    text = q11_verdict(1.0, {"truncate": [0.3, 0.3], "chunk": [0.8, 0.8], "window": [0.6, 0.6]}, n)[1]
    assert "worse than chunk-and-pool" in text


def test_top_exponent_uses_the_top_quarter():
    # cost = n + n^2 / 1000: near-linear at the bottom, quadratic at the top
    rows = [{"impl": "sdpa", "length": n, "latency_s": n + n * n / 1000} for n in (64, 256, 1024, 4096, 16384)]
    rows.append({"impl": "sdpa", "length": 128, "latency_s": None})
    e = top_exponent(rows, "sdpa")
    assert 1.8 < e < 2.0  # from 4,096 and 16,384 only
    assert top_exponent(rows, "eager") is None


def test_bad_options(tmp_path):
    from ptmlab.studies import STUDIES, load_all

    load_all()
    run = STUDIES.get("long-attention")
    with pytest.raises(PtmlabError, match="--seeds"):
        run(["--budget", "small", "--seeds", "a,b", "--output", str(tmp_path)])
    with pytest.raises(PtmlabError, match="--lengths"):
        run(["--budget", "small", "--lengths", "256", "--output", str(tmp_path)])
    with pytest.raises(PtmlabError, match="--variants"):
        run(["--budget", "small", "--variants", "slide", "--output", str(tmp_path)])
    with pytest.raises(PtmlabError, match="--short-length 1024 exceeds"):
        run(["--budget", "small", "--short-length", "1024", "--output", str(tmp_path)])
    assert not (tmp_path / "results.json").exists()
