"""The studies' dashboard: one row per registered study from results written by the real ``write_study``, opened
in a real headless Chromium (every image loaded, no console error, a screenshot), and the README's Claims table
generated from the same results."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json
from ptmlab.studies import load_all
from ptmlab.studies.common import write_study
from ptmlab.studies.dashboard import END, START, load_entries, markdown_table, update_readme, write_dashboard
from ptmlab.studies.verdict import Claim, bootstrap_mean, decide_above, decide_within, paired_seeds
from tests.browser import find_chromium, open_page
from tests.conftest import ROOT, assert_clean_error, run_cli

STUDIES = load_all()
NAMES = STUDIES.names()


def _figure(title: str, ys: list[float]):
    from ptmlab.report.html import new_figure

    fig, ax = new_figure(3.0, 2.0)
    ax.plot(range(len(ys)), ys, marker="o")
    ax.set_title(title)
    return fig


def _write_results(root: Path) -> dict:
    """Results for four registered studies through the real ``write_study``: supported (paired seeds), not
    supported (within a margin), inconclusive (one seed), unrated (a verdict sentence); a fifth failed in a suite.
    Returns {study: (outcome, estimate or None, number of plots)}."""
    a, b, c, d, failed = NAMES[:5]
    expected = {}
    est = paired_seeds([0.84, 0.83, 0.85], [0.80, 0.80, 0.81], "accuracy gain over the baseline")
    v = decide_above(est, 0.0)
    write_study(root / a, f"Study {a}", [{"seed": s, "gain": g} for s, g in enumerate([0.04, 0.03, 0.04])], v,
                [(_figure("gain", [0.04, 0.03, 0.04]), "gain", "gain per seed"),
                 (_figure("scores", [0.80, 0.84]), "scores", "scores")],
                claim=Claim(a, "the method beats the baseline", "Q99; Someone et al. 2020", "BERT-base +1.2 points",
                            "paired t over 3 seeds; supported when the interval is above 0"),
                budget="full", seeds=[0, 1, 2])
    expected[a] = (v.outcome, est, 2)
    est = bootstrap_mean([0.1, -0.2] * 50 + [0.5] * 30, "accuracy change when removed")
    v = decide_within(est, 0.01)
    write_study(root / b, f"Study {b}", [{"unit": 0, "delta": est.value}], v,
                [(_figure("delta", [0.1, -0.2, 0.5]), "delta", "delta")],
                claim=Claim(b, "removing it does not hurt", "Q98", "", "bootstrap; within ±0.01"),
                budget="default", seeds=[0])
    expected[b] = (v.outcome, est, 1)
    est = paired_seeds([0.7], [0.6], "gain")
    v = decide_above(est, 0.0)
    write_study(root / c, f"Study {c}", [{"x": 1}], v, claim=Claim(c, "one seed decides nothing", "Q97", "", "r"),
                budget="small", seeds=[0])
    expected[c] = (v.outcome, est, 0)
    write_study(root / d, f"Study {d}", [{"x": 1}], "the old style verdict. It has two sentences.",
                [(_figure("old", [1.0, 2.0]), "old", "old")])
    expected[d] = ("unrated", None, 1)
    atomic_write_json(root / "suite.json", {"budget": "small", "studies": {
        failed: {"status": "failed", "seconds": 1.0, "outcome": "", "error": "RuntimeError: boom (x.py:3)"}}})
    expected[failed] = ("failed", None, 0)
    return expected


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    return root, _write_results(root)


def test_expected_outcomes_cover_every_kind(results):
    _, expected = results
    assert sorted(o for o, _, _ in expected.values()) == sorted(
        ["supported", "not supported", "inconclusive", "unrated", "failed"])


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows: list[dict] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "study":
            self.rows.append(a)
        if tag == "img":
            self.links.append(a["src"])
        if tag == "a":
            self.links.append(a["href"])


def test_dashboard_has_one_row_per_study_with_its_numbers(results, tmp_path):
    root, expected = results
    page = write_dashboard(tmp_path / "dash", root)
    text = page.read_text()
    parsed = _Page()
    parsed.feed(text)
    assert [r["id"] for r in parsed.rows] == NAMES
    outcome = {r["id"]: r["data-outcome"] for r in parsed.rows}
    for name in NAMES:
        assert outcome[name] == expected.get(name, ("not run",))[0], name
    for link in parsed.links:  # every thumbnail and link resolves beside the page
        assert (page.parent / link).is_file(), link
    assert sum(link.endswith(".png") for link in parsed.links) == 2 * sum(n for _, _, n in expected.values())
    assert not (page.parent / NAMES[0] / "report.html").samefile(root / NAMES[0] / "report.html")
    for name, (_, est, _) in expected.items():
        row = re.search(rf'<tr class="study" id="{re.escape(name)}".*?</tr>', text).group(0)
        if est is not None and est.n > 1:
            assert f"{est.value:.4f} [{est.low:.4f}, {est.high:.4f}]" in row
            assert est.method in row
        elif est is not None:
            assert "(no interval)" in row
    assert "RuntimeError: boom" in text and "BERT-base +1.2 points" in text and "full; seeds 0, 1, 2" in text


def test_dashboard_reads_its_own_output_directory_in_place(results, tmp_path):
    import shutil

    root, _ = results
    d = tmp_path / "suite"
    shutil.copytree(root, d)
    before = sorted(p.relative_to(d) for p in d.rglob("*"))
    page = write_dashboard(d)
    assert sorted(p.relative_to(d) for p in d.rglob("*")) == sorted(before + [Path("index.html")])
    assert page.read_text().count('<tr class="study"') == len(NAMES)


def test_every_study_has_a_claim_even_without_results(tmp_path):
    entries = load_entries(tmp_path)
    assert [e.study for e in entries] == NAMES
    assert all(e.outcome == "not run" and e.claim for e in entries)


def test_underpowered_only_where_the_rule_left_the_claim_open():
    from ptmlab.studies.dashboard import Entry

    def power(outcome: str) -> str:
        return Entry("s", outcome, "c", "src", detectable_effect=0.0112, paper_effect=0.01).power_text()

    assert power("inconclusive") == "underpowered: could detect ±0.0112, the paper reports 0.0100"
    # an interval that fitted inside the margin decided the rule: not underpowered, whatever its half-width
    assert power("supported") == "could detect ±0.0112 (the paper reports 0.0100)"
    assert power("not supported") == "could detect ±0.0112 (the paper reports 0.0100)"


def test_a_claim_of_parts_shows_each_parts_number_and_what_it_could_detect(tmp_path):
    """A claim decided by several parts has no single estimate: the table and the page show every part's interval
    with what it measures, and what each part could detect, instead of a dash."""
    from ptmlab.studies.verdict import combine

    name = NAMES[0]
    a = paired_seeds([0.84, 0.83, 0.85], [0.80, 0.80, 0.81], "sst2: gain")
    b = paired_seeds([0.30, 0.35, 0.20], [0.28, 0.36, 0.22], "cola: gain")
    write_study(tmp_path / name, "parts", [{"x": 1}], combine([decide_above(a), decide_above(b)]),
                claim=Claim(name, "it helps on both tasks", "Q1", "", "each part above 0", paper_effect=0.02),
                budget="full", seeds=[0, 1, 2])
    (entry,) = [e for e in load_entries(tmp_path, STUDIES) if e.study == name]
    assert entry.outcome == "inconclusive" and entry.estimate is None
    assert entry.part_numbers() == [f"sst2: gain {a.value:.4f} [{a.low:.4f}, {a.high:.4f}] (paired t over 3 seeds "
                                    "(95%))", f"cola: gain {b.value:.4f} [{b.low:.4f}, {b.high:.4f}] (paired t "
                                    "over 3 seeds (95%))"]
    from ptmlab.studies.verdict import detectable_effect

    da, db = detectable_effect(a), detectable_effect(b)
    assert entry.power_text() == f"underpowered: could detect ±{da:.4f}; ±{db:.4f}, the paper reports 0.0200"
    row = next(line for line in markdown_table([entry]).splitlines() if name in line)
    assert "sst2: gain" in row and "cola: gain" in row and f"±{db:.4f}" in row
    write_dashboard(tmp_path / "page", tmp_path)
    page = (tmp_path / "page" / "index.html").read_text(encoding="utf-8")
    assert page.count('<div class="part">') == 2 and "cola: gain" in page


def test_numbers_read_at_the_precision_of_their_interval():
    from ptmlab.studies.dashboard import Entry

    def ours(value: float) -> str:
        return Entry("s", "inconclusive", "c", "src", estimate={"value": value, "low": -0.0149, "high": 0.0153}).ours()

    assert ours(1.91e-4) == "0.0002 [-0.0149, 0.0153]"
    assert ours(-5.1e-4) == "-0.0005 [-0.0149, 0.0153]"
    assert ours(2e-5) == "2.00e-05 [-0.0149, 0.0153]"  # four decimals would say 0.0000
    assert ours(0.0) == "0.0000 [-0.0149, 0.0153]"


def test_dashboard_bad_paths_are_clean_errors(tmp_path):
    assert_clean_error(run_cli("study", "dashboard", "--results", str(tmp_path / "nope"), "--output",
                               str(tmp_path / "d")), "nope", "--results")
    (tmp_path / "file").write_text("x")
    with pytest.raises(PtmlabError, match="is a file"):
        write_dashboard(tmp_path / "file", tmp_path)


def test_dashboard_renders_in_headless_chromium(results, tmp_path):
    pytest.importorskip("websocket", reason="websocket-client is a test extra: bash scripts/setup.sh --test")
    if find_chromium() is None:
        pytest.skip("Chromium not found: bash scripts/setup.sh --test installs Debian's chromium (apt-get)")
    root, expected = results
    page = write_dashboard(tmp_path / "dash", root)
    with open_page(page, tmp_path / "profile") as browser:
        rows = browser.evaluate("Array.from(document.querySelectorAll('tr.study')).map(r => r.id)")
        images = browser.evaluate("Array.from(document.images).map(i => ({src: i.getAttribute('src'), "
                                  "ok: i.complete && i.naturalWidth > 0, w: i.naturalWidth}))")
        badge = browser.evaluate(f"getComputedStyle(document.querySelector('tr[id=\"{NAMES[0]}\"] .badge'))"
                                 ".backgroundColor")
        height = browser.evaluate("document.body.scrollHeight")
        shot = browser.screenshot(tmp_path / "dashboard.png")
        errors = list(browser.errors)
    assert rows == NAMES
    assert len(images) == sum(n for _, _, n in expected.values()) and images
    assert all(i["ok"] for i in images), images
    assert errors == []
    assert badge == "rgb(26, 127, 55)"  # supported is green
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, shot_height = struct.unpack(">II", png[16:24])
    assert width >= 1000 and shot_height >= min(height, 1000), (width, shot_height, height)


def test_broken_images_are_seen_by_the_browser(results, tmp_path):
    """The checks can fail: a truncated PNG has no natural width, a missing one logs an error."""
    pytest.importorskip("websocket", reason="websocket-client is a test extra: bash scripts/setup.sh --test")
    if find_chromium() is None:
        pytest.skip("Chromium not found: bash scripts/setup.sh --test installs Debian's chromium (apt-get)")
    root, _ = results
    page = write_dashboard(tmp_path / "dash", root)
    truncated, missing = sorted((page.parent / NAMES[0] / "plots").glob("*.png"))
    truncated.write_bytes(truncated.read_bytes()[:40])
    missing.unlink()
    with open_page(page, tmp_path / "profile") as browser:
        widths = browser.evaluate("Array.from(document.images).map(i => i.naturalWidth)")
        errors = list(browser.errors)
    assert widths.count(0) == 2 and len(widths) > 2
    assert any("ERR_FILE_NOT_FOUND" in e for e in errors), errors


def _readme(path: Path) -> Path:
    path.write_text(f"# x\n\n## Claims\n\n{START}\nold table\n{END}\n\nafter\n")
    return path


def test_claims_table_in_the_readme(results, tmp_path):
    """The full table goes to docs/claims.md beside the README; the README keeps the counts, the plot and a link."""
    root, expected = results
    readme = _readme(tmp_path / "README.md")
    assert update_readme(readme, root) is True
    text = readme.read_text()
    assert "old table" not in text and text.endswith(f"{END}\n\nafter\n")
    section = text.split(START)[1].split(END)[0]
    assert not [line for line in section.splitlines() if line.startswith("| ")]  # no table in the README
    assert f"{len(NAMES)} claims" in section and "](docs/claims.md)" in section and "forest.svg)" in section
    assert "1 supported" in section and "exploratory" in section
    page = (tmp_path / "docs" / "claims.md").read_text()
    assert "Q18/Q20" in page and "How to read the table" in page  # the legend explains the source codes
    table = [line for line in page.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(NAMES)
    rows = {re.search(r"`([^`]+)`", line).group(1): line for line in table[1:]}
    a, b, c, d = NAMES[:4]
    est = expected[a][1]
    assert f"{est.metric}: {est.value:.4f} [{est.low:.4f}, {est.high:.4f}]" in rows[a]  # says what it measures
    assert "**supported**" in rows[a]
    assert rows[a].count(" | ") == 7  # eight columns, "could detect" among them
    assert f"({Path(root.name) / a / 'results.json'})" in rows[a].replace("../", "")
    assert f"**{expected[b][0]}**" in rows[b] and "**inconclusive**" in rows[c]
    assert "**unrated**: the old style verdict." in rows[d] and "two sentences" not in rows[d]
    assert all("**not run**" in rows[n] and "| no results |" in rows[n] for n in NAMES[5:])
    assert update_readme(readme, root) is False  # idempotent
    readme.write_text(readme.read_text().replace("1 supported", "7 supported"))
    assert update_readme(readme, root, write=False) is True and "7 supported" in readme.read_text()
    assert update_readme(readme, root) is True and update_readme(readme, root) is False
    claims = tmp_path / "docs" / "claims.md"
    claims.write_text(claims.read_text().replace("**supported**", "**made up**"))
    assert update_readme(readme, root, write=False) is True and "made up" in claims.read_text()
    bare = tmp_path / "bare.md"
    bare.write_text("# no markers\n")
    with pytest.raises(PtmlabError, match="claims:start"):
        update_readme(bare, root)


def test_markdown_escapes_pipes(results):
    root, _ = results
    entries = load_entries(root)
    from dataclasses import replace

    table = markdown_table([replace(entries[0], claim="a | b")])
    assert "a \\| b" in table and table.splitlines()[2].count(" | ") == 7


def test_claims_table_script(results, tmp_path):
    root, _ = results
    readme = _readme(tmp_path / "README.md")
    script = [sys.executable, str(ROOT / "scripts" / "claims_table.py"), "--readme", str(readme), "--results",
              str(root)]
    check = subprocess.run([*script, "--check"], capture_output=True, text=True, cwd=ROOT)
    assert check.returncode == 1 and "out of date" in check.stdout
    assert "old table" in readme.read_text()
    done = subprocess.run(script, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and "updated" in done.stdout, done.stderr
    assert subprocess.run([*script, "--check"], capture_output=True, cwd=ROOT).returncode == 0
    missing = subprocess.run([*script[:3], str(tmp_path / "none.md")], capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 2 and missing.stderr.startswith("error:") and "Traceback" not in missing.stderr
    (tmp_path / "docs" / "claims.md").write_text("edited by hand\n")
    assert subprocess.run([*script, "--check"], capture_output=True, cwd=ROOT).returncode == 1


def test_the_readme_quotes_the_committed_results():
    """The README's Claims section and docs/claims.md are what ``studies/results`` gives today: a result committed
    without rerunning ``scripts/claims_table.py`` (or a hand edit of the table) fails here. Checked in a fresh
    process (``--check`` only compares): inside the test session other tests register studies of their own."""
    before = (ROOT / "README.md").read_text()
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "claims_table.py"), "--check"],
                           capture_output=True, text=True, cwd=ROOT)
    assert check.returncode == 0, "README.md's Claims section or docs/claims.md is out of date: run python " \
                                  f"scripts/claims_table.py " \
                                  f"({check.stdout.strip()} {check.stderr.strip()})"
    entries = {e.study: e for e in load_entries(ROOT / "studies" / "results")}
    # the studies run at the papers' model size have full-budget results with at least three seeds (compression's
    # is the minilm run of its fixed design, whose reference trains as long as the recovery; the mpnet run before
    # it could not meet that condition)
    for name in ("anomaly", "head-ablation", "layer-ablation", "super-tickets", "random-init"):
        e = entries[name]
        assert e.budget.split(" + ")[0] == "full" and len(e.seeds) >= 3, f"{name}: budget {e.budget!r}, seeds {e.seeds}"
    assert len(entries["compression"].seeds) >= 3 and entries["compression"].outcome != "cannot test"
    assert (ROOT / "README.md").read_text() == before


def test_budget_column_marks_runs_with_their_own_options():
    from ptmlab.studies.dashboard import _own_options

    assert _own_options({"command": "ptmlab study ghost --budget full --output /tmp/g"}) == ""
    assert _own_options({"command": "ptmlab study multitask --budget full --glue-dir ../d --seeds 0,1"}) == ""
    assert _own_options({"command": "ptmlab study scaling --sizes 2x64,4x128 --seeds=3,4 --output D"}) \
        == " + own options"
    assert _own_options({"command": "ptmlab study x --eval-blocks=256"}) == " + own options"
    assert _own_options({}) == ""
