"""Preregistration the code enforces, rules that reach every answer, records that travel with a result and one picture
of every claim: ``ptmlab study preregister`` and the confirmatory / exploratory status (git: the preregistration's
commit an ancestor of the run's start, the same rule hash and options), one-sided bounds for non-inferiority and
equivalence, packed per-example records that give a run's interval again, and the forest plot in a real browser."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ptmlab.studies import load_all, prereg
from ptmlab.studies.verdict import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    Estimate,
    decide_noninferior,
    decide_within,
    detectable_effect,
    one_sided_bound,
    paired_seeds,
)
from tests.browser import find_chromium, open_page
from tests.conftest import ROOT, assert_clean_error, run_cli

STUDIES = load_all()


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "checkout"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.org")
    _git(root, "config", "user.name", "t")
    _git(root, "commit", "-q", "--allow-empty", "-m", "start")
    return root


def _commit(root: Path, message: str) -> str:
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", message)
    return _git(root, "rev-parse", "HEAD")


ARGV = ["--budget", "small", "--seeds", "3,4"]


# ------------------------------------------------------------------------------------------------ preregistration
def test_preregistration_records_the_design_and_the_rule_hash(repo):
    path = prereg.write("unfreezing", ARGV, root=repo, studies=STUDIES)
    assert path == repo / "studies" / "preregistered" / "unfreezing.json"
    record = json.loads(path.read_text())
    assert record["study"] == "unfreezing" and record["budget"] == "small" and record["seeds"] == [3, 4]
    assert record["claim"]["claim"].startswith("gradual unfreezing is not needed")
    assert record["rule"]["margin"] == 0.01 and record["metric"] and record["conditions"]
    assert record["rule"]["hash"] == prereg.rule_hash("unfreezing", STUDIES)
    assert "ptmlab.studies.unfreezing.decide" in record["rule"]["functions"]
    assert "ptmlab.studies.verdict.decide_noninferior" in record["rule"]["functions"]  # what decide calls
    assert record["options"]["seeds"] == ["3", "4"] and "output" not in record["options"]
    if record["data"].get("dev"):  # the task's rows each seed reads, hashed
        assert set(record["data"]["dev"]) == {"3", "4"} and record["data"]["dev"]["3"]["examples"] == 32
    with pytest.raises(Exception, match="--overwrite"):
        prereg.write("unfreezing", ARGV, root=repo, studies=STUDIES)
    assert prereg.write("unfreezing", ARGV, root=repo, overwrite=True, studies=STUDIES) == path


def test_rule_hash_reads_the_code_not_its_comments(monkeypatch):
    """The hash changes with the rule's code or its constants (a margin), never with its docstring or comments."""
    import ptmlab.studies.unfreezing as unf

    before = prereg.rule_hash("unfreezing", STUDIES)
    assert before == prereg.rule_hash("unfreezing", STUDIES) != prereg.rule_hash("compression", STUDIES)
    monkeypatch.setattr(unf, "MARGIN", 0.02)
    assert prereg.rule_hash("unfreezing", STUDIES) != before
    monkeypatch.undo()

    def a(x):
        """One docstring."""
        return x + 1  # a comment

    def b(x):
        """Another docstring, longer."""

        return x + 1

    def c(x):
        return x + 2

    assert prereg._normalised(a).replace(" a ", " b ") == prereg._normalised(b) != prereg._normalised(c).replace(
        " c ", " b ")


