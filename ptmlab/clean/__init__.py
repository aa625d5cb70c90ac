"""Cleaning pre-training text the C4 way: line and document filters, language identification, exact and near
deduplication, streamed through worker processes (``ptmlab clean``; docs/cleaning.md).

Importing the package registers every rule in ``RULES``.
"""

from ptmlab.clean import dedup, filters  # noqa: F401  (registers the rules)
from ptmlab.clean.pipeline import CleanConfig, run_clean
from ptmlab.clean.rules import RULE_ORDER, RULES

__all__ = ["CleanConfig", "RULES", "RULE_ORDER", "run_clean"]
