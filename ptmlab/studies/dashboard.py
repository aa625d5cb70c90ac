"""One page for every claim: what the source says, the paper's number, ours with its spread, and the verdict.

``ptmlab study dashboard`` reads a results directory (``D/<study>/results.json`` as ``ptmlab study all`` writes
them, or the committed ``studies/results/``) and writes ``index.html``: one row per registered study, so a study
that was never run shows as "not run" instead of silently missing. A study on the verdict contract
(``studies/verdict.py``) shows its claim, outcome (``cannot test`` among them), estimate and detectable effect, with
a one-line reason (the first unmet validity condition, or what the run could detect against the paper's effect) and
the full reason and validity block folded under "details"; one that still writes a verdict sentence shows it as
"unrated", with its claim taken from the module's ``Claim`` or the registry's one-line help. Plots are copied next
to the page and linked relatively, so the page works from a file, a static server or a CI artifact alike.

The same rows become the Markdown table of the README's "Claims" section (``markdown_table``, ``update_readme``),
so the README quotes the committed results instead of numbers copied by hand.
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
            f"<td>{_badge(e.outcome)}<div class='reason'>{esc(e.headline())}</div>{_details(e)}</td>"
            f"<td>{esc(e.run_text()) if e.study_dir else '-'}</td><td>{''.join(thumbs) or '-'}</td>"
            f"<td>{' '.join(links) or '-'}</td></tr>")


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
    return f'<details class="small"><summary>details</summary><p>{esc(e.verdict)}</p>{table}</details>'


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
            f"<p class='counts'>{summary}</p><table><thead><tr>{head}</tr></thead><tbody>\n{rows}\n</tbody></table>"
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


def markdown_table(entries: list[Entry], link_from: Path | None = None) -> str:
    """The dashboard as a Markdown table; study names link to their results.json relative to ``link_from``."""
    lines = ["| study | source | claim | paper | ours [95% interval] | could detect | verdict | budget; seeds |",
             "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        name = f"`{e.study}`"
        if e.study_dir is not None and link_from is not None:
            rel = Path(os.path.relpath(e.study_dir / "results.json", link_from)).as_posix()
            name = f"[`{e.study}`]({rel})"
        ours = f"{e.ours()} ({e.spread()})" if e.ours() and e.spread() else e.ours() or "-"
        verdict = f"**{e.outcome}**"
        if e.outcome in (UNRATED, FAILED) and e.verdict:
            verdict += f": {_first_sentence(e.verdict)}"
        elif e.outcome == "cannot test":
            verdict += f": {e.headline()}"
        run = e.run_text() if e.study_dir is not None else "-"
        cells = [name, _md(e.source) or "-", _md(e.claim), _md(e.paper) or "-", _md(ours), _md(e.power_text()) or "-",
                 _md(verdict), _md(run)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def claims_section(entries: list[Entry], link_from: Path | None, results_label: str) -> str:
    ran = sum(e.study_dir is not None for e in entries)
    return (f"Generated by `python scripts/claims_table.py` from `{results_label}` ({ran} of {len(entries)} "
            "registered studies have results); do not edit by hand. Four outcomes: supported, not supported, "
            "inconclusive, and cannot test (a validity condition of the study is unmet on the run's own numbers, so "
            "its comparison says nothing about the claim). \"could detect\": the smallest effect the run would have "
            "found at its noise; \"underpowered\": an inconclusive run that could not have found the paper's effect. "
            "Rules and conditions: [docs/studies.md](docs/studies.md). \"+ own options\": the run changed what the "
            "budget measures (another grid, task or data); its command is in its results.json.\n\n"
            + markdown_table(entries, link_from))


def replace_section(text: str, section: str) -> str:
    """``text`` with what lies between the claims markers replaced by ``section``."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise PtmlabError(f"the README has no '{START}' ... '{END}' markers: add them where the Claims table goes")
    return text[:start + len(START)] + "\n" + section.rstrip("\n") + "\n" + text[end:]


def update_readme(readme: Path, results_dir: Path, studies: Registry | None = None, write: bool = True) -> bool:
    """Regenerate the Claims section of ``readme`` from ``results_dir``; True when it changed (written only
    with ``write``, so ``write=False`` checks that the README is up to date)."""
    readme, results_dir = Path(readme), Path(results_dir)
    if not readme.is_file():
        raise PtmlabError(f"README '{readme}' not found: give the path of the README with the claims markers")
    entries = load_entries(results_dir, studies)
    label = os.path.relpath(results_dir, readme.parent)
    old = readme.read_text(encoding="utf-8")
    new = replace_section(old, claims_section(entries, readme.parent, Path(label).as_posix() + "/"))
    if write and new != old:
        atomic_write_text(readme, new)
    return new != old
