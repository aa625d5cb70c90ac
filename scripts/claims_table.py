"""Regenerate the README's "Claims" section from the committed study results.

    python scripts/claims_table.py                 # rewrite the table between the claims markers in README.md
    python scripts/claims_table.py --check         # exit 1 when README.md is not what the results give

The table is the dashboard's (``ptmlab study dashboard``) in Markdown: one row per registered study, read from
``studies/results/<study>/results.json`` (copied there by ``ptmlab study collect``), each verdict marked
confirmatory or exploratory. The section opens with the forest plot of every claim, written beside the results as
``studies/results/forest.svg``; ``--check`` checks both.
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
    p.add_argument("--results", default=str(ROOT / "studies" / "results"), help="committed study results")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if the README is out of date")
    a = p.parse_args(argv)
    try:
        changed = update_readme(Path(a.readme), Path(a.results), write=not a.check)
    except PtmlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.check:
        if changed:
            print(f"{a.readme}: the Claims section is out of date (run python scripts/claims_table.py)")
        return 1 if changed else 0
    print(f"{a.readme}: Claims section {'updated' if changed else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
