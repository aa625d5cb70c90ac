"""One page for every claim: what the source says, the paper's number, ours with its spread, and the verdict.

``ptmlab study dashboard`` reads a results directory (``D/<study>/results.json`` as ``ptmlab study all`` writes
them, or the committed ``studies/results/``) and writes ``index.html``: one row per registered study, so a study
that was never run shows as "not run" instead of silently missing. A study on the verdict contract
(``studies/verdict.py``) shows its claim, outcome (``cannot test`` among them), estimate and detectable effect, with
a one-line reason (the first unmet validity condition, or what the run could detect against the paper's effect) and
the full reason and validity block folded under "details"; one that still writes a verdict sentence shows it as
"unrated", with its claim taken from the module's ``Claim`` or the registry's one-line help. Plots are copied next
to the page and linked relatively, so the page works from a file, a static server or a CI artifact alike.

The same rows become the Markdown table of docs/claims.md, and their counts the README's "Claims" section
(``markdown_table``, ``claims_page``, ``claims_summary``, ``update_readme``), so neither page quotes numbers copied
by hand.
"""

from __future__ import annotations

import html
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_bytes, atomic_write_text
from ptmlab.core.registry import Registry
from ptmlab.studies.suite import read_results
from ptmlab.studies.verdict import paper_part_of

NOT_RUN, FAILED, UNRATED = "not run", "failed", "unrated"
COLOURS = {"supported": "#1a7f37", "not supported": "#cf222e", "inconclusive": "#bf8700", "cannot test": "#6e40c9",
           UNRATED: "#57606a", NOT_RUN: "#8c959f", FAILED: "#82071e"}
START, END = "<!-- claims:start -->", "<!-- claims:end -->"


@dataclass(frozen=True)
class Entry:
    """One dashboard row: a registered study and what its results say (or that there are none)."""

    study: str
    outcome: str        # supported | not supported | inconclusive | cannot test | unrated | not run | failed
    claim: str
    source: str
    paper: str = ""
    rule: str = ""
    verdict: str = ""               # the reason (contract) or the verdict sentence (unrated), or the failure
    estimate: dict | None = None    # {metric, value, low, high, n, method}
    budget: str = ""
    seeds: list = field(default_factory=list)
    title: str = ""
    plots: list[Path] = field(default_factory=list)   # PNGs in the results directory
    study_dir: Path | None = None                     # where its results.json lives
    validity: list = field(default_factory=list)      # [{condition, value, threshold, met, compare}]
    detectable_effect: float | None = None
    paper_effect: float | None = None
    parts: list = field(default_factory=list)         # a claim of several parts: [{outcome, reason, estimate, ...}]
    paper_part: int | None = None                     # the part the paper's effect is about (Claim.paper_part)
    preregistration: dict = field(default_factory=dict)  # {status: confirmatory | exploratory, why, ...}
    recompute: dict = field(default_factory=dict)        # {status, from}: how rederive recomputed the verdict
    thresholds: list = field(default_factory=list)       # the rule's line(s) in the estimate's unit

    def status(self) -> str:
        """``confirmatory`` or ``exploratory`` (a result without the check: exploratory), "" without results."""
        if self.study_dir is None or self.outcome in (UNRATED, FAILED, NOT_RUN):
            return ""  # no rule to have preregistered
        return str(self.preregistration.get("status") or "exploratory")

    def status_text(self) -> str:
        """"confirmatory" or "exploratory (why)"."""
        st = self.status()
        why = self.preregistration.get("why")
        return f"{st} ({why})" if st == "exploratory" and why else st

    def part_outcomes(self) -> str:
        """"Q10: supported; Q11: inconclusive" for a claim of named parts, "" otherwise."""
        named = [p for p in self.parts if p.get("part")]
        return "; ".join(f"{p['part']}: {p.get('outcome')}" for p in named) if len(named) == len(self.parts) \
            and len(named) > 1 else ""

    def unmet(self) -> list[dict]:
        return [c for c in self.validity if isinstance(c, dict) and not c.get("met")]

    def headline(self) -> str:
        """The reason in one line: the first failed condition (cannot test), what the run could detect against the
        paper's effect (inconclusive), the deciding number otherwise."""
        from ptmlab.studies.verdict import Condition

        if self.unmet():
            first = Condition.from_dict(self.unmet()[0]).text()
            more = len(self.unmet()) - 1
            return first + (f" (+{more} more unmet)" if more else "")
        parts = self.part_outcomes()
        if parts:
            return f"by part: {parts}" + (f"; {self.power_text()}" if self.outcome == "inconclusive"
                                           and self.power_text() else "")
        if self.outcome == "inconclusive":
            return self.power_text() or _first_sentence(self.verdict, 120)
        return _first_sentence(self.verdict, 160)

    def power_text(self) -> str:
        """"could detect ±X" and, for an inconclusive run whose detectable effect is larger than the paper's,
        "underpowered: ... the paper reports Y" (a run whose interval decided the rule was not underpowered for it)."""
        det, paper = self.detectable_effect, self.paper_effect
        per_part = [p.get("detectable_effect") for p in self.parts]
        if not self.estimate and any(isinstance(d, int | float) for d in per_part):
            text = "could detect " + "; ".join(f"±{_num(d)}" if isinstance(d, int | float) else "-" for d in per_part)
        elif det is None:
            return "one run: no interval" if self.outcome == "inconclusive" else ""
        else:
            text = f"could detect ±{_num(det)}"
        if (part := paper_part_of(self.parts, self.paper_part)) is not None:  # its own power, if open
            d = part.get("detectable_effect")
            det = d if part.get("outcome") == "inconclusive" and isinstance(d, int | float) else None
        if paper is not None and det is not None and det > abs(paper) and self.outcome == "inconclusive":
            text = f"underpowered: {text}, the paper reports {_num(paper)}"
        elif paper is not None:
            text += f" (the paper reports {_num(paper)})"
        return text

    def ours(self) -> str:
        """Our number with its interval: "0.7570 [0.7401, 0.7733]", or "" without an estimate."""
        if not self.estimate:
            return "; ".join(self.part_numbers())
        return _interval(self.estimate)

    def part_numbers(self) -> list[str]:
        """For a claim of several parts (no single estimate): each part's number with what it is and how it was
        obtained, "sst2: accuracy gain ... 0.0236 [0.0156, 0.0315] (bootstrap over 9423 examples ...)"."""
        if self.estimate:
            return []
        ests = [p.get("estimate") for p in self.parts if isinstance(p.get("estimate"), dict)]
        return [f"{est.get('metric') or 'part'} {_interval(est)} ({est.get('method') or '-'})"
                for est in ests if _interval(est)]

    def spread(self) -> str:
        """What the number is and how its interval was obtained (in ``ours`` itself for a claim of parts)."""
        e = self.estimate or {}
        return "; ".join(str(e[k]) for k in ("metric", "method") if e.get(k))

    def run_text(self) -> str:
        seeds = ", ".join(str(s) for s in self.seeds) if self.seeds else "-"
        return f"{self.budget or '-'}; seeds {seeds}"