def test_a_run_is_confirmatory_only_after_a_committed_preregistration(repo):
    cfg = prereg.study_options("unfreezing", ARGV, STUDIES)
    # nothing preregistered: exploratory
    none = prereg.run_record(prereg.note_start("unfreezing", cfg, root=repo, studies=STUDIES))
    assert none["status"] == "exploratory" and "no preregistration" in none["why"]
    # written but not committed when the run starts: exploratory
    prereg.write("unfreezing", ARGV, root=repo, studies=STUDIES)
    early = prereg.note_start("unfreezing", cfg, root=repo, studies=STUDIES)
    assert prereg.run_record(early)["status"] == "exploratory"
    commit = _commit(repo, "preregister unfreezing")
    state = prereg.note_start("unfreezing", cfg, root=repo, studies=STUDIES)
    good = prereg.run_record(state)
    assert good["status"] == "confirmatory" and good["commit"] == commit == good["head_at_start"]
    assert good["rule_hash"] == good["preregistered_rule_hash"]
    # the run's options differ (other seeds): exploratory, naming them
    other = prereg.study_options("unfreezing", ["--budget", "small", "--seeds", "3,5"], STUDIES)
    moved = prereg.run_record(prereg.note_start("unfreezing", other, root=repo, studies=STUDIES))
    assert moved["status"] == "exploratory" and "seeds" in moved["why"]
    # a preregistration committed after the run started: its commit is no ancestor of the run's start
    later = {**good, "head_at_start": _git(repo, "rev-list", "--max-parents=0", "HEAD")}
    assert prereg.status(later, root=repo)["status"] == "exploratory"
    assert "not an ancestor" in prereg.status(later, root=repo)["why"]
    # the rule that ran is not the preregistered one
    assert prereg.status({**good, "rule_hash": "0" * 64}, root=repo)["status"] == "exploratory"
    # judged again after the rule changed: exploratory, a new preregistration and run needed
    again = prereg.recheck({"preregistration": good}, "unfreezing", STUDIES, root=repo)
    assert again["status"] == "confirmatory"
    changed = prereg.recheck({"preregistration": {**good, "rule_hash": "1" * 64,
                                                  "preregistered_rule_hash": "1" * 64}}, "unfreezing", STUDIES,
                             root=repo)
    assert changed["status"] == "exploratory" and "rule changed after the run" in changed["why"]
    # no git (an installed release): exploratory, saying so
    assert prereg.status({**good, "git": False})["why"] == prereg.NO_GIT
    assert prereg.recheck({}, "unfreezing", STUDIES)["status"] == "exploratory"


def test_write_study_records_the_preregistration_it_started_from(repo, tmp_path):
    """The status a study's results.json carries is the one noted when its options were parsed."""
    from ptmlab.studies.common import write_study
    from ptmlab.studies.unfreezing import CLAIM, validity

    prereg.write("unfreezing", ARGV, root=repo, studies=STUDIES)
    _commit(repo, "preregister unfreezing")
    prereg.note_start("unfreezing", prereg.study_options("unfreezing", ARGV, STUDIES), root=repo, studies=STUDIES)
    v = decide_noninferior(paired_seeds([0.80, 0.81], [0.81, 0.81], "d"), 0.01, above=False)
    write_study(tmp_path / "out", "t", [{"x": 1}], v, claim=CLAIM, budget="small", seeds=[3, 4], validity=validity)
    pre = json.loads((tmp_path / "out" / "results.json").read_text())["preregistration"]
    assert pre["status"] == "confirmatory" and pre["file"] == "studies/preregistered/unfreezing.json"
    assert "root" not in pre


def test_preregister_command(repo):
    done = run_cli("study", "preregister", "unfreezing", "--budget", "small", "--seeds", "3,4", "--root", str(repo))
    assert done.returncode == 0, done.stderr
    assert "rule hash" in done.stdout and "git add" in done.stdout
    assert "ptmlab study unfreezing --budget small --seeds 3,4" in done.stdout
    assert (repo / "studies" / "preregistered" / "unfreezing.json").is_file()
    assert_clean_error(run_cli("study", "preregister", "nosuch", "--root", str(repo)), "not a registered study")
    assert_clean_error(run_cli("study", "preregister", "unfreezing", "--budget", "small", "--seeds", "3,4", "--root",
                               str(repo)), "--overwrite")


