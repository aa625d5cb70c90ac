"""The rule registry of ``ptmlab clean``: each rule is a named class with a parameter dataclass of published defaults.

Two kinds of rule exist. A *document* rule looks at one document alone (it may drop lines or the whole document), so
it runs in worker processes. A *corpus* rule needs what came before (deduplication): its ``prepare`` part runs in
the workers (hashes, MinHash signatures) and its ``decide`` part runs once, in input order, in the parent process.
Rules run in ``RULE_ORDER``; a document is removed by the first rule that rejects it and charged to that rule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from ptmlab.core.config import build_config
from ptmlab.core.errors import PtmlabError, did_you_mean
from ptmlab.core.registry import Registry

RULES: Registry[type[Rule]] = Registry("cleaning rule")

# The order rules run in when selected: line repairs and line filters first, then document filters, then the
# corpus-level deduplication (exact before near, so an exact copy is charged to the cheaper rule).
RULE_ORDER = ["boilerplate_lines", "unwrap", "c4_lines", "c4_documents", "gopher_quality", "gopher_repetition",
              "language", "exact_dedup", "near_dedup", "span_dedup"]


@dataclass
class Outcome:
    """What a document rule did: the new text, or ``removed`` with a reason; ``merged`` counts joined lines."""

    text: str
    removed: bool = False
    reason: str = ""
    merged: int = 0


class Rule:
    """Base of every rule. ``Params`` is a dataclass; ``kind`` is ``"document"`` or ``"corpus"``."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "document"

    @dataclass(frozen=True)
    class Params:
        pass

    def __init__(self, params: Any):
        self.params = params

    # document rules
    def apply(self, text: str) -> Outcome:  # pragma: no cover - every document rule overrides it
        raise NotImplementedError

    # corpus rules: ``prepare`` in a worker, ``decide`` in the parent (in input order)
    def prepare(self, text: str) -> Any:  # pragma: no cover - every corpus rule overrides it
        raise NotImplementedError

    def decide(self, text: str, prepared: Any) -> Outcome:  # pragma: no cover
        raise NotImplementedError


def register(cls: type[Rule]) -> type[Rule]:
    """Class decorator: add a rule under its ``name`` (its docstring's first line is its help)."""
    if cls.name not in RULE_ORDER:
        raise ValueError(f"rule '{cls.name}' has no place in RULE_ORDER")
    RULES.add(cls.name, cls)
    return cls


def parse_overrides(pairs: list[str]) -> dict[str, dict[str, str]]:
    """``["c4_lines.min_words=3", ...]`` -> ``{"c4_lines": {"min_words": "3"}}``."""
    out: dict[str, dict[str, str]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        rule, dot, param = key.strip().partition(".")
        if not sep or not dot or not rule or not param:
            raise PtmlabError(f"--set '{pair}' is not RULE.PARAM=VALUE: write it like c4_lines.min_words=3")
        out.setdefault(rule, {})[param] = value.strip()
    return out


def select_rules(rules: list[str] | None, skip: list[str] | None) -> list[str]:
    """The rule names to run, in pipeline order; unknown names are a one-line error."""
    for name in list(rules or []) + list(skip or []):
        if name not in RULES:
            raise PtmlabError(f"unknown cleaning rule '{name}': {did_you_mean(name, RULES.names())}")
    chosen = set(rules) if rules else set(RULE_ORDER)
    return [n for n in RULE_ORDER if n in chosen and n not in set(skip or [])]


def build_rules(names: list[str], params: dict[str, dict[str, Any]]) -> list[Rule]:
    """Instantiate the named rules with their published defaults overridden by ``params[rule]``."""
    for rule in params:
        if rule not in RULES:
            raise PtmlabError(f"parameters given for unknown rule '{rule}': {did_you_mean(rule, RULES.names())}")
    return [RULES.get(n)(build_config(RULES.get(n).Params, dict(params.get(n) or {}), source=f"rule '{n}'"))
            for n in names]


def describe_params(rule: Rule) -> dict[str, Any]:
    return dataclasses.asdict(rule.params)
