"""Study data-quality (Q4): the verdict rule on synthetic numbers for every outcome, and the study end to end on
the shared text (tiny model, two seeds, a few steps)."""

from __future__ import annotations

import json

import pytest

from ptmlab.studies.data_quality import quality_verdict, real_difference
from tests.conftest import SHARED, assert_clean_error, run_cli

needs_text = pytest.mark.skipif(not (SHARED / "text" / "wikitext-2" / "valid.txt").is_file(),
                                reason=f"shared text not found at {SHARED / 'text'} (shared data is absent)")


def test_a_difference_is_real_only_beyond_two_standard_errors_with_every_seed_agreeing():
    assert real_difference([0.10, 0.12, 0.11]) == "positive"
    assert real_difference([-0.10, -0.12]) == "negative"
    assert real_difference([0.30, -0.01, 0.2]) == "none"  # one seed disagrees
    assert real_difference([0.01, 0.30]) == "none"  # same sign, but the mean is within two standard errors
    assert real_difference([]) == "none"


@pytest.mark.parametrize("loss,task,expected", [
    ([0.2, 0.25], [0.01, 0.03], "supported"),  # clean: lower loss, better downstream
    ([0.2, 0.25], [0.02, -0.01], "supported"),  # downstream within noise does not overturn the loss
    ([-0.2, -0.25], [-0.01, 0.02], "not supported"),  # raw: lower loss, downstream within noise
    ([-0.2, -0.25], [-0.05, -0.06], "not supported"),
    ([0.2, -0.1], [0.01, 0.02], "inconclusive"),  # seeds disagree on the loss
    ([0.2, 0.25], [-0.05, -0.06], "inconclusive"),  # the two measures disagree, both beyond noise
    ([-0.2, -0.25], [0.05, 0.06], "inconclusive"),
])
def test_quality_verdict_gives_every_outcome(loss, task, expected):
    assert quality_verdict(loss, task) == expected


def test_one_seed_is_refused_before_anything_runs(tmp_path):
    r = run_cli("study", "data-quality", "--budget", "small", "--seeds", "0", "--output", str(tmp_path / "o"))
    assert_clean_error(r, "at least two")
    assert not (tmp_path / "o").exists()


@needs_text
def test_study_cleans_pretrains_finetunes_and_decides(tmp_path):
    out = tmp_path / "dq"
    r = run_cli("study", "data-quality", "--budget", "small", "--docs", "60", "--valid-docs", "12",
                "--max-train", "120", "--max-eval", "80", "--output", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    rows = {(x["variant"], x["seed"]): x for x in res["rows"]}
    assert {v for v, _ in rows} == {"clean", "raw_equal", "raw_full"} and {s for _, s in rows} == {0, 1}
    for s in (0, 1):
        assert rows[("raw_equal", s)]["steps"] == rows[("clean", s)]["steps"]  # equal steps = equal tokens
        assert rows[("raw_equal", s)]["tokens"] == pytest.approx(rows[("clean", s)]["tokens"], rel=0.05)
        assert rows[("raw_full", s)]["tokens"] > rows[("clean", s)]["tokens"]  # the larger raw corpus
    for key in ("raw_full", "raw_equal"):
        v = res["verdicts"][key]
        assert v["verdict"] == quality_verdict(v["loss_diffs"], v["task_diffs"])
        assert v["loss_diffs"] == [pytest.approx(rows[(key, s)]["eval_loss"] - rows[("clean", s)]["eval_loss"])
                                   for s in (0, 1)]
    assert res["cleaning"]["noise_removed"] >= 0.8 and res["corpora"]["clean_docs"] < res["corpora"]["raw_docs"]
    assert res["verdict"].startswith("A cleaner corpus beats a larger raw one: ")
    # the same held-out file for every run
    valid = {json.loads((out / f"pt-{v}-s0" / "summary.json").read_text())["corpus"]["valid_tokens"]
             for v in ("clean", "raw_equal", "raw_full")}
    assert len(valid) == 1
