"""``ptmlab study NAME [options]``: run one of the source articles' claims as an experiment."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("study", help="run a study (a source claim as an experiment with a verdict)",
                       add_help=False)
    p.add_argument("name", nargs="?", help="study name; `ptmlab study` lists them")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmlab.studies import load_all

    studies = load_all()
    if not args.name or args.name in ("-h", "--help"):
        print("studies:")
        for name in studies:
            print(f"  {name:24} {studies.help(name)}")
        return 0
    return int(studies.get(args.name)(args.rest) or 0)