# options that choose where a study runs, where its shared data lies and how often: not what it measures
_PLAIN_OPTIONS = {"--budget", "--output", "--seeds", "--overwrite", "--no-overwrite", "--glue-dir", "--text-dir",
                  "--domain-dir"}


def _own_options(run: dict) -> str:
    """" + own options" when the recorded command set options of the experiment itself (a wider grid, other data):
    the budget's name alone would then misdescribe the run; the command is in results.json."""
    command = str(run.get("command") or "")
    used = {w.split("=", 1)[0] for w in command.split() if w.startswith("--")}
    return " + own options" if used - _PLAIN_OPTIONS else ""


def _interval(e: dict) -> str:
    """"0.7570 [0.7401, 0.7733]" from an estimate's dict, "0.7570 (no interval)" without finite ends, "" without a
    value."""
    if not isinstance(e.get("value"), int | float):
        return ""
    low, high = e.get("low"), e.get("high")
    if isinstance(low, int | float) and isinstance(high, int | float) and math.isfinite(low) and math.isfinite(high):
        return f"{_num(e['value'])} [{_num(low)}, {_num(high)}]"
    return f"{_num(e['value'])} (no interval)"


def _num(x: float) -> str:
    """Four decimals, like the intervals beside it (0.0002 [-0.0149, 0.0153]); scientific only where four decimals
    would read 0.0000."""
    if x != 0 and abs(x) < 5e-5:
        return f"{x:.2e}"
    return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.4f}"


def _claim_from_module(studies: Registry, name: str) -> dict | None:
    """The ``Claim`` a study's module declares for it (``CLAIM``, or any module-level Claim naming the study)."""
    from ptmlab.studies.verdict import Claim

    mod = sys.modules.get(getattr(studies.get(name), "__module__", ""), None)
    if mod is None:
        return None
    found: list = []
    for value in vars(mod).values():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else [value]
        found += [c for c in items if isinstance(c, Claim)]
    for c in found:
        if c.study == name:
            return c.to_dict()
    return None


