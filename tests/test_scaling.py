"""Scaling sweeps: power-law fits recover known exponents with honest uncertainty, the Q8/Q19 rules give every
outcome on synthetic numbers, and a real 3 sizes x 3 budgets sweep (tiny models, a few steps) is planned with the
engine's FLOP accounting, trained, restarted without retraining, shared by two workers, and reported."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from ptmlab.core.config import build_config
from ptmlab.core.errors import PtmlabError
from ptmlab.scaling.analysis import faster_verdict, optimal_size_verdict, reach
from ptmlab.scaling.config import ScaleConfig, parse_size
from ptmlab.scaling.fit import fit_power_law, isoflop_optimum, lower_envelope
from tests.conftest import assert_clean_error, run_cli

WORDS = ("the cat dog bird sees likes follows calls helps a an river garden house ball small red old new quiet "
         "friend teacher brother neighbour city morning evening road tree").split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("scale-corpus")
    rng = random.Random(0)
    docs = [" ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 9))) + "." for _ in range(8))
            for _ in range(120)]
    (d / "text.txt").write_text("\n\n".join(docs) + "\n")
    return d / "text.txt"


# ------------------------------------------------------------------------------------------------ fits
def test_power_law_fit_recovers_the_exponent_with_uncertainty_that_covers_it():
    rng = np.random.default_rng(0)
    x = np.geomspace(1e6, 1e9, 12)
    y = 40.0 * x ** -0.12 * np.exp(rng.normal(0, 0.01, len(x)))
    f = fit_power_law(x, y)
    assert f.exponent == pytest.approx(0.12, abs=0.01)
    assert 0 < f.stderr < 0.01 and f.ci_low < 0.12 < f.ci_high
    assert f.predict([1e7])[0] == pytest.approx(40.0 * 1e7 ** -0.12, rel=0.05)
    exact = fit_power_law([1.0, 10.0], [2.0, 1.0])  # two points: exact, uncertainty unknown (not zero)
    assert exact.exponent == pytest.approx(math.log10(2)) and math.isnan(exact.stderr)
    with pytest.raises(PtmlabError, match="two distinct"):
        fit_power_law([3.0, 3.0], [1.0, 2.0])


def test_envelope_and_isoflop_optimum():
    pts = [(1, 5.0), (2, 4.0), (2, 4.5), (3, 4.2), (4, 3.0)]
    assert lower_envelope(pts) == [(1, 5.0), (2, 4.0), (4, 3.0)]
    n = [1e3, 1e4, 1e5]
    opt, edge = isoflop_optimum(n, [4.0, 3.0, 3.5])  # parabola in log N: vertex between 1e3 and 1e5, nearer 1e4
    assert not edge and 1e3 < opt < 1e5 and abs(math.log10(opt) - 4) < 0.5
    assert isoflop_optimum(n, [3.0, 3.5, 4.0]) == (1e3, True)


# ------------------------------------------------------------------------------------------------ rules
def _cells(best: dict[float, int]) -> dict:
    """Budgets -> 3 sizes where ``best[budget]`` wins by 0.2 nats."""
    return {b: {n: (3.0 if n == best[b] else 3.2, 0.0) for n in (10, 100, 1000)} for b in best}


def test_q8_rule_gives_every_outcome():
    assert optimal_size_verdict(_cells({1e9: 10, 1e10: 100, 1e11: 100}), 0.02)["verdict"] == "supported"
    assert optimal_size_verdict(_cells({1e9: 100, 1e10: 100, 1e11: 100}), 0.02)["verdict"] == "not supported"
    assert optimal_size_verdict(_cells({1e9: 100, 1e10: 10, 1e11: 10}), 0.02)["verdict"] == "not supported"
    edge = optimal_size_verdict(_cells({1e9: 1000, 1e10: 1000}), 0.02)
    assert edge["verdict"] == "inconclusive" and "above" in edge["reason"]
    ties = _cells({1e9: 10, 1e10: 100})
    ties[1e10][10] = (3.01, 0.0)  # within the tolerance of the best: the optimum at 1e10 may still be 10
    assert optimal_size_verdict(ties, 0.02)["verdict"] == "inconclusive"
    noisy = _cells({1e9: 10, 1e10: 100})
    noisy[1e10] = {n: (v, 0.2) for n, (v, _) in noisy[1e10].items()}  # seeds disagree: 2 SE swallow the gap
    assert optimal_size_verdict(noisy, 0.02)["verdict"] == "inconclusive"
    assert optimal_size_verdict({1e9: {10: (3.0, 0.0)}}, 0.02)["verdict"] == "inconclusive"


def test_q19_rule_and_interpolation():
    curve = [{"tokens": 0, "eval_loss": 8.0}, {"tokens": 100, "eval_loss": 6.0}, {"tokens": 200, "eval_loss": 5.0}]
    assert reach(curve, 5.5, "tokens") == pytest.approx(150.0)
    assert reach(curve, 4.0, "tokens") is None
    assert faster_verdict({10: 1000, 100: 600, 1000: 300}, 0.1)["verdict"] == "supported"
    assert faster_verdict({10: 1000, 100: 1200, 1000: 1500}, 0.1)["verdict"] == "not supported"
    assert faster_verdict({10: 1000, 100: 980, 1000: 950}, 0.1)["verdict"] == "inconclusive"  # within 10%
    assert faster_verdict({10: 1000, 1000: 500}, 0.1, resolution=600)["verdict"] == "inconclusive"
    assert faster_verdict({10: 1000, 1000: None}, 0.1)["verdict"] == "inconclusive"


def test_sizes_and_bad_options():
    s = parse_size("2x64")
    assert (s.layers, s.hidden, s.heads, s.ffn) == (2, 64, 4, 256)
    assert parse_size("1x48x3").heads == 3
    for bad, needle in (("2by64", "LAYERSxHIDDEN"), ("2x30x4", "multiple")):
        with pytest.raises(PtmlabError, match=needle):
            parse_size(bad)
    with pytest.raises(PtmlabError, match="budget 'lots'"):
        build_config(ScaleConfig, {"files": ["x"], "budgets": ["lots"]})
    with pytest.raises(PtmlabError, match="listed twice"):
        build_config(ScaleConfig, {"files": ["x"], "sizes": ["1x16", "1x16"]})


# ------------------------------------------------------------------------------------------------ a real sweep
SWEEP = ["--sizes", "1x16,2x32,2x64", "--budgets", "4e8,1.2e9,3e9", "--block-size", "16", "--batch-size", "8",
         "--evals", "4", "--eval-blocks", "16", "--valid-fraction", "0.1", "--doc-sep", "blank"]


def test_sweep_trains_restarts_without_retraining_and_reports(corpus, tmp_path):
    out = tmp_path / "sweep"
    r = run_cli("scale", "--files", str(corpus), "--output", str(out), *SWEEP)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    plan = json.loads((out / "sweep.json").read_text())
    done = [row for row in res["rows"] if row["status"] == "done"]
    assert len({row["size"] for row in done}) == 3 and len({row["budget"] for row in done}) == 3
    for row in done:  # each run took the planned steps (the engine's accounting) and spent its budget
        spec = next(s for s in plan["runs"] if s["name"] == row["name"])
        assert row["steps"] == spec["steps"] and row["flops"] <= row["budget"]
        per_step = spec["flops_per_token"] * spec["tokens_per_step"]  # short by under a step + partial batches
        assert row["flops"] > row["budget"] - per_step - 0.05 * row["budget"]
    assert sorted({row["params"] for row in done}) == [row["params"] for row in done[:3]]  # sorted by size
    fit = res["fit_compute"]
    assert fit["n"] >= 4 and fit["exponent"] > 0 and fit["stderr"] > 0
    # the verdicts follow the sweep's own numbers: Q8 from the final losses per budget and size (one seed: no
    # standard error), Q19 from the tokens / seconds each size needed to reach the target loss
    cells: dict = {}
    for row in done:
        cells.setdefault(row["budget"], {})[row["params"]] = (row["eval_loss"], 0.0)
    assert res["q8"]["verdict"] == optimal_size_verdict(cells, 0.02)["verdict"] and "Q8" in res["verdict"]
    for key in ("tokens", "seconds"):
        costs = {r["params"]: r[key] for r in res["q19"]["reach"] if r.get(key) is not None}
        q19 = res["q19"][key]
        if len(costs) < 2:
            assert q19["verdict"] == "inconclusive"
            continue
        ratio = costs[max(costs)] / costs[min(costs)]
        assert q19["ratio"] == pytest.approx(ratio)
        if ratio >= 1:
            assert q19["verdict"] == "not supported"
        elif ratio > 0.9:  # inside the --margin 0.1
            assert q19["verdict"] == "inconclusive"
        else:
            assert q19["verdict"] in ("supported", "inconclusive")  # the evaluation interval decides
    assert all(row["unigram_entropy"] > 0 for row in done)  # each run's held-out unigram cross-entropy
    assert {p.name for p in (out / "plots").iterdir()} == {"frontier.png", "loss_vs_tokens.png", "isoflop.png"}
    assert not list((out / "runs").glob("*.lock"))
    first = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/summary.json")}
    r = run_cli("scale", "--files", str(corpus), "--output", str(out), *SWEEP)  # a restart retrains nothing
    assert r.returncode == 0, r.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/summary.json")} == first
    r = run_cli("scale", "--files", str(corpus), "--output", str(out), *SWEEP, "--lr", "1e-2")
    assert_clean_error(r, "lr", "--overwrite")


def test_two_workers_share_a_sweep_and_a_stale_lock_is_taken_over(corpus, tmp_path):
    from ptmlab.scaling.sweep import prepare_sweep, run_workers, try_lock

    cfg = build_config(ScaleConfig, {"files": [str(corpus)], "output": str(tmp_path / "s"), "sizes": ["1x16", "2x32"],
                                     "budgets": ["4e8"], "seeds": ["0", "1"], "block_size": 16, "batch_size": 8,
                                     "evals": 2, "eval_blocks": 8, "valid_fraction": 0.1, "workers": 2})
    plan = prepare_sweep(cfg)
    held = Path(cfg.output) / "runs" / f"{plan['runs'][0]['name']}.lock"
    held.write_text(json.dumps({"pid": 2 ** 22 + 12345, "host": __import__("socket").gethostname()}))  # dead pid
    names = run_workers(Path(cfg.output), 2)
    assert sorted(names) == sorted(s["name"] for s in plan["runs"])  # every run trained exactly once
    assert not list((Path(cfg.output) / "runs").glob("*.lock"))
    assert try_lock(held) and not try_lock(held)  # a live holder keeps its lock


def test_bad_input_is_one_line_and_writes_nothing(corpus, tmp_path):
    out = tmp_path / "o"
    r = run_cli("scale", "--files", str(corpus), "--output", str(out), *SWEEP[:2], "--budgets", "10")
    assert_clean_error(r, "below one training step", "1x16")
    assert not out.exists()
    r = run_cli("scale", "--files", str(corpus), "--output", str(out), "--sizes", "1x16", "--budgets", "1e8,1e12",
                "--block-size", "16", "--batch-size", "8", "--evals", "1", "--eval-blocks", "4",
                "--valid-fraction", "0.1", "--doc-sep", "blank", "--objective", "nope")
    assert_clean_error(r, "nope")
    assert not out.exists()
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    r = run_cli("scale", "--files", str(empty), "--output", str(out), *SWEEP)
    assert r.returncode == 2 and "Traceback" not in r.stderr and not out.exists()
    r = run_cli("scale", "--output", str(out), "--sizes", "1x16")
    assert_clean_error(r, "--files")


def test_a_budget_below_a_larger_size_is_a_reported_skip(corpus):
    from ptmlab.scaling.plan import plan_sweep

    cfg = build_config(ScaleConfig, {"files": [str(corpus)], "sizes": ["1x16", "2x64"], "budgets": ["1e6", "1e9"]})
    costs = {"1x16": {"flops_per_token": 100.0, "tokens_per_step": 1000, "params": 10},
             "2x64": {"flops_per_token": 1e4, "tokens_per_step": 1000, "params": 1000}}
    runs = {(r.size, r.budget): r for r in plan_sweep(cfg, costs)}
    assert runs[("1x16", 1e6)].steps == 10 and not runs[("1x16", 1e6)].skip
    assert runs[("2x64", 1e6)].steps == 0 and "below one step of size 2x64" in runs[("2x64", 1e6)].skip
    assert runs[("2x64", 1e9)].steps == 100 and runs[("2x64", 1e9)].eval_steps == 100 // cfg.evals
