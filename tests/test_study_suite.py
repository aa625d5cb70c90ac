"""``ptmlab study all`` (every study, resuming finished ones, a failing study reported while the others run) and
``ptmlab study collect`` (what is committed), on a registry of small stand-in studies that write their results
with the real ``write_study``, plus one real study end to end through the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ptmlab.commands.study import SUITE_COMMANDS
from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry
from ptmlab.studies import load_all
from ptmlab.studies.common import write_study
from ptmlab.studies.suite import collect, pack_runs, restore_runs, run_all, summary_rows
from ptmlab.studies.verdict import Claim, decide_above, paired_seeds
from tests.conftest import assert_clean_error, run_cli


def _registry(calls: list[str]) -> Registry:
    """Five stand-in studies: two that finish (one on the verdict contract, one with a sentence), one that raises,
    one that rejects its input, one that returns 0 without writing results."""
    reg: Registry = Registry("study")

    def args(argv):
        return dict(zip(argv[::2], argv[1::2], strict=False)), "--overwrite" in argv

    @reg.register("good")
    def good(argv):
        a, _ = args(argv)
        calls.append(f"good:{a['--budget']}")
        est = paired_seeds([0.9, 0.8, 0.85], [0.7, 0.7, 0.72], "gain")
        from ptmlab.report.html import new_figure

        fig, ax = new_figure(2, 2)
        ax.plot([0, 1], [0.7, 0.9])
        write_study(Path(a["--output"]), "good", [{"gain": est.value}], decide_above(est), [(fig, "gain", "gain")],
                    claim=Claim("good", "c", "Q1", "", "r"), budget=a["--budget"], seeds=[0, 1, 2])
        return 0

    @reg.register("old-style")
    def old_style(argv):
        a, _ = args(argv)
        calls.append("old-style")
        write_study(Path(a["--output"]), "old", [{"x": 1}], "a sentence verdict")
        return 0

    @reg.register("broken")
    def broken(argv):
        calls.append("broken")
        raise RuntimeError("boom\nsecond line")

    @reg.register("bad-input")
    def bad_input(argv):
        calls.append("bad-input")
        raise PtmlabError("--task 'x' is not a task")

    @reg.register("silent")
    def silent(argv):
        calls.append("silent")
        return 0

    return reg


def test_suite_runs_every_study_and_reports_failures(tmp_path, capsys):
    calls: list[str] = []
    reg = _registry(calls)
    runs = run_all(tmp_path, "small", studies=reg)
    status = {r.name: (r.status, r.outcome) for r in runs}
    assert status == {"good": ("done", "supported"), "old-style": ("done", "unrated"), "broken": ("failed", ""),
                      "bad-input": ("failed", ""), "silent": ("failed", "")}
    err = {r.name: r.error for r in runs}
    assert err["broken"].startswith("RuntimeError: boom second line (test_study_suite.py:")
    assert err["bad-input"] == "--task 'x' is not a task" and "without writing" in err["silent"]
    assert calls == ["good:small", "old-style", "broken", "bad-input", "silent"]
    suite = json.loads((tmp_path / "suite.json").read_text())
    assert suite["budget"] == "small" and suite["studies"]["broken"]["status"] == "failed"
    # a study that recorded no budget gets the suite's
    assert json.loads((tmp_path / "old-style" / "results.json").read_text())["run"]["budget"] == "small"
    assert [r["status"] for r in summary_rows(runs)] == ["done", "done", "failed", "failed", "failed"]
    assert "study broken failed: RuntimeError: boom" in capsys.readouterr().out

    calls.clear()  # resumed: finished studies are skipped, failed ones run again
    again = {r.name: r.status for r in run_all(tmp_path, "small", studies=reg)}
    assert again["good"] == again["old-style"] == "resumed"
    assert calls == ["broken", "bad-input", "silent"]

    calls.clear()  # another budget reruns a finished study; --only picks studies in registry order
    runs = run_all(tmp_path, "default", only=["old-style", "good"], studies=reg)
    assert [r.name for r in runs] == ["good", "old-style"] and calls == ["good:default", "old-style"]
    assert json.loads((tmp_path / "good" / "results.json").read_text())["run"]["budget"] == "default"

    calls.clear()
    run_all(tmp_path, "default", only=["good"], overwrite=True, studies=reg)
    assert calls == ["good:default"]


def test_suite_rejects_bad_input(tmp_path):
    reg = _registry([])
    with pytest.raises(PtmlabError, match="unknown study 'godo'.*did you mean 'good'"):
        run_all(tmp_path, "small", only=["godo"], studies=reg)
    with pytest.raises(PtmlabError, match="--budget 'huge'"):
        run_all(tmp_path, "huge", studies=reg)
    (tmp_path / "f").write_text("x")
    with pytest.raises(PtmlabError, match="is a file"):
        run_all(tmp_path / "f", "small", studies=reg)


def test_collect_copies_results_and_plots_only(tmp_path):
    reg = _registry([])
    src, dst = tmp_path / "suite", tmp_path / "committed"
    run_all(src, "small", only=["good", "old-style"], studies=reg)
    (dst / "good" / "plots").mkdir(parents=True)
    (dst / "good" / "plots" / "stale.png").write_bytes(b"old")
    assert collect(src, dst) == ["good", "old-style"]
    files = sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*") if p.is_file())
    assert files == ["good/plots/gain.png", "good/results.json", "old-style/results.json"]
    assert (dst / "good" / "results.json").read_bytes() == (src / "good" / "results.json").read_bytes()
    with pytest.raises(PtmlabError, match="no results.json.*for broken"):
        collect(src, dst, only=["broken"])
    big = src / "good" / "plots" / "huge.png"
    big.write_bytes(b"\0" * 1_000_001)
    with pytest.raises(PtmlabError, match="over the 1,000,000 bytes"):
        collect(src, dst, only=["good"])
    assert (dst / "good" / "plots" / "gain.png").is_file()  # a refused copy leaves the committed results alone
    with pytest.raises(PtmlabError, match="no study results"):
        collect(tmp_path / "committed" / "good" / "plots", tmp_path / "x")


def test_collect_rounds_the_per_example_values_of_a_record_over_the_limit(tmp_path):
    """A results.json over 1 MB is committed with its per-example values rounded to evidence.DIGITS decimals (what
    evidence keeps), the rest untouched; one still over the limit is refused."""
    import json

    src, dst = tmp_path / "suite", tmp_path / "committed"
    rows = [{"seed": s, "tau": 1 / 3 + i * 1e-9, "tvd": 2 / 7} for s in range(3) for i in range(6_000)]
    (src / "big").mkdir(parents=True)
    (src / "big" / "results.json").write_text(json.dumps({"outcome": "supported", "score": 1 / 3, "examples": rows}))
    assert (src / "big" / "results.json").stat().st_size > 1_000_000
    assert collect(src, dst) == ["big"]
    kept = json.loads((dst / "big" / "results.json").read_text())
    assert (dst / "big" / "results.json").stat().st_size <= 1_000_000
    assert kept["examples"][5] == {"seed": 0, "tau": 0.333333, "tvd": 0.285714} and kept["score"] == 1 / 3
    assert "rounded to 6 decimals" in kept["compacted"] and len(kept["examples"]) == 18_000
    (src / "big" / "results.json").write_text(json.dumps({"examples": [{"t": "x" * 100}] * 20_000}))
    with pytest.raises(PtmlabError, match="over the 1,000,000 bytes"):
        collect(src, dst)


def test_reserved_words_are_not_study_names():
    assert not set(SUITE_COMMANDS) & set(load_all().names())


def test_study_all_cli_runs_a_real_study_and_resumes(tmp_path, capsys):
    out = tmp_path / "studies"
    proc = run_cli("study", "all", "--budget", "small", "--only", "layer-ablation", "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    res = json.loads((out / "layer-ablation" / "results.json").read_text())
    assert res["rows"] and res["run"]["budget"] == "small"
    from tests.test_studies_registry import check_judged

    check_judged("layer-ablation", res)  # the verdict's values against its own numbers, not only its shape
    summary = proc.stdout[proc.stdout.index("studies in"):]
    assert re.search(r"^layer-ablation\s+done", summary, re.M), summary
    capsys.readouterr()
    assert SUITE_COMMANDS["all"](["--budget", "small", "--only", "layer-ablation", "--output", str(out)]) == 0
    assert re.search(r"^layer-ablation\s+resumed", capsys.readouterr().out, re.M)
    assert SUITE_COMMANDS["dashboard"](["--output", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert page.count('<tr class="study"') == len(load_all().names())
    assert 'src="layer-ablation/plots/' in page
    committed = tmp_path / "committed"
    assert SUITE_COMMANDS["collect"](["--from", str(out), "--to", str(committed)]) == 0
    assert (committed / "layer-ablation" / "results.json").is_file()
    assert not (committed / "layer-ablation" / "report.html").exists()


def test_study_all_cli_errors(tmp_path):
    assert_clean_error(run_cli("study", "all", "--only", "no-such-study", "--output", str(tmp_path)),
                       "no-such-study")
    with pytest.raises(SystemExit) as e:
        SUITE_COMMANDS["all"](["--budget", "huge"])
    assert e.value.code == 2
    with pytest.raises(PtmlabError, match="--from"):
        SUITE_COMMANDS["collect"](["--from", str(tmp_path / "none")])


def test_study_all_command_exits_1_when_a_study_failed(tmp_path, monkeypatch, capsys):
    import ptmlab.studies
    from ptmlab.commands.study import run_all as command

    monkeypatch.setattr(ptmlab.studies, "load_all", lambda: _registry([]))
    assert command(["--budget", "small", "--only", "good,broken", "--output", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "1 of 2 studies failed: broken" in out and re.search(r"^good\s+done", out, re.M)
    assert command(["--budget", "small", "--only", "good", "--output", str(tmp_path)]) == 0


def test_a_finished_variant_is_reused_only_with_the_same_settings(tmp_path):
    """Resuming reuses a finished run made with the same settings; one made with other settings (an earlier
    budget) is a one-line error naming the difference, and ``--overwrite`` redoes it."""
    import dataclasses

    from ptmlab.studies.common import SMALL_FINETUNE, StudyArgs, finetune_variant, parse_study_args

    a = parse_study_args("t", StudyArgs, ["--budget", "small", "--task", "tweets"], small=SMALL_FINETUNE)
    out = tmp_path / "variant"
    first = finetune_variant(a, out, seed=0)
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert finetune_variant(a, out, seed=0) == first
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(PtmlabError, match=r"other settings \(max_train 64 there, 32 now\).*--overwrite"):
        finetune_variant(dataclasses.replace(a, max_train=32), out, seed=0)
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    redone = finetune_variant(dataclasses.replace(a, max_train=32, overwrite=True), out, seed=0)
    assert redone["train_examples"] == 32 and first["train_examples"] == 64


def test_tables_of_mixed_rows_show_every_rows_columns(tmp_path, capsys):
    """A study whose table holds two kinds of row (meta-kd: per-domain scores, then leave-one-out rows) must show
    the second kind's numbers too, on stdout and in the HTML report."""
    from ptmlab.report.html import Report
    from ptmlab.report.table import print_table

    rows = [{"seed": 0, "domain": "books", "meta_kd": 0.8125}, {"seed": 0, "held_out": "dvd", "tfidf_lr": 0.7731}]
    print_table(rows)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["seed", "domain", "meta_kd", "held_out", "tfidf_lr"]
    assert out[2].split() == ["0", "dvd", "0.7731"]
    Report("t").table(rows).write(tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert "<th>tfidf_lr</th>" in page and "0.7731" in page


def test_studies_are_listed_in_one_order_whatever_was_imported_first():
    """``ptmlab study --help`` and docs/cli.md list the studies in STUDY_MODULES' order even when a later study
    module was imported before the registry was loaded (the CLI reference test runs after other tests did)."""
    import subprocess
    import sys

    code = ("import ptmlab.studies.attention_explanation, ptmlab.studies.ablation\n"
            "from ptmlab.studies import load_all\nprint(','.join(load_all().names()))")
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    plain = subprocess.run([sys.executable, "-c", code.split("\n", 1)[1]], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert first == plain and first.split(",")[0] == "unfreezing" and len(first.split(",")) > 20


def test_finished_runs_move_to_another_machine_and_are_reused_there(tmp_path, capsys):
    """``collect --runs`` packs a study's finished runs (records, no weights; an unfinished run is left out) and
    ``restore`` puts them under another suite directory, where the study reuses them instead of training again;
    a run already finished there is never overwritten."""
    from ptmlab.studies.common import SMALL_FINETUNE, StudyArgs, dev_correct, finetune_variant, parse_study_args

    a = parse_study_args("t", StudyArgs, ["--budget", "small", "--task", "tweets"], small=SMALL_FINETUNE)
    one, two, packed = tmp_path / "one", tmp_path / "two", tmp_path / "partial"
    first = finetune_variant(a, one / "s" / "grid" / "seed0", seed=0)
    (one / "s" / "grid" / "seed1").mkdir()
    (one / "s" / "grid" / "seed1" / "config.yaml").write_text("seed: 1\n")  # started, never finished
    assert SUITE_COMMANDS["collect"](["--runs", "--from", str(one), "--to", str(packed), "--only", "s"]) == 0
    assert "s (1 finished runs)" in capsys.readouterr().out
    files = sorted(p.relative_to(packed).as_posix() for p in packed.rglob("*") if p.is_file())
    assert files == [f"s/grid/seed0/{f}" for f in ("config.yaml", "metrics.jsonl", "predictions_dev.json",
                                                   "summary.json")]
    assert SUITE_COMMANDS["restore"](["--from", str(packed), "--to", str(two)]) == 0
    assert "s: 1 finished runs restored" in capsys.readouterr().out
    moved = two / "s" / "grid" / "seed0"
    assert finetune_variant(a, moved, seed=0) == first
    assert not (moved / "model.safetensors").exists()  # reused as finished, not trained again
    assert dev_correct(moved) == dev_correct(one / "s" / "grid" / "seed0") and dev_correct(moved)
    import dataclasses

    with pytest.raises(PtmlabError, match="other settings"):  # a restored run still answers only to its settings
        finetune_variant(dataclasses.replace(a, max_train=32), moved, seed=0)
    (moved / "summary.json").write_text('{"kept": true}')
    assert restore_runs(packed, two) == {"s": (0, 1)}
    assert json.loads((moved / "summary.json").read_text()) == {"kept": True}
    (one / "s" / "grid" / "seed0" / "metrics.jsonl").unlink()  # packed again: the packed copy follows the run's
    assert pack_runs(one, packed, ["s"]) == {"s": 1}
    assert not (packed / "s" / "grid" / "seed0" / "metrics.jsonl").exists()
    assert (packed / "s" / "grid" / "seed0" / "summary.json").is_file()
    with pytest.raises(PtmlabError, match="needs --only"):
        pack_runs(one, packed, [])
    with pytest.raises(PtmlabError, match="no finished run under .*nothing to pack for none"):
        pack_runs(one, packed, ["none"])
    with pytest.raises(PtmlabError, match="no packed runs .* for x \\(packed: s\\)"):
        restore_runs(packed, two, ["x"])
    with pytest.raises(PtmlabError, match="is not a directory"):
        restore_runs(tmp_path / "missing", two)
