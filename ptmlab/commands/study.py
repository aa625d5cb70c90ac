"""``ptmlab study NAME [options]``: run one of the source articles' claims as an experiment.

Five names are not studies: ``ptmlab study all`` runs every registered study (resuming finished ones),
``ptmlab study dashboard`` writes one HTML page with every claim and verdict, ``ptmlab study collect`` copies
the results worth committing into ``studies/results/`` (with ``--runs``, an unfinished study's finished runs into
``studies/partial/``), ``ptmlab study restore`` puts packed runs back so that a study resumes on another machine,
and ``ptmlab study preregister NAME`` writes the design a run must match to be confirmatory
(``studies/preregistered/NAME.json``).
"""

from __future__ import annotations

import argparse

from ptmlab.core.cli_parser import ArgParser


def register(sub) -> None:
    p = sub.add_parser("study", help="run a study (a source claim as an experiment with a verdict); "
                                     "`study all`, `study dashboard`, `study collect`, `study restore`, "
                                     "`study preregister`",
                       add_help=False)
    p.add_argument("-h", "--help", dest="list_studies", action="store_true", help="list the studies")
    p.add_argument("name", nargs="?", help="study name; `ptmlab study` lists them")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def run_all(argv: list[str]) -> int:
    from ptmlab.report.table import print_table
    from ptmlab.studies.common import BUDGETS
    from ptmlab.studies.executor import EXECUTORS
    from ptmlab.studies.suite import FAILED, run_all, summary_rows

    p = ArgParser(prog="ptmlab study all", description="Run every registered study into OUTPUT/<study>/; "
                  "studies whose results.json exists are skipped (resumed) unless --overwrite.")
    p.add_argument("--budget", default="default", choices=BUDGETS,
                   help="small: minutes per study on the tiny model (tests, CI); default: each study's own sizes; "
                        "full: the real experiment (several seeds, full dev sets); gpu: sized to decide each claim on "
                        "one GPU (full where full decides it on 2 CPU cores)")
    p.add_argument("--output", default="runs/studies", help="directory for the studies' results")
    p.add_argument("--only", type=_names, default=None, help="comma-separated studies to run (default: all)")
    p.add_argument("--overwrite", action="store_true", help="rerun studies that already finished")
    p.add_argument("--executor", default="sequential", choices=EXECUTORS,
                   help="how each study's independent runs are run: sequential (one after another, here) or ray "
                        "(as tasks on a Ray cluster; pip install 'ptmlab[ray]')")
    p.add_argument("--ray-address", default=None,
                   help="with --executor ray: an existing cluster's address (default: start a local one)")
    p.add_argument("--ray-workers", type=int, default=2, help="with --executor ray: runs at once on the local "
                                                              "cluster")
    p.add_argument("--ray-cpus-per-run", type=int, default=0, help="with --executor ray: cores (and torch "
                   "threads) per run (0: this machine's cores divided by --ray-workers)")
    a = p.parse_args(argv)
    options = [] if a.executor == "sequential" else [
        "--executor", a.executor, "--ray-workers", str(a.ray_workers), "--ray-cpus-per-run", str(a.ray_cpus_per_run),
        *(["--ray-address", a.ray_address] if a.ray_address else [])]
    runs = run_all(a.output, a.budget, a.only, a.overwrite, options=options)
    print(f"\nstudies in {a.output} (budget {a.budget}):")
    print_table(summary_rows(runs))
    failed = [r.name for r in runs if r.status == FAILED]
    if failed:
        print(f"{len(failed)} of {len(runs)} studies failed: {', '.join(failed)}")
    print(f"dashboard: ptmlab study dashboard --output {a.output}")
    return 1 if failed else 0


def run_dashboard(argv: list[str]) -> int:
    from ptmlab.studies.dashboard import write_dashboard

    p = ArgParser(prog="ptmlab study dashboard", description="One HTML page with every registered study: claim, "
                  "source, the paper's number, ours with its interval, the verdict, plots and reports.")
    p.add_argument("--output", default="runs/studies", help="directory for index.html (and copies of the plots)")
    p.add_argument("--results", default=None, help="results directory: the --output of `ptmlab study all` or "
                                                    "studies/results (default: --output itself)")
    a = p.parse_args(argv)
    page = write_dashboard(a.output, a.results)
    print(f"dashboard: {page}")
    return 0


