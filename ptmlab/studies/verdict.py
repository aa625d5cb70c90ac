"""Verdicts that can go either way: a claim, an estimate with its uncertainty, and a rule fixed before the numbers.

Every study states its claim as a ``Claim`` (what the source says, where, the paper's number, and the rule in
words) at module level, before any code runs. Its numbers become an ``Estimate``: a value with a confidence
interval, from a paired comparison across seeds (``paired_seeds``), a paired bootstrap over dev examples
(``paired_bootstrap``) or a plain bootstrap of one quantity (``bootstrap_mean``). A decision function turns the
estimate into one of three outcomes:

- ``decide_above(est, t)``: the quantity exceeds ``t`` -- supported when the whole interval is above ``t``,
  not supported when the whole interval is below it, inconclusive when the interval straddles it;
- ``decide_within(est, m)``: the quantity is within ``±m`` (an equivalence claim, "does not hurt") -- supported when
  the interval lies inside ``[-m, m]``, not supported when it lies wholly outside, inconclusive otherwise;
- ``combine(verdicts)``: a claim made of parts -- not supported if any part is not, supported if all are.

So a single lucky seed or two examples of 872 cannot decide a claim: an interval that includes "no effect" is
reported as inconclusive, and the results say so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "supported", "not supported", "inconclusive"
OUTCOMES = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE)


@dataclass(frozen=True)
class Claim:
    """What a study tests: written at the top of its module, before its numbers exist."""

    study: str          # registered study name
    claim: str          # the claim, as the source makes it
    source: str         # question of the source articles ("Q10") and/or paper ("Jain & Wallace, NAACL 2019")
    paper: str          # the paper's own number(s), as text ("BERT-base 0.742 best-layer accuracy"); "" if none
    rule: str           # the decision rule in words, including the noise model

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Estimate:
    """One measured quantity with its confidence interval and how it was obtained."""

    metric: str                 # what is measured ("accuracy gain of A over B", "best-layer accuracy")
    value: float
    low: float
    high: float
    n: int                      # seeds or examples behind it
    method: str                 # "paired t over 3 seeds (95%)", "paired bootstrap over 872 examples (95%)"

    def to_dict(self) -> dict:
        """Standard JSON: an unbounded end (one run, no interval) is written as null."""
        d = asdict(self)
        for k in ("value", "low", "high"):
            if not math.isfinite(d[k]):
                d[k] = None
        return d

    def text(self, digits: int = 4) -> str:
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}] ({self.method})"


@dataclass(frozen=True)
class Verdict:
    """The outcome, the one-sentence reason with its numbers, and the estimate it rests on."""

    outcome: str
    reason: str
    estimate: Estimate | None = None

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"verdict outcome must be one of {OUTCOMES}, not {self.outcome!r}")

    def text(self) -> str:
        return f"{self.outcome}: {self.reason}"

    def to_dict(self) -> dict:
        return {"outcome": self.outcome, "reason": self.reason,
                "estimate": self.estimate.to_dict() if self.estimate else None}


def _t_quantile(confidence: float, df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, df))


def mean_interval(values: Sequence[float], metric: str, confidence: float = 0.95) -> Estimate:
    """Mean of independent runs (seeds) with a Student-t interval; one value gives an infinitely wide interval,
    so a one-seed result can never be 'supported' or 'not supported' by an interval rule."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("no values to estimate from")
    n = len(xs)
    mean = sum(xs) / n
    if n == 1:
        return Estimate(metric, mean, -math.inf, math.inf, 1, "one run: no interval")
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = _t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return Estimate(metric, mean, mean - half, mean + half, n, f"t interval over {n} runs ({confidence:.0%})")


def paired_seeds(a: Sequence[float], b: Sequence[float], metric: str, confidence: float = 0.95) -> Estimate:
    """Mean of ``a[i] - b[i]`` over seeds (the same seed for both sides), with a paired t interval."""
    if len(a) != len(b):
        raise ValueError(f"paired comparison needs as many runs on each side ({len(a)} vs {len(b)})")
    est = mean_interval([x - y for x, y in zip(a, b, strict=True)], metric, confidence)
    return Estimate(metric, est.value, est.low, est.high, est.n,
                    f"paired t over {est.n} seeds ({confidence:.0%})" if est.n > 1 else "one seed: no interval")


