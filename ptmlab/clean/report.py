"""report.html of ``ptmlab clean``: documents and characters removed per rule as bars, the per-rule table, the
reasons, and a few removed examples per rule (so a user can see whether a rule removes what it should)."""

from __future__ import annotations

from pathlib import Path

from ptmlab.report.html import Report, new_figure


def write_report(path: Path, stats: dict, examples: dict[str, list[str]]) -> Path:
    t = stats["totals"]
    rep = Report("ptmlab clean")
    rep.text(f"{t['docs_in']:,} documents in, {t['docs_out']:,} kept ({t['docs_kept_fraction']:.1%}); "
             f"{t['chars_in']:,} characters in, {t['chars_out']:,} kept ({t['chars_kept_fraction']:.1%}); "
             f"{stats['mb_per_s']:.2f} MB/s with {stats['workers']} worker(s).")
    names = list(stats["per_rule"])
    rows = [{"rule": n, "documents removed": r["docs"], "lines removed": r["lines"], "lines merged": r["lines_merged"],
             "characters removed": r["chars"],
             "share of characters": r["chars"] / max(1, t["chars_in"])} for n, r in stats["per_rule"].items()]
    fig, _ = new_figure(9.0, 3.6 if len(names) < 8 else 4.2)
    fig.clf()
    ax1, ax2 = fig.subplots(1, 2)
    ys = range(len(names))
    ax1.barh(ys, [r["documents removed"] for r in rows], color="#c0504d")
    ax1.set_yticks(list(ys), names)
    ax1.invert_yaxis()
    ax1.set_xlabel("documents removed")
    ax2.barh(ys, [r["characters removed"] for r in rows], color="#4f81bd")
    ax2.set_yticks(list(ys), [""] * len(names))
    ax2.invert_yaxis()
    ax2.set_xlabel("characters removed")
    rep.heading("Removed per rule")
    rep.figure(fig, "removed_per_rule", "rules in pipeline order; a document is charged to the first rule that "
                                        "removed it")
    rep.table(rows)
    reasons = [{"rule": n, "reason": k, "documents": v} for n, r in stats["per_rule"].items()
               for k, v in sorted(r["reasons"].items(), key=lambda kv: -kv[1])]
    if reasons:
        rep.heading("Reasons")
        rep.table(reasons)
    rep.heading("Removed examples")
    for n in names:
        if examples.get(n):
            rep.heading(n, level=3)
            for ex in examples[n]:
                rep.text(ex)
    rep.heading("Parameters")
    rep.table([{"rule": n, "parameters": ", ".join(f"{k}={v}" for k, v in p.items())}
               for n, p in stats["params"].items()])
    return rep.write(path, save_pngs=False)