def test_the_committed_preregistrations_match_the_code():
    """Every file in studies/preregistered is a preregistration of a registered study whose rule hash is the code's
    today: a rule changed after it was preregistered needs a new preregistration (and a fresh run)."""
    for path in sorted((ROOT / "studies" / "preregistered").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        assert record["study"] == path.stem and record["study"] in STUDIES.names(), path.name
        assert record["rule"]["hash"] == prereg.rule_hash(record["study"], STUDIES), path.name
        import shlex

        from ptmlab.data.loaders import default_glue_dir
        from ptmlab.studies.common import portable

        cfg = prereg.study_options(record["study"], shlex.split(record["command"])[3:], STUDIES)
        # options added to ptmlab after the preregistration count only when set away from their default
        differ = prereg._design_differences(record["options"], portable(prereg.design(cfg)), prereg.defaults(cfg))
        if default_glue_dir() is None:  # no shared data here: its default paths cannot be written as <data>/...
            differ = [k for k in differ if not str(record["options"].get(k)).startswith("<data>/")]
        assert differ == [], path.name


def test_an_option_added_after_the_preregistration_counts_only_away_from_its_default():
    pre = {"lr": 0.0001, "seed": 0}
    assert prereg._design_differences(pre, {"lr": 0.0001, "seed": 0, "new": 16}, {"new": 16}) == []
    assert prereg._design_differences(pre, {"lr": 0.0001, "seed": 0, "new": 32}, {"new": 16}) == ["new"]
    assert prereg._design_differences(pre, {"lr": 0.001, "seed": 0, "new": 16}, {"new": 16}) == ["lr"]
    assert prereg._design_differences(pre, {"lr": 0.0001}, {"seed": 0}) == ["seed"]  # a dropped option differs


# ------------------------------------------------------------------------------------------------ one-sided rules
def _est(value: float, half: float, n: int = 9) -> Estimate:
    return Estimate("d", value, value - half, value + half, n, f"paired t over {n} seeds (95%)", n - 1)


def test_non_inferiority_reads_one_sided_bounds_and_reaches_every_answer():
    from scipy import stats

    e = _est(-0.0169, 0.00846)  # the committed unfreezing numbers
    t95, t975 = stats.t.ppf(0.95, 8), stats.t.ppf(0.975, 8)
    assert one_sided_bound(e, "upper") == pytest.approx(-0.0169 + 0.00846 * t95 / t975)
    assert one_sided_bound(e, "upper") == pytest.approx(-0.0101, abs=1e-4)
    below = [decide_noninferior(_est(v, h), 0.01, above=False).outcome for v, h in
             ((-0.0169, 0.00846), (0.03, 0.005), (0.005, 0.01))]
    assert below == [SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE]
    above = [decide_noninferior(_est(v, h), -0.01).outcome for v, h in ((0.0, 0.005), (-0.03, 0.005), (-0.01, 0.005))]
    assert above == [SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE]
    # an interval whose two-sided end misses the line but whose one-sided bound clears it
    edge = _est(-0.004, 0.0068)
    assert edge.low < -0.01 < one_sided_bound(edge, "lower")
    assert decide_noninferior(edge, -0.01).outcome == SUPPORTED
    v = decide_noninferior(e, 0.01, above=False)
    assert v.detectable_effect == pytest.approx(detectable_effect(e, confidence=0.9))
    assert v.thresholds == (0.01,) and math.isinf(one_sided_bound(_est(0, math.inf), "upper"))


def test_equivalence_is_two_one_sided_tests():
    assert decide_within(_est(0.001, 0.008), 0.01).outcome == SUPPORTED  # 90% interval inside ±0.01
    assert decide_within(_est(0.03, 0.01), 0.01).outcome == NOT_SUPPORTED
    assert decide_within(_est(-0.03, 0.01), 0.01).outcome == NOT_SUPPORTED
    wide = decide_within(_est(0.0, 0.03), 0.01)
    assert wide.outcome == INCONCLUSIVE and "can never fit inside it" in wide.reason
    assert decide_within(_est(0.0, 0.03), 0.01).thresholds == (-0.01, 0.01)


# ------------------------------------------------------------------------------------------------ the records
def test_packed_bits_round_trip_and_refuse_what_is_not_a_bit():
    from ptmlab.studies.evidence import pack_bits, rounded, unpack_bits, unrounded

    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 9, 872):
        x = (rng.random(n) < 0.7).astype(float)
        text = pack_bits(x)
        assert text.startswith(f"{n}:") and np.array_equal(unpack_bits(text), x)
    assert len(pack_bits(np.ones(872))) < 160
    with pytest.raises(ValueError):
        pack_bits([0.5, 1.0])
    back = unrounded(rounded([0.1234567891, math.nan, 1.0]))
    assert back[0] == pytest.approx(0.123457) and math.isnan(back[1])


