"""``ptmlab models``: list the zoo with sizes; ``ptmlab models install mpnet`` installs the optional teacher."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("models", help="list zoo models (or install the optional mpnet)")
    p.add_argument("action", nargs="?", default="list", choices=["list", "install"])
    p.add_argument("name", nargs="?", help="model to install (mpnet)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmlab.core.errors import PtmlabError
    from ptmlab.models.zoo import ZOO, describe

    if args.action == "install":
        if args.name != "mpnet":
            raise PtmlabError(f"only 'mpnet' is installed on request, not '{args.name}': "
                              f"run `ptmlab models install mpnet`")
        from ptmlab.models.mpnet_install import install_mpnet

        print(f"mpnet ready in {install_mpnet()}")
        return 0
    print(f"{'name':8} {'params':>12} {'layers':>6} {'hidden':>6} {'heads':>5} {'vocab':>7}  description")
    for name, entry in ZOO.items():
        try:
            d = describe(name)
            print(f"{name:8} {d['params']:>12,} {d['layers']:>6} {d['hidden']:>6} {d['heads']:>5} "
                  f"{d['vocab']:>7}  {entry.description}")
        except PtmlabError as e:
            print(f"{name:8} {'-':>12} {'-':>6} {'-':>6} {'-':>5} {'-':>7}  not available: {e}")
    print("Any local model directory or ptmlab run directory (and a hub id when online) is accepted as well.")
    return 0