def run_collect(argv: list[str]) -> int:
    from ptmlab.studies.suite import RUN_RECORDS, collect, pack_runs

    p = ArgParser(prog="ptmlab study collect", description="Copy each study's results.json and plots/*.png "
                  "(not report.html) from a `ptmlab study all` directory into the committed results; with --runs, "
                  "the finished runs of a study that has not finished, to resume it on another machine.")
    p.add_argument("--from", dest="src", required=True, help="the --output of `ptmlab study all` (or the parent "
                                                             "of one study's --output)")
    p.add_argument("--to", dest="dst", default=None, help="destination (default: studies/results; with --runs, "
                                                          "studies/partial)")
    p.add_argument("--only", type=_names, default=None, help="comma-separated studies to copy (default: all found; "
                                                             "required with --runs)")
    p.add_argument("--runs", action="store_true", help=f"copy each finished run's records ({', '.join(RUN_RECORDS)}"
                   f"; no weights) instead of the results, for `ptmlab study restore` on the next machine")
    a = p.parse_args(argv)
    if a.runs:
        dst = a.dst or "studies/partial"
        packed = pack_runs(a.src, dst, a.only)
        print(f"packed {', '.join(f'{n} ({k} finished runs)' for n, k in packed.items())} into {dst}; on the next "
              f"machine: ptmlab study restore --from {dst} --to {a.src}")
        return 0
    dst = a.dst or "studies/results"
    names = collect(a.src, dst, a.only)
    print(f"copied {len(names)} studies into {dst}: {', '.join(names)}")
    return 0


def run_restore(argv: list[str]) -> int:
    from ptmlab.studies.suite import restore_runs

    p = ArgParser(prog="ptmlab study restore", description="Put the runs packed by `ptmlab study collect --runs` "
                  "back under a suite directory, so that the study, run again with the same options and --output, "
                  "reuses them as finished. Runs already finished there are left alone.")
    p.add_argument("--from", dest="src", default="studies/partial", help="the packed runs (default: studies/partial)")
    p.add_argument("--to", dest="dst", default="runs/studies", help="the suite directory: the parent of the "
                                                                    "study's --output (default: runs/studies)")
    p.add_argument("--only", type=_names, default=None, help="comma-separated studies (default: all packed)")
    a = p.parse_args(argv)
    for name, (restored, kept) in restore_runs(a.src, a.dst, a.only).items():
        print(f"{name}: {restored} finished runs restored into {a.dst}/{name}"
              + (f", {kept} already there left alone" if kept else ""))
    return 0


def run_preregister(argv: list[str]) -> int:
    from ptmlab.studies.prereg import main

    return main(argv)


SUITE_COMMANDS = {"all": run_all, "dashboard": run_dashboard, "collect": run_collect, "restore": run_restore,
                  "preregister": run_preregister}


def run(args: argparse.Namespace) -> int:
    from ptmlab.studies import load_all

    if args.name in SUITE_COMMANDS:
        return SUITE_COMMANDS[args.name](args.rest)
    studies = load_all()
    if not args.name or args.list_studies:
        print("usage: ptmlab study NAME [options]   (ptmlab study NAME --help: a study's options)\n")
        print("studies:")
        for name in studies:
            print(f"  {name:24} {studies.help(name)}")
        print("\n  all                      run every study: ptmlab study all --budget small|default|full|gpu "
              "--output D"
              "\n  dashboard                one page of every claim and verdict: ptmlab study dashboard --output D"
              "\n  collect                  copy results to commit: ptmlab study collect --from D --to studies/results"
              "\n  restore                  resume on another machine: ptmlab study restore --from studies/partial "
              "--to D"
              "\n  preregister              fix a run's design before it runs: ptmlab study preregister NAME "
              "--budget B")
        return 0
    return int(studies.get(args.name)(args.rest) or 0)
