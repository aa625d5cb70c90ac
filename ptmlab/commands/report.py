"""``ptmlab report RUN...``: rebuild one run's report, or compare several runs in one table and plots."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("report", help="write a report for one run or a comparison of several")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--output", help="folder for the comparison report (default: runs/comparison)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmlab.core.rundir import RunDir
    from ptmlab.report.compare import comparison_rows, write_comparison
    from ptmlab.report.run_report import write_run_report
    from ptmlab.report.table import print_table

    runs = [RunDir.open(r) for r in args.runs]
    for r in runs:
        r.summary()  # a clear error for an unfinished run
    print_table(comparison_rows(runs))
    if len(runs) == 1 and not args.output:
        print(f"report: {write_run_report(runs[0])}")
        return 0
    out = Path(args.output or "runs/comparison")
    print(f"report: {write_comparison(runs, out)}")
    return 0
