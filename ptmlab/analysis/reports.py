"""Run one analysis into an output directory: summary.json, tables, report.html with plots (used by the CLI)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ptmlab.analysis import plots
from ptmlab.core.io import atomic_write_json, atomic_write_text
from ptmlab.core.rundir import RunDir
from ptmlab.report.html import Report


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    cols = list(rows[0])
    lines = [",".join(cols)] + [",".join(f"{r[c]:.6g}" if isinstance(r[c], float) else str(r[c]) for c in cols)
                                for r in rows]
    atomic_write_text(path, "\n".join(lines) + "\n")


def _fmt_units(units: list[tuple[int, ...]]) -> str:
    return ", ".join(f"L{u[0]}" + (f"H{u[1]}" if len(u) > 1 else "") for u in units) or "none"


def write_ablation(run: RunDir, table, unit: str, title: str, extra: dict) -> dict:
    """Heatmaps (heads) or bars (layers), the per-unit table (json + csv) and the summary."""
    rows = table.rows()
    atomic_write_json(run.file(f"{unit}s.json"), rows)
    write_csv(run.file(f"{unit}s.csv"), rows)
    helps = {k: table.helpful(k) for k in ("removed", "uniform")}
    summary = {"metric": table.metric, "base": table.base, "units": len(rows), **extra}
    for k in helps:
        arr = table.removed if k == "removed" else table.uniform
        summary[f"{k}_helps_count"] = len(helps[k])
        summary[f"{k}_helps"] = [list(u) for u in helps[k]]
        summary[f"{k}_worst_delta"] = float(np.nanmin(arr - table.base))
        summary[f"{k}_best_delta"] = float(np.nanmax(arr - table.base))
    run.write_summary(summary)
    rep = Report(title)
    rep.text(f"intact model: {table.metric} {table.base:.4f}. Removing a {unit} helps for "
             f"{len(helps['removed'])} of {len(rows)} ({_fmt_units(helps['removed'])}); uniform attention helps for "
             f"{len(helps['uniform'])} ({_fmt_units(helps['uniform'])}).")
    if table.removed.ndim == 2:
        rep.figure(plots.heatmap(table.removed - table.base, f"{table.metric} change, head removed"),
                   "heads_removed", "change of the dev metric when each head is removed (layer x head)")
        rep.figure(plots.heatmap(table.uniform - table.base, f"{table.metric} change, uniform attention"),
                   "heads_uniform", "change of the dev metric when each head attends uniformly")
    else:
        layers = [str(i) for i in range(len(table.removed))]
        rep.figure(plots.grouped_bars(layers, {"layer removed": list(table.removed),
                                               "uniform attention": list(table.uniform)}, table.metric,
                                      "layer ablation", base=table.base), "layers", "dev metric per ablated layer")
    rep.heading("Table").table(rows)
    rep.write(run.file("report.html"))
    return summary