def paired_bootstrap(a: Sequence[float], b: Sequence[float], metric: str, confidence: float = 0.95,
                     resamples: int = 2000, seed: int = 0) -> Estimate:
    """Mean per-example difference ``a[i] - b[i]`` (for accuracy: 1/0 correctness of each system on the same
    dev example) with a percentile bootstrap interval over examples."""
    import numpy as np

    if len(a) != len(b):
        raise ValueError(f"paired bootstrap needs the same examples on both sides ({len(a)} vs {len(b)})")
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.size == 0:
        raise ValueError("no examples to bootstrap")
    return _bootstrap(d, metric, confidence, resamples, seed, f"paired bootstrap over {d.size} examples")


def bootstrap_mean(values: Sequence[float], metric: str, confidence: float = 0.95, resamples: int = 2000,
                   seed: int = 0) -> Estimate:
    """Mean of per-example values (e.g. 1/0 correctness) with a percentile bootstrap interval."""
    import numpy as np

    d = np.asarray(values, dtype=float)
    if d.size == 0:
        raise ValueError("no examples to bootstrap")
    return _bootstrap(d, metric, confidence, resamples, seed, f"bootstrap over {d.size} examples")


def _bootstrap(d, metric: str, confidence: float, resamples: int, seed: int, what: str) -> Estimate:
    import numpy as np

    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    lo, hi = np.quantile(means, [0.5 - confidence / 2, 0.5 + confidence / 2])
    return Estimate(metric, float(d.mean()), float(lo), float(hi), int(d.size), f"{what} ({confidence:.0%})")


def same_within_seeds(scores: Mapping[str, Sequence[float]], tol: float = 1e-9) -> bool:
    """Every variant at the same score on every seed, as when every fine-tuned model predicts one class: a
    downstream comparison that cannot separate the variants (a tie, not evidence that they are equal)."""
    per_seed = list(zip(*scores.values(), strict=True))
    return bool(per_seed) and all(max(vals) - min(vals) < tol for vals in per_seed)


def decide_above(est: Estimate, threshold: float = 0.0, what: str = "") -> Verdict:
    """Claim: the quantity is above ``threshold``."""
    name = what or est.metric
    if est.low > threshold:
        return Verdict(SUPPORTED, f"{name} {est.text()} is above {threshold:g}", est)
    if est.high < threshold:
        return Verdict(NOT_SUPPORTED, f"{name} {est.text()} is below {threshold:g}", est)
    return Verdict(INCONCLUSIVE, f"{name} {est.text()} includes {threshold:g}", est)


def decide_within(est: Estimate, margin: float, what: str = "") -> Verdict:
    """Claim: the quantity is within ``±margin`` of zero (no meaningful difference)."""
    name = what or est.metric
    if -margin <= est.low and est.high <= margin:
        return Verdict(SUPPORTED, f"{name} {est.text()} lies within ±{margin:g}", est)
    if est.low > margin or est.high < -margin:
        return Verdict(NOT_SUPPORTED, f"{name} {est.text()} lies outside ±{margin:g}", est)
    return Verdict(INCONCLUSIVE, f"{name} {est.text()} is not resolved against ±{margin:g}", est)


def combine(verdicts: Sequence[Verdict], joiner: str = "; ") -> Verdict:
    """A claim made of parts: not supported if any part is not, supported if every part is, else inconclusive."""
    if not verdicts:
        raise ValueError("no verdicts to combine")
    outcomes = {v.outcome for v in verdicts}
    outcome = NOT_SUPPORTED if NOT_SUPPORTED in outcomes else SUPPORTED if outcomes == {SUPPORTED} else INCONCLUSIVE
    estimate = verdicts[0].estimate if len(verdicts) == 1 else None
    return Verdict(outcome, joiner.join(v.text() for v in verdicts), estimate)


def run_metadata(budget: str | None = None, seeds: Sequence[int] | None = None) -> dict:
    """What a committed result must carry to be reproducible: command, versions, machine, budget, seeds."""
    import os
    import platform
    import sys
    import time

    import torch
    import transformers

    import ptmlab

    machine = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version()}
    if torch.cuda.is_available():
        machine["gpu"] = torch.cuda.get_device_name(0)
    try:
        machine["load_average"] = list(os.getloadavg())
    except OSError:
        pass
    args = sys.argv[1:] if sys.argv and sys.argv[0].endswith(("ptmlab", "__main__.py")) else None
    return {"command": "ptmlab " + " ".join(args) if args is not None else None, "budget": budget,
            "seeds": list(seeds) if seeds is not None else None,
            "versions": {"ptmlab": ptmlab.__version__, "torch": torch.__version__,
                         "transformers": transformers.__version__},
            "machine": machine, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