def _claim_from_help(help_text: str) -> dict:
    """A claim from the registry's help line, "Q7: is gradual unfreezing needed? ..." -> source Q7."""
    head, sep, rest = help_text.partition(": ")
    if sep and len(head) <= 30:
        return {"source": head, "claim": rest}
    return {"source": "", "claim": help_text}


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def load_entries(results_dir: Path, studies: Registry | None = None) -> list[Entry]:
    """One ``Entry`` per registered study, in registry order, from ``results_dir/<study>/results.json`` (and
    ``results_dir/suite.json`` for the studies that failed in ``ptmlab study all``)."""
    if studies is None:
        from ptmlab.studies import load_all

        studies = load_all()
    results_dir = Path(results_dir)
    suite = _dict(read_results(results_dir / "suite.json"))
    entries = []
    for name in studies.names():
        res = read_results(results_dir / name / "results.json")
        claim = _dict((res or {}).get("claim")) or _claim_from_module(studies, name) or _claim_from_help(
            studies.help(name))
        base = dict(study=name, claim=str(claim.get("claim") or ""), source=str(claim.get("source") or ""),
                    paper=str(claim.get("paper") or ""), rule=str(claim.get("rule") or ""))
        if res is None:
            run = _dict(_dict(suite.get("studies")).get(name))
            failed = run.get("status") == FAILED
            entries.append(Entry(outcome=FAILED if failed else NOT_RUN,
                                 verdict=str(run.get("error") or "") if failed else "", **base))
            continue
        run = _dict(res.get("run"))
        outcome = str(res.get("outcome") or UNRATED)
        verdict = res.get("verdict") if outcome == UNRATED else res.get("reason") or res.get("verdict")
        det, paper = res.get("detectable_effect"), res.get("paper_effect")
        entries.append(Entry(outcome=outcome, verdict=str(verdict or ""), estimate=_dict(res.get("estimate")) or None,
                             validity=[c for c in res.get("validity") or [] if isinstance(c, dict)],
                             detectable_effect=float(det) if isinstance(det, int | float) else None,
                             paper_effect=float(paper) if isinstance(paper, int | float) else None,
                             parts=[p for p in res.get("parts") or [] if isinstance(p, dict)],
                             paper_part=claim.get("paper_part") if isinstance(claim.get("paper_part"), int) else None,
                             preregistration=_dict(res.get("preregistration")), recompute=_dict(res.get("recompute")),
                             thresholds=[x for x in res.get("thresholds") or [] if isinstance(x, int | float)],
                             budget=str(run.get("budget") or suite.get("budget") or "") + _own_options(run),
                             seeds=list(run.get("seeds") or []), title=str(res.get("title") or ""),
                             plots=sorted((results_dir / name / "plots").glob("*.png")),
                             study_dir=results_dir / name, **base))
    return entries


