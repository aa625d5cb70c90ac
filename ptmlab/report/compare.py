"""Compare runs: one table of their final numbers and overlaid curves."""

from __future__ import annotations

from pathlib import Path

from ptmlab.core.rundir import RunDir
from ptmlab.report.html import Report, new_figure
from ptmlab.report.plots import bar_plot


def comparison_rows(runs: list[RunDir]) -> list[dict]:
    rows = []
    for r in runs:
        s = r.summary()
        row = {"run": r.path.name, "task": s.get("task"), "model": s.get("model"), "strategy": s.get("strategy")}
        row.update({k: v for k, v in s.get("metrics", {}).items()})
        row.update({k: s.get(k) for k in ("params", "trainable_params", "train_seconds") if k in s})
        rows.append(row)
    return rows


def write_comparison(runs: list[RunDir], out: Path) -> Path:
    rows = comparison_rows(runs)
    rep = Report(f"ptmlab: comparison of {len(runs)} runs")
    columns = list(dict.fromkeys(k for r in rows for k in r))
    rep.table(rows, columns)
    fig, ax = new_figure()
    for r in runs:
        m = [x for x in r.metrics() if "loss" in x]
        if m:
            ax.plot([x["step"] for x in m], [x["loss"] for x in m], label=r.path.name)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.legend(fontsize=8)
    rep.figure(fig, "loss_curves", "training loss of each run")
    main = runs[0].summary().get("main_metric")
    if main and all(main in r for r in rows):
        rep.figure(bar_plot([r["run"] for r in rows], [r[main] for r in rows], f"dev {main}"), "metric",
                   f"dev {main} per run")
    return rep.write(out / "report.html")
