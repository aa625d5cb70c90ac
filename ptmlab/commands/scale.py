"""``ptmlab scale``: a scaling sweep over model sizes and FLOP budgets, with power-law fits and verdicts."""

from __future__ import annotations

import argparse

from ptmlab.core.cli_parser import config_command


def register(sub) -> None:
    from ptmlab.scaling.config import ScaleConfig

    config_command(sub, "scale", ScaleConfig, run,
                   help="scaling sweep: model sizes x FLOP budgets, power-law fits, compute frontier",
                   description="Pre-train every size (LAYERSxHIDDEN) at every FLOP budget and seed as an "
                               "ordinary pre-training run under --output/runs/. Finished runs are skipped and "
                               "killed ones resumed when the same command runs again; several processes (or "
                               "--workers N) share one sweep. Writes results.json and report.html with the "
                               "compute frontier, power-law fits and the Q8/Q19 verdicts.")


def run(args: argparse.Namespace) -> int:
    from ptmlab.core.config import resolve_config
    from ptmlab.report.table import print_table
    from ptmlab.scaling.config import ScaleConfig
    from ptmlab.scaling.report import COLUMNS
    from ptmlab.scaling.sweep import run_sweep

    cfg = resolve_config(ScaleConfig, args, args.config)
    r = run_sweep(cfg)
    print_table(r["rows"], COLUMNS)
    print(f"\nverdict: {r['verdict']}")
    if r["pending"]:
        print(f"{len(r['pending'])} runs are still running in other workers or not started: run the same command "
              f"again to finish the sweep")
    print(f"report: {cfg.output}/report.html")
    return 0
