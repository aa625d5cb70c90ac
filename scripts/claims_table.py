"""Regenerate docs/claims.md and the README's "Claims" summary from the committed study results.

    python scripts/claims_table.py                 # rewrite docs/claims.md and the README's claims summary
    python scripts/claims_table.py --check         # exit 1 when either is not what the results give

docs/claims.md holds the dashboard's table (``ptmlab study dashboard``) in Markdown with a legend: one row per
registered study, read from ``studies/results/<study>/results.json`` (copied there by ``ptmlab study collect``),
each verdict marked confirmatory or exploratory. The README keeps a few generated lines between its claims markers:
how many claims have each outcome, how many are confirmatory, and a link to docs/claims.md. Both open with the
forest plot of every claim, written beside the results as ``studies/results/forest.svg``; ``--check`` checks all
three.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    from ptmlab.core.errors import PtmlabError
    from ptmlab.studies.dashboard import update_readme

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--readme", default=str(ROOT / "README.md"), help="README with the claims markers")
    p.add_argument("--claims", default=None,
                   help="the page with the full table (default: docs/claims.md beside the README)")
    p.add_argument("--results", default=str(ROOT / "studies" / "results"), help="committed study results")
    p.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 if the README, the claims page or the plot is out of date")
    a = p.parse_args(argv)
    try:
        claims = Path(a.claims) if a.claims else None
        changed = update_readme(Path(a.readme), Path(a.results), write=not a.check, claims=claims)
    except PtmlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.check:
        if changed:
            print(f"{a.readme}: the Claims section, the claims page or the forest plot is out of date "
                  "(run python scripts/claims_table.py)")
        return 1 if changed else 0
    print(f"{a.readme}: Claims section and claims page {'updated' if changed else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