# ---------------------------------------------------------------------------------------------------- the page

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#1f2328;font-size:14px}
h1{font-size:1.5em;margin:0 0 .3em} p.meta{color:#57606a;margin:.2em 0 1em}
table{border-collapse:collapse;width:100%} th,td{border:1px solid #d0d7de;padding:6px 8px;vertical-align:top}
th{background:#f6f8fa;text-align:left;position:sticky;top:0}
span.num{font-variant-numeric:tabular-nums;white-space:nowrap} td.ours{min-width:10em}
div.part{font-variant-numeric:tabular-nums;margin-bottom:.3em}
.badge{display:inline-block;color:#fff;border-radius:10px;padding:1px 8px;font-weight:600;white-space:nowrap}
.small{color:#57606a;font-size:.9em} img.thumb{height:90px;border:1px solid #d0d7de;margin:2px;background:#fff}
.counts span{margin-right:1em} div.reason{margin-top:3px} table.validity td,table.validity th{padding:2px 4px}
span.status{font-size:.85em;border:1px solid #57606a;border-radius:10px;padding:0 6px;white-space:nowrap}
span.status.confirmatory{background:#ddf4ff;border-color:#0969da} span.status.exploratory{border-style:dashed}
div.forest{margin:0 0 1.5em;overflow-x:auto} div.forest svg{max-width:100%;height:auto}
"""


def _badge(outcome: str) -> str:
    colour = COLOURS.get(outcome, COLOURS[UNRATED])
    return f'<span class="badge" style="background:{colour}">{html.escape(outcome)}</span>'


def _copy(src: Path, dst: Path) -> None:
    if src.resolve() != dst.resolve():
        atomic_write_bytes(dst, src.read_bytes())


def _publish(entries: list[Entry], out: Path) -> None:
    """Copy what the page links to (results.json, plots, report) under ``out/<study>/`` (nothing when ``out`` is
    the results directory itself)."""
    for e in entries:
        if e.study_dir is None:
            continue
        _copy(e.study_dir / "results.json", out / e.study / "results.json")
        for png in e.plots:
            _copy(png, out / e.study / "plots" / png.name)
        if (e.study_dir / "report.html").is_file():
            _copy(e.study_dir / "report.html", out / e.study / "report.html")


def _row(e: Entry) -> str:
    esc = html.escape
    links, thumbs = [], []
    if e.study_dir is not None:
        for png in e.plots:
            href = f"{esc(e.study)}/plots/{esc(png.name)}"
            thumbs.append(f'<a href="{href}"><img class="thumb" src="{href}" alt="{esc(e.study)}: '
                          f'{esc(png.stem)}" title="{esc(png.stem)}"></a>')
        if (e.study_dir / "report.html").is_file():
            links.append(f'<a href="{esc(e.study)}/report.html">report</a>')
        links.append(f'<a href="{esc(e.study)}/results.json">results.json</a>')
    rule = f'<details class="small"><summary>rule</summary>{esc(e.rule)}</details>' if e.rule else ""
    ours = f'<span class="num">{esc(e.ours()) or "-"}</span>'
    if e.part_numbers():
        ours = "".join(f'<div class="part">{esc(x)}</div>' for x in e.part_numbers())
    spread = f'<div class="small">{esc(e.spread())}</div>' if e.spread() else ""
    power = f'<div class="small">{esc(e.power_text())}</div>' if e.power_text() else ""
    return (f'<tr class="study" id="{esc(e.study)}" data-outcome="{esc(e.outcome)}">'
            f"<td><b>{esc(e.study)}</b><div class='small'>{esc(e.title)}</div></td>"
            f"<td>{esc(e.source) or '-'}</td><td>{esc(e.claim)}{rule}</td><td>{esc(e.paper) or '-'}</td>"
            f'<td class="ours">{ours}{spread}{power}</td>'
            f"<td>{_badge(e.outcome)}{_status_tag(e)}<div class='reason'>{esc(e.headline())}</div>{_details(e)}</td>"
            f"<td>{esc(e.run_text()) if e.study_dir else '-'}</td><td>{''.join(thumbs) or '-'}</td>"
            f"<td>{' '.join(links) or '-'}</td></tr>")


def _status_tag(e: Entry) -> str:
    """"confirmatory" / "exploratory" beside the badge, with why in its title."""
    st = e.status()
    if not st:
        return ""
    why = html.escape(str(e.preregistration.get("why") or ""))
    return f' <span class="status {st}" title="{why}">{st}</span>'


def _details(e: Entry) -> str:
    """The full reason and the validity block, folded."""
    esc = html.escape
    if not e.verdict and not e.validity:
        return ""
    rows = "".join(f"<tr><td>{esc(str(c.get('condition')))}</td><td>{esc(_cell(c.get('value')))}</td>"
                   f"<td>{esc(str(c.get('compare', '')))} {esc(_cell(c.get('threshold')))}</td>"
                   f"<td>{'met' if c.get('met') else '<b>unmet</b>'}</td></tr>" for c in e.validity)
    table = (f"<table class='validity'><tr><th>condition</th><th>value</th><th>needed</th><th></th></tr>{rows}"
             "</table>") if rows else ""
    checks = "".join(f"<p>{esc(label)}: {esc(text)}</p>" for label, text in (
        ("preregistration", e.status_text()),
        ("recomputed from its records", " - ".join(str(e.recompute.get(k)) for k in ("status", "from", "rerun")
                                                    if e.recompute.get(k)))) if text)
    return f'<details class="small"><summary>details</summary><p>{esc(e.verdict)}</p>{checks}{table}</details>'


def _cell(x) -> str:
    return "null" if x is None else _num(float(x)) if isinstance(x, int | float) else str(x)


def render_page(entries: list[Entry], source: str) -> str:
    """The dashboard's HTML: links and thumbnails point to ``<study>/...`` beside the page."""
    counts: dict[str, int] = {}
    for e in entries:
        counts[e.outcome] = counts.get(e.outcome, 0) + 1
    summary = "".join(f"<span>{_badge(k)} {v}</span>" for k, v in sorted(counts.items()))
    head = "".join(f"<th>{h}</th>" for h in ("study", "source", "claim", "paper", "ours [95% interval]",
                                               "verdict", "budget; seeds", "plots", "details"))
    rows = "\n".join(_row(e) for e in entries)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return ("<!doctype html><html><head><meta charset='utf-8'><link rel='icon' href='data:,'>"
            f"<title>ptmlab studies</title><style>{STYLE}</style></head><body>"
            f"<h1>ptmlab studies: claims and verdicts</h1><p class='meta'>{len(entries)} registered studies, "
            f"results from {html.escape(source)}, written {when}. How verdicts are decided: "
            "ptmlab/studies/verdict.py.</p>"
            f"<p class='counts'>{summary}</p>"
            f"<h2>Every claim at a glance</h2><div class='forest'>{forest_svg(entries)}</div>"
            f"<table><thead><tr>{head}</tr></thead><tbody>\n{rows}\n</tbody></table>"
            "</body></html>\n")


def write_dashboard(out: Path, results_dir: Path | None = None, studies: Registry | None = None) -> Path:
    """Write ``out/index.html`` from ``results_dir`` (default: ``out`` itself, as ``ptmlab study all`` fills it)."""
    out = Path(out)
    results_dir = Path(results_dir) if results_dir is not None else out
    if not results_dir.is_dir():
        raise PtmlabError(f"--results '{results_dir}' is not a directory: give the --output of `ptmlab study all` "
                          "or studies/results")
    if out.exists() and not out.is_dir():
        raise PtmlabError(f"--output '{out}' is a file: give a directory for the dashboard")
    entries = load_entries(results_dir, studies)
    _publish(entries, out)
    page = out / "index.html"
    atomic_write_text(page, render_page(entries, str(results_dir)))
    return page


# ------------------------------------------------------------------------------------------------ the README

def _md(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _first_sentence(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    cut = text.find(". ")
    text = text[:cut + 1] if 0 < cut < limit else text
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def _ours_md(e: Entry) -> str:
    """The "ours" cell: what is measured, then the number with its interval and how the interval was obtained; a
    claim of parts without numbers says so and gives each part's finding instead of a bare "-"."""
    if e.study_dir is None:
        return "no results"
    if e.estimate and _interval(e.estimate):
        return _estimate_md(e.estimate)
    ests = [p["estimate"] for p in e.parts if isinstance(p.get("estimate"), dict) and _interval(p["estimate"])]
    if ests:
        return "; ".join(_estimate_md(est) for est in ests)
    found = [f"{p['part']}: {_first_sentence(str(p.get('reason') or '-'), 400)}" for p in e.parts if p.get("part")]
    if found:
        return "no single number; " + "; ".join(found)
    return "no number recorded"


def _estimate_md(est: dict) -> str:
    """"what: 0.0002 [-0.0149, 0.0153] (how)"; a number without an interval gives its method in place of
    "(no interval)"."""
    number, what, method = _interval(est), est.get("metric"), est.get("method")
    if method and number.endswith(" (no interval)"):
        number = number[:-len(" (no interval)")]
    text = f"{what}: {number}" if what else number
    return f"{text} ({method})" if method else text


def _detect_md(e: Entry) -> str:
    text = e.power_text()
    if text:
        return text
    if e.study_dir is None:
        return "no results"
    return "no interval to judge it by" if e.estimate and " (no interval)" in _interval(e.estimate) else \
        "not computed for this design"


def markdown_table(entries: list[Entry], link_from: Path | None = None) -> str:
    """The dashboard as a Markdown table; study names link to their results.json relative to ``link_from``."""
    lines = ["| study | source | claim | paper | ours [95% interval] | could detect | verdict | budget; seeds |",
             "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        name = f"`{e.study}`"
        if e.study_dir is not None and link_from is not None:
            rel = Path(os.path.relpath(e.study_dir / "results.json", link_from)).as_posix()
            name = f"[`{e.study}`]({rel})"
        verdict = f"**{e.outcome}**" + (f" ({e.status()})" if e.status() else "")
        if e.part_outcomes() and e.outcome not in ("cannot test", UNRATED, FAILED):
            verdict += f"; by part: {e.part_outcomes()}"
        if e.outcome in (UNRATED, FAILED) and e.verdict:
            verdict += f": {_first_sentence(e.verdict)}"
        elif e.outcome == "cannot test":
            verdict += f": the number beside it is no evidence either way; unmet: {e.headline()}"
        run = e.run_text() if e.study_dir is not None else "-"
        cells = [name, _md(e.source) or "-", _md(e.claim), _md(e.paper) or "-", _md(_ours_md(e)), _md(_detect_md(e)),
                 _md(verdict), _md(run)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def outcome_counts(entries: list[Entry]) -> dict[str, int]:
    """How many studies have each outcome, the four verdicts first (zeros kept), then any other state."""
    counts = {k: 0 for k in ("supported", "not supported", "inconclusive", "cannot test")}
    for e in entries:
        counts[e.outcome] = counts.get(e.outcome, 0) + 1
    return counts


FOREST_ALT = ("Forest plot: every claim's effect and 95% interval on its own scale, the rule's line dashed, the band "
              "the run could not resolve shaded, the paper's effect a diamond; filled and solid: confirmatory, hollow "
              "and dashed: exploratory")


def claims_summary(entries: list[Entry], forest: str, claims_link: str) -> str:
    """The README's few generated lines: the forest plot, the counts of each outcome and of confirmatory results,
    and the link to the full table."""
    ran = [e for e in entries if e.study_dir is not None]
    counts = ", ".join(f"{v} {k}" for k, v in outcome_counts(entries).items())
    confirmed = sum(e.status() == "confirmatory" for e in entries)
    picture = f"![{FOREST_ALT}]({forest})\n\n" if forest else ""
    return (picture + f"{len(entries)} claims, {len(ran)} with committed results: {counts}. {confirmed} "
            f"confirmatory (design, rule and data preregistered before the run), {len(ran) - confirmed} exploratory. "
            f"Every claim with its source, the paper's number, ours with its interval and the reason for its verdict: "
            f"[{claims_link}]({claims_link}). Generated by `python scripts/claims_table.py`; do not edit by hand.\n")


LEGEND = """\
How to read the table:

- **source**: where the claim comes from. `Q1` to `Q21` are the questions of the article "21 questions on NLP
  transfer learning" (`Q18/Q20` or `Q10, Q11`: a claim that several questions make); `ACL 2021` is a paper covered
  by the article "ACL 2021: pre-trained models". After the semicolon: the papers that state the claim and give the
  paper's number.
- **paper**: what the paper reports, in its own setting (usually a larger model and the full task).
- **ours [95% interval]**: what the run measured, then its number and 95% interval, then how the interval was
  obtained (over seeds, examples or both). A claim of several parts gives one number per part. The number of a
  *cannot test* row is printed for completeness only.
- **could detect**: the smallest effect the run would have found at its noise, one figure per part for a claim of
  parts (`-`: a part whose test gives no such figure); *underpowered*: an inconclusive run that could not have
  found the paper's effect.
- **verdict**: *supported*, *not supported*, *inconclusive* (the interval crosses the rule's line), or *cannot test*
  (a validity condition of the study is unmet on the run's own numbers, e.g. a model at chance or a teacher no
  better than its student; the first unmet condition is quoted). *confirmatory*: the run's design, rule and data
  were preregistered in a commit before it started (`ptmlab study preregister`); *exploratory*: anything else.
- **budget; seeds**: the study's budget (`small`, `default`, `full`, `gpu`) and seeds; *+ own options*: the run
  also changed what the budget measures (another grid, task or data), and its command is in its results.json.

Rules and validity conditions: [studies.md](studies.md).
"""


def claims_page(entries: list[Entry], link_from: Path | None, results_label: str, forest: str = "") -> str:
    """The whole of docs/claims.md: what the page is, the forest plot, the legend and the full table."""
    ran = sum(e.study_dir is not None for e in entries)
    picture = f"![{FOREST_ALT}]({forest})\n\n" if forest else ""
    counts = ", ".join(f"{v} {k}" for k, v in outcome_counts(entries).items())
    return ("# Claims and verdicts\n\n"
            "Each claim of the source articles is a study that runs on your own model and data "
            "(`ptmlab study NAME`); this page lists the verdicts of the committed runs. Generated by "
            f"`python scripts/claims_table.py` from `{results_label}` ({ran} of {len(entries)} registered studies "
            f"have results: {counts}); do not edit by hand. `ptmlab study dashboard --results studies/results "
            "--output D` draws the same as one HTML page with each study's plots.\n\n"
            + picture + LEGEND + "\n" + markdown_table(entries, link_from))


def replace_section(text: str, section: str) -> str:
    """``text`` with what lies between the claims markers replaced by ``section``."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise PtmlabError(f"the README has no '{START}' ... '{END}' markers: add them where the Claims table goes")
    return text[:start + len(START)] + "\n" + section.rstrip("\n") + "\n" + text[end:]


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


def update_readme(readme: Path, results_dir: Path, studies: Registry | None = None, write: bool = True,
                  claims: Path | None = None) -> bool:
    """Regenerate the claims summary of ``readme`` (between the claims markers), the full table in ``claims``
    (default ``docs/claims.md`` beside the README) and the forest plot both open with (``results_dir/forest.svg``);
    True when any of them changed (written only with ``write``, so ``write=False`` checks that all are up to
    date)."""
    readme, results_dir = Path(readme), Path(results_dir)
    claims = Path(claims) if claims is not None else readme.parent / "docs" / "claims.md"
    if not readme.is_file():
        raise PtmlabError(f"README '{readme}' not found: give the path of the README with the claims markers")
    entries = load_entries(results_dir, studies)
    svg_path = results_dir / FOREST_FILE
    svg = forest_svg(entries)
    old = readme.read_text(encoding="utf-8")
    new = replace_section(old, claims_summary(entries, _rel(svg_path, readme.parent), _rel(claims, readme.parent)))
    page_old = claims.read_text(encoding="utf-8") if claims.is_file() else None
    page = claims_page(entries, claims.parent, _rel(results_dir, claims.parent) + "/", _rel(svg_path, claims.parent))
    svg_old = svg_path.read_text(encoding="utf-8") if svg_path.is_file() else None
    if write and new != old:
        atomic_write_text(readme, new)
    if write and page != page_old:
        claims.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(claims, page)
    if write and svg != svg_old:
        atomic_write_text(svg_path, svg)
    return new != old or page != page_old or svg != svg_old


# ------------------------------------------------------------------------------------------------ the forest plot
FOREST_FILE = "forest.svg"
_W, _LABEL, _PLOT, _ROW = 1160, 330, 400, 34


def forest_rows(entries: list[Entry]) -> list[dict]:
    """One row per claim, or per part of a claim of parts: its label, estimate (or none), the rule's line(s), what
    the run could detect, the paper's effect where it belongs to that row, its outcome and its status."""
    rows = []
    for e in entries:
        if e.study_dir is None:
            rows.append({"study": e.study, "part": "", "outcome": e.outcome, "estimate": None, "note": e.outcome})
            continue
        overall = e.outcome
        parts = e.parts or [{"part": "", "outcome": e.outcome, "estimate": e.estimate, "thresholds": e.thresholds,
                             "detectable_effect": e.detectable_effect}]
        for i, p in enumerate(parts):
            own = p.get("outcome") if overall not in ("cannot test",) else "cannot test"
            est = p.get("estimate") if isinstance(p.get("estimate"), dict) else None
            if len(parts) == 1 and est is None:
                est = e.estimate
            paper = e.paper_effect if (len(parts) == 1 or i == (e.paper_part if e.paper_part is not None else -1)) \
                else None
            thresholds = [float(x) for x in p.get("thresholds") or (e.thresholds if len(parts) == 1 else [])
                          if isinstance(x, int | float)]
            det = p.get("detectable_effect")
            label = str(p.get("part") or (est or {}).get("metric") or "") if len(parts) > 1 else ""
            rows.append({"study": e.study, "part": label, "outcome": own or overall,
                         "estimate": est, "thresholds": thresholds, "paper": paper,
                         "detectable": float(det) if isinstance(det, int | float) else None,
                         "status": e.status(), "note": "" if est else "no single interval: decided from counts"
                         + (f" (could detect ±{_num(float(det))})" if isinstance(det, int | float) else "")
                         + ("" if isinstance(det, int | float) else " or the sweep's analysis")})
    return rows


def _finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def forest_svg(entries: list[Entry]) -> str:
    """Every claim's effect and interval on its own scale (one row per claim or part), as standalone SVG: the rule's
    line dashed, the band of effects the run could not tell from that line (its detectable effect) shaded, the
    paper's effect a diamond, the interval coloured by outcome, solid and filled when the result is confirmatory,
    dashed and hollow when exploratory."""
    esc = html.escape
    rows = forest_rows(entries)
    top = 70
    height = top + _ROW * len(rows) + 16
    x0, x1 = _LABEL + 10, _LABEL + 10 + _PLOT
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" viewBox="0 0 {_W} {height}" '
           'font-family="system-ui,Segoe UI,Helvetica,Arial,sans-serif" font-size="12" role="img" '
           'aria-label="Forest plot: every claim\'s effect and 95% interval on its own scale">',
           f'<rect width="{_W}" height="{height}" fill="#ffffff"/>',
           '<text x="8" y="18" font-size="14" font-weight="600">Every claim: effect and 95% interval, each on its '
           'own scale</text>']
    lx = 8
    for outcome in ("supported", "not supported", "inconclusive", "cannot test"):
        out.append(f'<circle cx="{lx + 6}" cy="38" r="5" fill="{COLOURS[outcome]}"/>'
                   f'<text x="{lx + 15}" y="42">{outcome}</text>')
        lx += 15 + 8 * len(outcome) + 18
    out.append(f'<circle cx="{lx + 6}" cy="38" r="5" fill="#57606a"/><text x="{lx + 15}" y="42">confirmatory</text>')
    lx += 110
    out.append(f'<circle cx="{lx + 6}" cy="38" r="5" fill="#ffffff" stroke="#57606a" stroke-width="2"/>'
               f'<line x1="{lx + 14}" y1="38" x2="{lx + 34}" y2="38" stroke="#57606a" stroke-width="2" '
               f'stroke-dasharray="4 3"/><text x="{lx + 40}" y="42">exploratory</text>')
    lx += 130
    out.append(f'<rect x="{lx}" y="31" width="24" height="14" fill="#8c959f" fill-opacity="0.3"/>'
               f'<text x="{lx + 30}" y="42">could not detect</text>')
    lx += 140
    out.append(f'<line x1="{lx}" y1="30" x2="{lx}" y2="46" stroke="#1f2328" stroke-dasharray="3 2"/>'
               f'<text x="{lx + 6}" y="42">rule\'s line</text>')
    lx += 90
    out.append(f'<path d="M{lx},38 l5,-5 l5,5 l-5,5 z" fill="none" stroke="#1f2328" stroke-width="1.5"/>'
               f'<text x="{lx + 15}" y="42">paper</text>')
    out.append(f'<line x1="0" y1="{top - 10}" x2="{_W}" y2="{top - 10}" stroke="#d0d7de"/>')
    for k, r in enumerate(rows):
        y = top + _ROW * k + _ROW / 2
        colour = COLOURS.get(r["outcome"], COLOURS[UNRATED])
        if k % 2:
            out.append(f'<rect x="0" y="{y - _ROW / 2}" width="{_W}" height="{_ROW}" fill="#f6f8fa"/>')
        room = max(8, 48 - len(r["study"]))  # the label column holds about 50 characters
        part = r["part"] if len(r["part"]) <= room else r["part"][:room - 1].rstrip() + "…"
        label = esc(r["study"]) + (f' <tspan fill="#57606a">· {esc(part)}</tspan>' if part else "")
        out.append(f'<text x="8" y="{y + 4}" class="forest-row" data-study="{esc(r["study"])}"><tspan '
                   f'font-weight="600">{label}</tspan></text>')
        est = r.get("estimate")
        if not est or not _finite(est.get("value")):
            out.append(f'<text x="{x0}" y="{y + 4}" fill="#57606a">{esc(r.get("note") or "no estimate")}</text>'
                       f'<text x="{x1 + 12}" y="{y + 4}" fill="{colour}" font-weight="600">{esc(r["outcome"])}</text>')
            continue
        value, low, high = float(est["value"]), est.get("low"), est.get("high")
        det = r.get("detectable")
        marks = [value] + [x for x in (low, high) if _finite(x)] + list(r["thresholds"])
        marks += [t + s * det for t in r["thresholds"] for s in (-1, 1) if _finite(det)]
        if _finite(r.get("paper")):
            marks.append(float(r["paper"]))
        lo, hi = min(marks), max(marks)
        if hi - lo < 1e-12:
            lo, hi = lo - 1, hi + 1
        pad = 0.08 * (hi - lo)
        lo, hi = lo - pad, hi + pad

        def sx(v, lo=lo, hi=hi):
            return x0 + (min(max(v, lo), hi) - lo) / (hi - lo) * _PLOT

        out.append(f'<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#d0d7de"/>')
        for t in r["thresholds"]:
            if _finite(det):
                a, b = sx(t - det), sx(t + det)
                out.append(f'<rect x="{a:.1f}" y="{y - 11}" width="{b - a:.1f}" height="22" fill="#8c959f" '
                           'fill-opacity="0.3"/>')
            out.append(f'<line x1="{sx(t):.1f}" y1="{y - 12}" x2="{sx(t):.1f}" y2="{y + 12}" stroke="#1f2328" '
                       'stroke-dasharray="3 2"/>')
        if _finite(r.get("paper")):
            px = sx(float(r["paper"]))
            out.append(f'<path d="M{px - 5:.1f},{y} l5,-5 l5,5 l-5,5 z" fill="none" stroke="#1f2328" '
                       'stroke-width="1.5"/>')
        dash = "" if r["status"] == "confirmatory" else ' stroke-dasharray="5 3"'
        a = sx(low) if _finite(low) else x0
        b = sx(high) if _finite(high) else x1
        out.append(f'<line x1="{a:.1f}" y1="{y}" x2="{b:.1f}" y2="{y}" stroke="{colour}" stroke-width="3"{dash}/>')
        fill = colour if r["status"] == "confirmatory" else "#ffffff"
        out.append(f'<circle cx="{sx(value):.1f}" cy="{y}" r="5" fill="{fill}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{x0}" y="{y + 15}" font-size="9" fill="#57606a">{_num(lo)}</text>'
                   f'<text x="{x1}" y="{y + 15}" font-size="9" fill="#57606a" text-anchor="end">{_num(hi)}</text>')
        ends = f"[{_num(low)}, {_num(high)}]" if _finite(low) and _finite(high) else "(no interval)"
        if r["status"]:
            ends += f" · {r['status']}"
        out.append(f'<text x="{x1 + 12}" y="{y + 4}"><tspan fill="{colour}" font-weight="600">{esc(r["outcome"])}'
                   f'</tspan> {esc(_num(value))} {esc(ends)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
