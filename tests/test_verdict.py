"""The verdict rules on synthetic numbers: every outcome is reachable, and noise keeps a claim inconclusive."""

import math

import pytest

from ptmlab.studies.verdict import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    Verdict,
    bootstrap_mean,
    combine,
    decide_above,
    decide_within,
    mean_interval,
    paired_bootstrap,
    paired_seeds,
)


def test_paired_seeds_interval_matches_t_formula():
    est = paired_seeds([0.80, 0.82, 0.81], [0.70, 0.71, 0.73], "gain")
    diffs = [0.10, 0.11, 0.08]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    assert est.value == pytest.approx(mean)
    assert est.high - est.value == pytest.approx(4.302653 * sd / math.sqrt(3), rel=1e-4)
    assert est.n == 3


def test_decide_above_every_outcome():
    assert decide_above(paired_seeds([0.80, 0.82, 0.81], [0.70, 0.71, 0.73], "gain")).outcome == SUPPORTED
    assert decide_above(paired_seeds([0.70, 0.71, 0.73], [0.80, 0.82, 0.81], "gain")).outcome == NOT_SUPPORTED
    assert decide_above(paired_seeds([0.80, 0.70, 0.76], [0.75, 0.76, 0.74], "gain")).outcome == INCONCLUSIVE


def test_one_seed_never_decides():
    est = paired_seeds([0.9], [0.1], "gain")
    assert math.isinf(est.low) and math.isinf(est.high)
    assert decide_above(est).outcome == INCONCLUSIVE
    assert decide_within(est, 0.01).outcome == INCONCLUSIVE


def test_decide_within_every_outcome():
    assert decide_within(mean_interval([0.001, -0.002, 0.0005], "d"), 0.01).outcome == SUPPORTED
    assert decide_within(mean_interval([0.10, 0.11, 0.12], "d"), 0.01).outcome == NOT_SUPPORTED
    assert decide_within(mean_interval([0.0, 0.02, 0.01], "d"), 0.01).outcome == INCONCLUSIVE


def test_paired_bootstrap_two_flips_of_872_is_inconclusive():
    # the super-tickets case: two examples of 872 differ between the systems
    a = [1] * 600 + [0] * 272
    b = [1] * 598 + [0] * 2 + [0] * 272
    est = paired_bootstrap(a, b, "accuracy gain")
    assert est.value == pytest.approx(2 / 872)
    assert decide_above(est).outcome == INCONCLUSIVE
    clear = paired_bootstrap([1] * 700 + [0] * 172, [1] * 600 + [0] * 272, "gain")
    assert decide_above(clear).outcome == SUPPORTED
    assert decide_above(bootstrap_mean([1] * 80 + [0] * 20, "acc"), 0.9).outcome == NOT_SUPPORTED


def test_combine_and_validation():
    s, n, i = (Verdict(SUPPORTED, "a"), Verdict(NOT_SUPPORTED, "b"), Verdict(INCONCLUSIVE, "c"))
    assert combine([s, s]).outcome == SUPPORTED
    assert combine([s, i]).outcome == INCONCLUSIVE
    assert combine([s, i, n]).outcome == NOT_SUPPORTED
    with pytest.raises(ValueError):
        Verdict("probably", "x")
    with pytest.raises(ValueError):
        paired_seeds([1, 2], [1], "x")


def test_one_run_estimate_writes_standard_json():
    import json

    d = decide_above(paired_seeds([0.9], [0.1], "gain")).to_dict()
    text = json.dumps(d, allow_nan=False)  # raises on Infinity/NaN
    assert json.loads(text)["estimate"]["low"] is None and json.loads(text)["estimate"]["value"] == pytest.approx(0.8)
