"""What every study shares: argument parsing from a dataclass, running fine-tuning variants, writing results."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ptmlab.core.config import add_config_args, build_config, resolve_config
from ptmlab.core.io import atomic_write_json
from ptmlab.report.html import Report


def parse_study_args(name: str, cls, argv: list[str], description: str = ""):
    from ptmlab.cli import _Parser

    p = _Parser(prog=f"ptmlab study {name}", description=description)
    p.add_argument("--config", help="YAML file with options")
    add_config_args(p, cls)
    args = p.parse_args(argv)
    return resolve_config(cls, args, args.config)


def finetune_variant(base, out_dir: Path, **overrides) -> dict:
    """Fine-tune one variant of a study into ``out_dir/<name>``; reuses a finished variant's summary."""
    from ptmlab.core.rundir import RunDir
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(FinetuneConfig) if hasattr(base, f.name)}
    values.update(overrides)
    values["output"] = str(out_dir)
    if (out_dir / "summary.json").is_file() and not getattr(base, "overwrite", False):
        return RunDir(out_dir).summary()
    values["overwrite"] = True
    cfg = build_config(FinetuneConfig, values, source="study")
    return run_finetune(cfg, command="study")


def write_study(out: Path, title: str, rows: list[dict], verdict: str, figures=(), extra: dict | None = None,
                columns: list[str] | None = None) -> None:
    """results.json + report.html (table, plots, verdict), and the table and verdict on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "results.json", {"title": title, "rows": rows, "verdict": verdict, **(extra or {})})
    rep = Report(title)
    rep.heading("Verdict").text(verdict).heading("Results").table(rows, columns)
    for fig, name, caption in figures:
        rep.figure(fig, name, caption)
    rep.write(out / "report.html")
    print_table(rows, columns)
    print(f"\nverdict: {verdict}")
    print(f"report: {out / 'report.html'}")


def print_table(rows: list[dict], columns: list[str] | None = None) -> None:
    if not rows:
        return
    columns = columns or list(rows[0].keys())

    def fmt(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.4f}" if abs(v) < 100 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def default_task() -> str:
    """sst2 where the GLUE data is present, else the built-in tweets."""
    from ptmlab.data.loaders import default_glue_dir

    return "sst2" if default_glue_dir() else "tweets"


