"""The long-attention study's verdict rules on synthetic numbers (every outcome), its exponent fit, and its options.
(The study itself runs end to end with --budget small in tests/test_studies_registry.py.)"""

from __future__ import annotations

import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.studies.long_attention import q10_verdict, q11_verdict, top_exponent


def _exponent(value: float, half: float = 0.05):
    """Q10's exponent with a t interval over three timing passes."""
    from ptmlab.studies.verdict import Estimate

    return Estimate("sdpa latency exponent", value, value - half, value + half, 3,
                    "t over 3 repeated timing passes (95%)", 2)


def test_q10_outcomes():
    assert q10_verdict(1.8, 8192, interval=_exponent(1.8)).outcome == "supported"
    assert q10_verdict(1.6, 1024, interval=_exponent(1.6)).outcome == "supported"  # a clear n^2 below the crossover
    v = q10_verdict(1.1, 8192, interval=_exponent(1.1))
    assert v.outcome == "not supported" and "1.10 [1.05, 1.15]" in v.reason and "8,192" in v.reason
    assert q10_verdict(1.1, 4096, interval=_exponent(1.1)).outcome == "inconclusive"  # 4,096 < 2 x 2,304: too short
    assert q10_verdict(1.45, 16384, interval=_exponent(1.45, 0.1)).outcome == "inconclusive"  # straddles 1.5
    assert q10_verdict(1.35, 16384, interval=_exponent(1.35)).outcome == "not supported"  # every answer reachable
    assert q10_verdict(None, 8192).outcome == "inconclusive"
    assert q10_verdict(1.1, 1024, hidden=64, interval=_exponent(1.1)).outcome == "not supported"  # crossover scales
    one = q10_verdict(1.8, 8192)  # one timing per length: no interval over repeated timings decides nothing
    assert one.outcome == "inconclusive" and "n^1.80" in one.reason and "no interval" in one.reason


def test_q11_outcomes():
    sup = {"truncate": [0.40, 0.42, 0.41], "chunk": [0.55, 0.57, 0.56], "window": [0.60, 0.61, 0.62]}
    v = q11_verdict(1.02, sup)
    assert v.outcome == "supported" and "better than chunk-and-pool" in v.reason
    assert v.estimate.value == pytest.approx(0.20) and v.estimate.n == 3
    # linear cost but the paired interval includes 0
    assert q11_verdict(1.02, {"truncate": [0.40, 0.50, 0.45], "window": [0.44, 0.48, 0.46]}).outcome == "inconclusive"
    # window worse than truncation, every seed
    bad = {"truncate": [0.60, 0.61, 0.62], "window": [0.40, 0.41, 0.43]}
    assert q11_verdict(1.02, bad).outcome == "not supported"
    assert q11_verdict(1.7, sup).outcome == "not supported"  # accurate but not linear in cost
    assert q11_verdict(1.4, sup).outcome == "inconclusive"  # cost exponent between 1.3 and 1.5
    assert q11_verdict(None, sup).outcome == "inconclusive"  # exponent unmeasured
    assert q11_verdict(1.0, {"truncate": [0.3], "window": [0.9]}).outcome == "inconclusive"  # one seed
    assert q11_verdict(1.0, {"window": [0.5, 0.6]}).outcome == "inconclusive"  # a missing variant
    near = {"truncate": [0.3, 0.3, 0.31], "chunk": [0.59, 0.61, 0.6], "window": [0.6, 0.6, 0.6]}
    assert "as good as chunk-and-pool" in q11_verdict(1.0, near).reason
    far = {"truncate": [0.3, 0.3, 0.31], "chunk": [0.8, 0.81, 0.8], "window": [0.6, 0.6, 0.61]}
    assert "worse than chunk-and-pool" in q11_verdict(1.0, far).reason


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


def test_recurrence_is_reported_beside_the_rule_without_entering_it():
    acc = {"truncate": [0.50, 0.52, 0.51], "window": [0.60, 0.63, 0.61]}
    base = q11_verdict(1.05, acc)
    with_rec = q11_verdict(1.05, {**acc, "recurrence": [0.20, 0.21, 0.22]})
    assert with_rec.outcome == base.outcome == "supported"
    assert "segment recurrence reaches 0.2100" in with_rec.reason
    assert "recurrence" not in base.reason


def test_default_task_is_longdocs_not_the_glue_default():
    # a study's own default task stands; only an empty one becomes sst2/tweets (it once trained on sst2 here)
    from ptmlab.studies.common import parse_study_args
    from ptmlab.studies.long_attention import LongAttentionArgs

    assert parse_study_args("long-attention", LongAttentionArgs, []).task == "longdocs"
    assert parse_study_args("long-attention", LongAttentionArgs, ["--task", "synthetic-long"]).task == "synthetic-long"