def test_results_keep_packed_records_verbatim():
    """base64 holds "/": a packed record must not be read as a machine path when results.json is made portable
    (mostly-correct runs pack to runs of "/" that once came out shortened, and would not unpack)."""
    from ptmlab.studies.common import portable
    from ptmlab.studies.evidence import pack_bits, unpack_bits

    rng = np.random.default_rng(1)
    texts = [pack_bits((rng.random(872) < p).astype(float)) for p in (0.8, 0.9, 0.95, 0.99) for _ in range(50)]
    assert sum("/" in t for t in texts) > 100  # the case that matters is common
    kept = portable({"evidence": {"correct": texts}})["evidence"]["correct"]
    assert kept == texts and all(len(unpack_bits(t)) == 872 for t in kept)


def test_a_small_run_carries_the_records_that_give_its_interval_again(tmp_path):
    """layer-ablation at --budget small over two seeds writes each seed's per-example correctness; judged again from
    them, every interval, count and outcome is the run's."""
    from ptmlab.studies.ablation import run_layers
    from ptmlab.studies.rederive import rederive_record
    from tests.test_studies_validity import differences

    out = tmp_path / "la"
    assert run_layers(["--budget", "small", "--seeds", "0,1", "--output", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert set(res["evidence"]) == {"base", "removed"} and len(res["evidence"]["base"]) == 2
    again = rederive_record("layer-ablation", res, STUDIES)
    assert again["recompute"]["status"] == "recomputed"
    assert differences(res, again) == []
    assert res["preregistration"]["status"] == "exploratory"


# ------------------------------------------------------------------------------------------------ the picture
def test_forest_plot_shows_every_claim_and_its_status(tmp_path):
    from ptmlab.studies.dashboard import forest_rows, forest_svg, load_entries, write_dashboard

    entries = load_entries(ROOT / "studies" / "results", STUDIES)
    rows = forest_rows(entries)
    assert {r["study"] for r in rows} == set(STUDIES.names())
    svg = forest_svg(entries)
    assert svg.startswith("<svg") and svg.count('class="forest-row"') == len(rows)
    assert "exploratory" in svg and "could not detect" in svg and "paper" in svg
    committed = (ROOT / "studies" / "results" / "forest.svg").read_text(encoding="utf-8")
    assert committed == svg, "studies/results/forest.svg is out of date: run python scripts/claims_table.py"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](studies/results/forest.svg)" in readme.split("<!-- claims:start -->")[1][:600]
    page = write_dashboard(tmp_path / "dash", ROOT / "studies" / "results", STUDIES)
    html_text = page.read_text(encoding="utf-8")
    assert html_text.index("<svg") < html_text.index("<table>")  # the picture opens the page
    if find_chromium() is None:
        pytest.skip("Chromium is not installed here (bash scripts/setup.sh --test installs it)")
    with open_page(page, tmp_path / "profile") as browser:
        drawn = browser.evaluate("document.querySelectorAll('div.forest svg text.forest-row').length")
        box = json.loads(browser.evaluate("JSON.stringify(document.querySelector('div.forest svg')"
                                          ".getBoundingClientRect())"))
        tags = browser.evaluate("Array.from(document.querySelectorAll('span.status')).map(s => s.textContent)")
        shot = browser.screenshot(tmp_path / "forest.png")
        errors = list(browser.errors)
    assert drawn == len(rows) and box["width"] > 600 and box["height"] > 30 * len(rows)
    assert set(tags) <= {"confirmatory", "exploratory"} and len(tags) == len(STUDIES.names())
    assert not errors and shot.stat().st_size > 10_000
    assert re.search(r"exploratory \(no preregistration", html_text)
