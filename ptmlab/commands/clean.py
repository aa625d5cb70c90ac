"""``ptmlab clean INPUT... --output OUT``: C4/Gopher-style cleaning with language id and deduplication."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    from ptmlab.clean.pipeline import CleanConfig
    from ptmlab.core.config import add_config_args

    p = sub.add_parser("clean", help="clean pre-training text: C4/Gopher filters, language id, deduplication",
                       description="Stream .jsonl/.txt files or folders (optionally .gz) through the cleaning "
                                   "rules; write OUT/clean.jsonl (kept documents, input order), OUT/removed.jsonl "
                                   "(id and rule), OUT/stats.json and OUT/report.html. `--list-rules` shows the "
                                   "rules and their parameters.")
    p.add_argument("inputs", nargs="*", metavar="INPUT", help=".jsonl / .txt files or folders, optionally .gz")
    p.add_argument("--output", "-o", dest="output", default=argparse.SUPPRESS, help="output folder")
    p.add_argument("--set", dest="set", action="append", default=argparse.SUPPRESS, metavar="RULE.PARAM=VALUE",
                   help="set a rule parameter (repeatable), e.g. --set language.threshold=0.8")
    p.add_argument("--config", help="YAML file with options and a params: {rule: {param: value}} section")
    p.add_argument("--list-rules", action="store_true", help="print the rules with their default parameters")
    add_config_args(p, CleanConfig, exclude=("inputs", "output", "set", "params"))
    p.set_defaults(func=_clean)


def _clean(args: argparse.Namespace) -> int:
    from ptmlab.clean.pipeline import CleanConfig, run_clean
    from ptmlab.core.config import resolve_config
    from ptmlab.core.errors import PtmlabError

    if args.list_rules:
        return _list_rules()
    if not args.inputs:
        raise PtmlabError("no input given: pass one or more .jsonl/.txt files or folders (optionally .gz)")
    cfg = resolve_config(CleanConfig, args, args.config)
    s = run_clean(cfg)
    t = s["totals"]
    print(f"kept {t['docs_out']:,} of {t['docs_in']:,} documents ({t['docs_kept_fraction']:.1%}), "
          f"{t['chars_kept_fraction']:.1%} of characters; {s['mb_per_s']:.2f} MB/s with {s['workers']} worker(s)")
    for name, r in s["per_rule"].items():
        if r["docs"] or r["lines"] or r["chars"]:
            print(f"  {name:18s} documents {r['docs']:>7,}  lines {r['lines']:>8,}  characters {r['chars']:>11,}")
    print(f"output: {cfg.output}")
    return 0


def _list_rules() -> int:
    import dataclasses

    from ptmlab.clean import RULE_ORDER, RULES

    for name in RULE_ORDER:
        cls = RULES.get(name)
        print(f"{name} ({cls.kind}): {RULES.help(name)}")
        for f in dataclasses.fields(cls.Params):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            print(f"    {name}.{f.name} = {default}")
    return 0
