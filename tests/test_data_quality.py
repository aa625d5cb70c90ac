"""Study data-quality (Q4): the verdict rule on synthetic numbers for every outcome, and the study end to end on
the shared text (tiny model, two seeds, a few steps)."""

from __future__ import annotations

import json

import pytest

from ptmlab.studies.data_quality import decide
from tests.conftest import SHARED, assert_clean_error, run_cli

needs_text = pytest.mark.skipif(not (SHARED / "text" / "wikitext-2" / "valid.txt").is_file(),
                                reason=f"shared text not found at {SHARED / 'text'} (shared data is absent)")


# the verdict rule on synthetic numbers (every outcome): tests/test_study_rules_b.py


def test_repeated_seeds_are_refused_before_anything_runs(tmp_path):
    r = run_cli("study", "data-quality", "--budget", "small", "--seeds", "0,0", "--output", str(tmp_path / "o"))
    assert_clean_error(r, "distinct")
    assert not (tmp_path / "o").exists()


@needs_text
def test_study_cleans_pretrains_finetunes_and_decides(tmp_path):
    out = tmp_path / "dq"
    r = run_cli("study", "data-quality", "--budget", "small", "--docs", "60", "--valid-docs", "12",
                "--max-train", "120", "--max-eval", "80", "--seeds", "0,1", "--output", str(out))
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
        assert v["verdict"] == decide(v["loss_diffs"], v["task_diffs"]).outcome
        assert v["loss_diffs"] == [pytest.approx(rows[(key, s)]["eval_loss"] - rows[("clean", s)]["eval_loss"])
                                   for s in (0, 1)]
    assert res["cleaning"]["noise_removed"] >= 0.8 and res["corpora"]["clean_docs"] < res["corpora"]["raw_docs"]
    assert res["rule"]["outcome"] == res["verdicts"]["raw_full"]["verdict"] and res["claim"]["study"] == "data-quality"
    assert (res["outcome"] == "cannot test") == any(not c["met"] for c in res["validity"])
    # every run recorded its eval loss and its held-out text's unigram cross-entropy; the condition reads them
    unigram = next(c for c in res["validity"] if "unigram" in c["condition"])
    assert all(x["unigram_entropy"] > 0 for x in res["rows"])
    assert unigram["value"] == pytest.approx(max(x["eval_loss"] / x["unigram_entropy"] for x in res["rows"]))
    assert "a cleaner corpus beats a larger raw one, downstream: " in res["verdict"] and res["run"]["seeds"] == [0, 1]
    # the same held-out file for every run
    valid = {json.loads((out / f"pt-{v}-s0" / "summary.json").read_text())["corpus"]["valid_tokens"]
             for v in ("clean", "raw_equal", "raw_full")}
    assert len(valid) == 1
