"""Output policies: how much of the model's answer a client sees (a defence against extraction)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry

OUTPUT_POLICIES: Registry[Callable[[str], OutputPolicy]] = Registry("output policy")


@dataclass(frozen=True)
class OutputPolicy:
    name: str
    show_probs: bool
    decimals: int | None = None

    def render(self, probs: list[float]) -> list[float] | None:
        """The probabilities a client receives (None: label only)."""
        if not self.show_probs:
            return None
        if self.decimals is None:
            return [float(p) for p in probs]
        return [round(float(p), self.decimals) for p in probs]

    def score(self, value: float) -> float:
        """A regression head's score as a client receives it: in full, or rounded under ``rounded:K`` (a score is
        the answer itself, so ``label`` shows it too)."""
        return float(value) if self.decimals is None else round(float(value), self.decimals)


@OUTPUT_POLICIES.register("probs", help="labels and full probabilities")
def _probs(arg: str) -> OutputPolicy:
    return OutputPolicy("probs", True)


@OUTPUT_POLICIES.register("label", help="the label only")
def _label(arg: str) -> OutputPolicy:
    return OutputPolicy("label", False)


@OUTPUT_POLICIES.register("rounded", help="labels and probabilities rounded to K decimals (rounded:K)")
def _rounded(arg: str) -> OutputPolicy:
    try:
        k = int(arg)
    except ValueError:
        k = -1
    if not 0 <= k <= 6:
        raise PtmlabError(f"output policy 'rounded:{arg}' needs K decimals in 0..6: use e.g. --output-policy rounded:2")
    return OutputPolicy(f"rounded:{k}", True, k)


def parse_policy(spec: str) -> OutputPolicy:
    """``probs``, ``label`` or ``rounded:K``."""
    name, _, arg = spec.partition(":")
    if name == "rounded" and not arg:
        raise PtmlabError("output policy 'rounded' needs K decimals: use e.g. --output-policy rounded:2")
    if name != "rounded" and arg:
        raise PtmlabError(f"output policy '{spec}' takes no ':{arg}': use probs, label or rounded:K")
    return OUTPUT_POLICIES.get(name)(arg)
