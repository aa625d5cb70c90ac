import math

import pytest

from ptmlab.data.metrics import accuracy, f1, glue_score, macro_f1, mcc, pearson, spearman


def test_accuracy_and_f1_by_hand():
    preds = [1, 0, 1, 1, 0, 1]
    refs = [1, 0, 0, 1, 1, 1]
    assert accuracy(preds, refs) == pytest.approx(4 / 6)
    # positive class: tp=3, fp=1, fn=1 -> precision 3/4, recall 3/4, F1 0.75
    assert f1(preds, refs) == pytest.approx(0.75)


def test_mcc_by_hand():
    preds = [1, 0, 1, 1, 0, 1]
    refs = [1, 0, 0, 1, 1, 1]
    tp, tn, fp, fn = 3, 1, 1, 1
    expected = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert mcc(preds, refs) == pytest.approx(expected)
    assert mcc([1, 1, 0, 0], [1, 1, 0, 0]) == pytest.approx(1.0)


def test_binary_mcc_agrees_with_scikit_learn_and_multiclass_still_works():
    """Binary labels are counted directly (bootstraps call this thousands of times): the same numbers as
    scikit-learn, 0 for a constant prediction, and three classes still go through scikit-learn."""
    import numpy as np
    from sklearn.metrics import matthews_corrcoef

    rng = np.random.default_rng(0)
    for k in range(50):
        refs = rng.integers(0, 2, 40)
        preds = np.ones(40, dtype=int) if k % 10 == 0 else np.where(rng.random(40) < 0.7, refs, 1 - refs)
        assert mcc(preds, refs) == pytest.approx(matthews_corrcoef(refs, preds), abs=1e-12)
    assert mcc([1, 1, 1, 1], [1, 0, 1, 0]) == 0.0
    three = ([0, 1, 2, 2, 1, 0], [0, 1, 2, 1, 1, 2])
    assert mcc(*three) == pytest.approx(matthews_corrcoef(three[1], three[0]))


def test_macro_f1_by_hand():
    preds = [0, 1, 2, 2, 1, 0]
    refs = [0, 1, 2, 1, 1, 2]
    # class 0: p=1/2 r=1 f=2/3; class 1: p=1 r=2/3 f=0.8; class 2: p=1/2 r=1/2 f=1/2
    assert macro_f1(preds, refs) == pytest.approx((2 / 3 + 0.8 + 0.5) / 3)


def test_correlations_by_hand():
    x = [1.0, 2.0, 3.0, 4.0]
    y = [2.0, 4.0, 5.0, 4.0]
    mx, my = 2.5, 3.75
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sx = math.sqrt(sum((a - mx) ** 2 for a in x))
    sy = math.sqrt(sum((b - my) ** 2 for b in y))
    assert pearson(x, y) == pytest.approx(cov / (sx * sy))
    # ranks of y with ties averaged: [1, 2.5, 4, 2.5]
    ry = [1, 2.5, 4, 2.5]
    assert spearman(x, y) == pytest.approx(pearson([1, 2, 3, 4], ry))
    assert pearson([1, 1, 1], [1, 2, 3]) == 0.0


def test_glue_score_averages_official_metrics():
    assert glue_score({"f1": 0.9, "accuracy": 0.8}) == pytest.approx(0.85)
    assert glue_score({"mcc": 0.4}) == pytest.approx(0.4)
