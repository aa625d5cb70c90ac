"""Verdicts that can go either way: a claim, the conditions under which it can be tested, an estimate with its
uncertainty, and a rule fixed before the numbers.

Every study states its claim as a ``Claim`` at module level, before any code runs: what the source says, where, the
paper's number (and, where the paper quotes one, its effect in the estimate's own units, ``paper_effect``), the
**validity conditions** (``conditions``: when the comparison can test the claim at all) and the rule in words.

Four outcomes:

- ``cannot test``: a validity condition is unmet on the run's own numbers (a fine-tuned system at its task's trivial
  predictor, a teacher no better than the student trained alone, a reference trained less than what it is compared
  with, a "shared" ticket as big as the model, pre-training that never left the unigram plateau, a number the run
  did not record). The rule's interval is still reported, but no claim is read from it. ``assess`` makes this
  outcome from ``Condition`` objects, each ``{condition, value, threshold, met}`` with the comparison it makes
  (``compare``); a condition whose value is missing (``None``) is unmet.
- ``supported`` / ``not supported`` / ``inconclusive``: what the rule says when every condition is met:

  - ``decide_above(est, t)``: the quantity exceeds ``t`` -- supported when the whole interval is above ``t``, not
    supported when it is wholly below, inconclusive when the interval straddles it;
  - ``decide_noninferior(est, t, above)``: a non-inferiority claim against a margin stated before the run ("does
    as well", "keeps accuracy within a point") -- supported when the one-sided 95% bound on the claim's side clears
    ``t``, not supported when the opposite one-sided 95% bound lies beyond it, inconclusive otherwise
    (``one_sided_bound`` reads the bounds from the interval);
  - ``decide_within(est, m)``: the quantity is within ``±m`` (an equivalence claim) -- two one-sided tests at 95%:
    supported when both one-sided bounds lie inside ``[-m, m]``, not supported when one lies beyond ``±m`` on the
    far side, inconclusive otherwise;
  - ``combine(verdicts, names)``: a claim made of parts, decided part by part and each part named and shown --
    cannot test if any part cannot, else not supported if any part is not, supported if all are.

  "Not supported" always rests on an interval that excludes the claim, never on point values; each rule records the
  line(s) it draws in the estimate's unit (``Verdict.thresholds``) for the forest plot.

Estimates. ``paired_seeds`` / ``mean_interval``: a Student-t interval over seeds (each seed one number).
``hierarchical_bootstrap``: where examples matter too (per-example correctness of several seeds), resample seeds,
then dev examples (one draw of examples shared by the drawn seeds: every seed saw the same dev set), and give
``mean ± t(S-1) × bootstrap SE`` -- never the seeds' copies of one example pooled as independent examples.
``paired_bootstrap`` / ``bootstrap_mean``: a percentile bootstrap over examples, for deterministic measurements
(tokenization, a fixed model's probes) where there is no seed. ``resamples_for(confidence)``: enough resamples
that the tail a (Bonferroni-corrected) interval reads holds at least 20 resamples.

Detectable effect (``detectable_effect``): the smallest true effect (distance from the rule's threshold) that the
run would have declared with probability 80% at its own noise: ``(q(1 - α/2) + q(0.8)) × SE`` with
``SE = half-width / q(1 - α/2)``; ``q`` is the Student-t quantile with the estimate's ``df`` (seeds - 1) for
seed-level intervals, the normal one otherwise; for an interval that is not symmetric the half-width is half its
length. Every quantitative rule reports it beside its interval. An inconclusive verdict whose detectable effect
exceeds the paper's effect says "underpowered: could detect ±X, the paper reports Y" and the budget that would
decide it, ``((z(1 - α/2) + z(0.8)) × SD / Y)²`` seeds (or examples, for an example-level bootstrap) with
``SD = SE × √n`` the spread of one seed; for a seeds-then-examples interval, the seeds on the same examples and the
examples at the run's seeds, since more seeds leave the shared examples' noise (``budget_text``). For an
equivalence rule the margin plays the paper's part: an interval wider than ``±m`` can never fit inside it.

So a single lucky seed or two examples of 872 cannot decide a claim, and a comparison that cannot test the claim
is not read as evidence either way.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, CANNOT_TEST = "supported", "not supported", "inconclusive", "cannot test"
OUTCOMES = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, CANNOT_TEST)
NOT_RECORDED = "not recorded by the run"  # why a condition's value is missing, unless its check says otherwise
POWER = 0.8   # the power the detectable effect is computed at
COMPARE = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


@dataclass(frozen=True)
class Claim:
    """What a study tests: written at the top of its module, before its numbers exist."""

    study: str          # registered study name
    claim: str          # the claim, as the source makes it
    source: str         # question of the source articles ("Q10") and/or paper ("Jain & Wallace, NAACL 2019")
    paper: str          # the paper's own number(s), as text ("BERT-base 0.742 best-layer accuracy"); "" if none
    rule: str           # the decision rule in words, including the noise model
    conditions: tuple[str, ...] = ()    # validity conditions, in words, checked on the run's numbers before the rule
    paper_effect: float | None = None   # the paper's effect in the unit of the rule's estimate (0.006: +0.6 points)
    paper_part: int | None = None       # for a rule of several parts: the part (0-based) the paper's effect is about
    metric: str = ""                    # what the rule's estimate measures, in its unit
    margin: float | None = None         # the rule's margin or threshold in that unit (0.01: one point)
    parts: tuple[str, ...] = ()         # a claim of several parts: each part's name, in the rule's order

    def to_dict(self) -> dict:
        d = asdict(self)
        d["conditions"] = list(self.conditions)
        d["parts"] = list(self.parts)
        for key, empty in (("paper_part", None), ("metric", ""), ("margin", None), ("parts", [])):
            if d[key] == empty:
                del d[key]
        return d


@dataclass(frozen=True)
class Condition:
    """One validity condition checked on a run's numbers: ``met`` is ``value compare threshold`` (a missing value,
    None, is unmet: the run did not record what the condition needs)."""

    condition: str
    value: float | None
    threshold: float | None
    met: bool
    compare: str = ">"
    missing: str = field(default=NOT_RECORDED, compare=False)  # why ``value`` is None, in the text

    def __post_init__(self):
        if self.compare not in COMPARE:
            raise ValueError(f"condition comparison must be one of {tuple(COMPARE)}, not {self.compare!r}")
        if self.met != holds(self.value, self.compare, self.threshold):
            raise ValueError(f"condition {self.condition!r}: met={self.met} disagrees with {self.value} "
                             f"{self.compare} {self.threshold}")

    @classmethod
    def check(cls, condition: str, value, compare: str, threshold, missing: str = NOT_RECORDED) -> Condition:
        """The condition with ``met`` computed; ``value`` None (not recorded, or not established: ``missing``
        says which) is unmet."""
        value = None if value is None or not math.isfinite(float(value)) else float(value)
        threshold = None if threshold is None else float(threshold)
        return cls(condition, value, threshold, holds(value, compare, threshold), compare, missing)

    def text(self) -> str:
        if self.value is None:
            return f"{self.condition}: {self.missing} (needed {self.compare} {_g(self.threshold)})"
        state = "met" if self.met else "unmet"
        return f"{self.condition}: {_g(self.value)} {self.compare if self.met else _negate(self.compare)} " \
               f"{_g(self.threshold)} ({state})"

    def to_dict(self) -> dict:
        return {"condition": self.condition, "value": self.value, "threshold": self.threshold, "met": self.met,
                "compare": self.compare}

    @classmethod
    def from_dict(cls, d: Mapping) -> Condition:
        return cls(str(d["condition"]), d.get("value"), d.get("threshold"), bool(d["met"]), d.get("compare", ">"))


def holds(value, compare: str, threshold) -> bool:
    """``value compare threshold``; False when either is missing."""
    if value is None or threshold is None:
        return False
    return bool(COMPARE[compare](float(value), float(threshold)))


def _negate(compare: str) -> str:
    return {">": "<=", ">=": "<", "<": ">=", "<=": ">"}[compare]


def _g(x) -> str:
    if x is None:
        return "null"
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


@dataclass(frozen=True)
class Estimate:
    """One measured quantity with its confidence interval and how it was obtained."""

    metric: str                 # what is measured ("accuracy gain of A over B", "best-layer accuracy")
    value: float
    low: float
    high: float
    n: int                      # seeds (seed-level intervals) or examples behind it
    method: str                 # "paired t over 3 seeds (95%)", "paired bootstrap over 872 examples (95%)"
    df: int | None = None       # degrees of freedom of a t interval over seeds (n - 1); None: normal quantiles
    confidence: float = 0.95
    examples: int | None = None     # seeds then examples (``hierarchical_bootstrap``): the examples every seed shares
    example_se: float | None = None  # ... and the standard error their resampling alone gives (seeds fixed), the
    #                                  part of the noise that more seeds on the same examples do not shrink

    def to_dict(self) -> dict:
        """Standard JSON: an unbounded end (one run, no interval) is written as null; the example split only where
        it was measured."""
        d = asdict(self)
        for k in ("value", "low", "high"):
            if not math.isfinite(d[k]):
                d[k] = None
        for k in ("examples", "example_se"):
            if d[k] is None:
                del d[k]
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> Estimate:
        """An estimate read back from results.json (null ends are unbounded; ``df`` inferred from "t over N")."""
        def num(k, default):
            v = d.get(k)
            return float(v) if isinstance(v, int | float) else default

        method = str(d.get("method") or "")
        df = d.get("df")
        if df is None and " t " in f" {method} " and int(d.get("n") or 0) > 1:
            df = int(d["n"]) - 1
        examples = d.get("examples")
        return cls(str(d.get("metric") or ""), num("value", math.nan), num("low", -math.inf), num("high", math.inf),
                   int(d.get("n") or 0), method, df, num("confidence", 0.95),
                   int(examples) if isinstance(examples, int | float) else None, num("example_se", None))

    def text(self, digits: int = 4) -> str:
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}] ({self.method})"

    def half_width(self) -> float:
        return (self.high - self.low) / 2


def _quantile(p: float, df: int | None) -> float:
    from scipy import stats

    return float(stats.t.ppf(p, df) if df else stats.norm.ppf(p))


def detectable_effect(est: Estimate | None, power: float = POWER, confidence: float | None = None) -> float | None:
    """The smallest true distance from the rule's threshold that this run would declare with probability ``power``:
    ``(q(1 - α/2) + q(power)) × SE``, ``SE = half-width / q(1 - α/2)`` (t quantiles with ``est.df``, else normal).
    ``confidence``: the level the rule tests at when it is not the estimate's own (a Bonferroni-corrected test read
    from a 95% interval's SE). None without a finite interval (one run)."""
    if est is None or not (math.isfinite(est.low) and math.isfinite(est.high)) or est.high <= est.low:
        return None  # one run, or no spread at all (every seed the same): the noise is not measured
    se = est.half_width() / _quantile(0.5 + est.confidence / 2, est.df)
    return float(_power_multiplier(est.confidence if confidence is None else confidence, power, est.df) * se)


def _power_multiplier(confidence: float, power: float, df: int | None) -> float:
    """``q(1 - α/2) + q(power)``: the detectable effect in standard errors (t quantiles with ``df``, else normal)."""
    return _quantile(0.5 + confidence / 2, df) + _quantile(power, df)


def budget_to_decide(est: Estimate, target: float, power: float = POWER) -> int | None:
    """Roughly how many seeds (or examples) would bring the detectable effect down to ``target``: the spread of one
    unit, ``SD = SE × √n``, then the smallest ``n'`` with ``(q(1 - α/2) + q(power)) × SD / √n' <= target``: t
    quantiles with ``n' - 1`` degrees of freedom where the estimate is over seeds (its ``df``), as
    ``detectable_effect`` reads them, so that ``n'`` seeds would report a detectable effect of about ``target``;
    normal quantiles where it is over examples. Where the estimate knows the part of its noise that comes from the
    examples every seed shares (``example_se``), only the rest shrinks with more seeds: the seeds needed on the
    same examples, None when no number of seeds would do (``examples_to_decide`` gives the examples instead)."""
    if est is None or not target or est.n < 1 or not (math.isfinite(est.low) and math.isfinite(est.high)):
        return None
    if est.example_se is not None and est.df is not None:
        seed_sd, ex = _noise_split(est)
        if _power_multiplier(est.confidence, power, None) * ex >= abs(target):
            return None  # even infinitely many seeds leave the examples' noise
        n = est.n + 1
        while _power_multiplier(est.confidence, power, n - 1) * math.hypot(seed_sd / math.sqrt(n), ex) > abs(target):
            n += 1
            if n > MAX_SEEDS:
                return None  # the examples' noise is within a hair of the target: no practical number of seeds
        return n
    sd = est.half_width() / _quantile(0.5 + est.confidence / 2, est.df) * math.sqrt(est.n)
    z = _power_multiplier(est.confidence, power, None)
    n = max(est.n + 1, math.ceil((z * sd / abs(target)) ** 2))  # the normal answer: a lower bound under t
    if est.df is None:
        return n
    while _power_multiplier(est.confidence, power, n - 1) * sd / math.sqrt(n) > abs(target):
        n += 1
    return n


MAX_SEEDS = 10_000  # past this, "about N seeds would decide it" is no budget anyone would run


def _noise_split(est: Estimate) -> tuple[float, float]:
    """(the spread of one seed's result beyond the examples' noise, the examples' standard error) of a seeds-then-
    examples estimate: ``SE² = SD_seed² / n + SE_examples²``."""
    se = est.half_width() / _quantile(0.5 + est.confidence / 2, est.df)
    ex = min(float(est.example_se or 0.0), se)
    return math.sqrt(max(se * se - ex * ex, 0.0) * est.n), ex


def examples_to_decide(est: Estimate, target: float, power: float = POWER) -> int | None:
    """Roughly how many shared examples, at the estimate's own seeds, would bring a seeds-then-examples estimate's
    detectable effect down to ``target``: the examples' standard error scales as ``1 / √examples``; None without
    the split, or when the seeds' own spread alone is too wide at that many seeds. Where the seeds' part nearly
    fills the target the answer is very sensitive to both standard errors: a rough figure."""
    if est is None or not target or est.example_se is None or not est.examples or est.df is None:
        return None
    seed_sd, ex = _noise_split(est)
    room = (abs(target) / _power_multiplier(est.confidence, power, est.n - 1)) ** 2 - seed_sd**2 / est.n
    if room <= 0:
        return None
    return max(1, math.ceil(ex * ex * est.examples / room))


def budget_text(est: Estimate, target: float) -> str:
    """The budget that would decide a rule at ``target``, as a clause ("about 8 seeds would decide it"); for a
    seeds-then-examples estimate, seeds on the same examples and examples at the same seeds; "" when unknown."""
    need = budget_to_decide(est, target)
    if est.example_se is None or not est.examples:
        return f"about {need} {_units(est)} would decide it" if need else ""
    more = examples_to_decide(est, target)
    options = ([f"about {need} seeds on the same {est.examples} examples"] if need else []) + (
        [f"about {more} examples at {est.n} seeds"] if more else [])
    if not options:
        return ""
    text = " or ".join(options) + " would decide it"
    return text if need else f"no number of seeds on these {est.examples} examples would; {text}"


def _units(est: Estimate) -> str:
    return "seeds" if est.df is not None else "examples"


@dataclass(frozen=True)
class Verdict:
    """The outcome, the one-sentence reason with its numbers, the estimate it rests on, the validity conditions it
    was checked against and what the run could have detected."""

    outcome: str
    reason: str
    estimate: Estimate | None = None
    validity: tuple[Condition, ...] = ()
    detectable_effect: float | None = None
    paper_effect: float | None = None
    rule_outcome: str = ""                  # set by ``assess``: what the rule alone said (before the conditions)
    rule_reason: str = ""
    parts: tuple[Verdict, ...] = ()         # for a combined verdict: its parts
    name: str = ""                          # as one part of a combined verdict: the part's name ("Q10", "8-bit")
    thresholds: tuple[float, ...] = ()      # where the rule draws its line(s) in the estimate's unit (the margin)

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"verdict outcome must be one of {OUTCOMES}, not {self.outcome!r}")
        unmet = [c for c in self.validity if not c.met]
        if unmet and self.outcome != CANNOT_TEST:
            raise ValueError(f"a verdict with an unmet condition ({unmet[0].condition}) must be {CANNOT_TEST!r}")

    def text(self) -> str:
        return f"{self.outcome}: {self.reason}"

    def to_dict(self) -> dict:
        d = {"outcome": self.outcome, "reason": self.reason,
             "estimate": self.estimate.to_dict() if self.estimate else None,
             "validity": [c.to_dict() for c in self.validity]}
        if self.detectable_effect is not None or self.outcome == INCONCLUSIVE:
            d["detectable_effect"] = self.detectable_effect
        if self.paper_effect is not None:
            d["paper_effect"] = self.paper_effect
        if self.rule_outcome:
            d["rule"] = {"outcome": self.rule_outcome, "reason": self.rule_reason}
        if self.parts:
            d["parts"] = [p.part_dict() for p in self.parts]
        if self.thresholds:
            d["thresholds"] = list(self.thresholds)
        return d

    def part_dict(self) -> dict:
        """This verdict as one part of a combined one: its name (where it has one), outcome, reason, estimate,
        detectable effect."""
        d = {"outcome": self.outcome, "reason": self.reason,
             "estimate": self.estimate.to_dict() if self.estimate else None,
             "detectable_effect": self.detectable_effect}
        if self.thresholds:
            d["thresholds"] = list(self.thresholds)
        return {"part": self.name, **d} if self.name else d

    @classmethod
    def from_part(cls, d: Mapping) -> Verdict | None:
        """A part read back from results.json (``part_dict``); None when it is not one."""
        est, det = d.get("estimate"), d.get("detectable_effect")
        if d.get("outcome") not in OUTCOMES:
            return None
        return cls(str(d["outcome"]), str(d.get("reason") or ""),
                   Estimate.from_dict(est) if isinstance(est, Mapping) and est.get("value") is not None else None,
                   detectable_effect=float(det) if isinstance(det, int | float) else None,
                   name=str(d.get("part") or ""),
                   thresholds=tuple(float(x) for x in d.get("thresholds") or () if isinstance(x, int | float)))


def _t_quantile(confidence: float, df: int) -> float:
    return _quantile(0.5 + confidence / 2, df)


def mean_interval(values: Sequence[float], metric: str, confidence: float = 0.95) -> Estimate:
    """Mean of independent runs (seeds) with a Student-t interval; one value gives an infinitely wide interval,
    so a one-seed result can never be 'supported' or 'not supported' by an interval rule."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("no values to estimate from")
    n = len(xs)
    mean = sum(xs) / n
    if n == 1:
        return Estimate(metric, mean, -math.inf, math.inf, 1, "one run: no interval", None, confidence)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = _t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return Estimate(metric, mean, mean - half, mean + half, n, f"t interval over {n} runs ({confidence:.0%})",
                    n - 1, confidence)


def paired_seeds(a: Sequence[float], b: Sequence[float], metric: str, confidence: float = 0.95) -> Estimate:
    """Mean of ``a[i] - b[i]`` over seeds (the same seed for both sides), with a paired t interval."""
    if len(a) != len(b):
        raise ValueError(f"paired comparison needs as many runs on each side ({len(a)} vs {len(b)})")
    est = mean_interval([x - y for x, y in zip(a, b, strict=True)], metric, confidence)
    return Estimate(metric, est.value, est.low, est.high, est.n,
                    f"paired t over {est.n} seeds ({confidence:.0%})" if est.n > 1 else "one seed: no interval",
                    est.df, confidence)


def resamples_for(confidence: float, per_tail: int = 20, least: int = 2000) -> int:
    """Bootstrap resamples so that each tail of a ``confidence`` interval holds at least ``per_tail`` resamples
    (a Bonferroni-corrected 1 - 0.05/144 interval reads the 0.017% tail: about 115,000 resamples)."""
    return max(least, math.ceil(per_tail / ((1 - confidence) / 2)))


def paired_bootstrap(a: Sequence[float], b: Sequence[float], metric: str, confidence: float = 0.95,
                     resamples: int | None = None, seed: int = 0) -> Estimate:
    """Mean per-example difference ``a[i] - b[i]`` (for accuracy: 1/0 correctness of each system on the same
    dev example) with a percentile bootstrap interval over examples. For one deterministic system per side; runs
    of several seeds go through ``hierarchical_bootstrap``."""
    import numpy as np

    if len(a) != len(b):
        raise ValueError(f"paired bootstrap needs the same examples on both sides ({len(a)} vs {len(b)})")
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.size == 0:
        raise ValueError("no examples to bootstrap")
    return _bootstrap(d, metric, confidence, resamples, seed, f"paired bootstrap over {d.size} examples")


def bootstrap_mean(values: Sequence[float], metric: str, confidence: float = 0.95, resamples: int | None = None,
                   seed: int = 0) -> Estimate:
    """Mean of per-example values (e.g. 1/0 correctness) with a percentile bootstrap interval."""
    import numpy as np

    d = np.asarray(values, dtype=float)
    if d.size == 0:
        raise ValueError("no examples to bootstrap")
    return _bootstrap(d, metric, confidence, resamples, seed, f"bootstrap over {d.size} examples")


def _bootstrap(d, metric: str, confidence: float, resamples: int | None, seed: int, what: str) -> Estimate:
    import numpy as np

    resamples = resamples or resamples_for(confidence)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    step = max(1, 20_000_000 // max(1, d.size))  # bounded memory for many resamples
    for i in range(0, resamples, step):
        k = min(step, resamples - i)
        means[i:i + k] = d[rng.integers(0, d.size, size=(k, d.size))].mean(axis=1)
    lo, hi = np.quantile(means, [0.5 - confidence / 2, 0.5 + confidence / 2])
    return Estimate(metric, float(d.mean()), float(lo), float(hi), int(d.size),
                    f"{what}, {resamples:,} resamples ({confidence:.0%})", None, confidence)


def hierarchical_bootstrap(a_runs: Sequence[Sequence[float]], b_runs: Sequence[Sequence[float]] | None,
                           metric: str, confidence: float = 0.95, resamples: int = 2000, seed: int = 0) -> Estimate:
    """Mean over seeds and examples of ``a[k][i] - b[k][i]`` (``b_runs`` None: of ``a[k][i]``), where ``a_runs[k]``
    is seed k's per-example values on the dev examples every seed shares. Each resample draws seeds with
    replacement, then examples with replacement (one draw for all drawn seeds: the examples are crossed with the
    seeds); the interval is ``mean ± t(S-1) × SE`` with SE the standard deviation of the resampled means, so three
    seeds get the wide t quantile (4.30) rather than a percentile interval that cannot reach past three values.
    One seed: no seed-level interval (infinite), as for ``mean_interval``."""
    import numpy as np

    a = np.asarray(a_runs, dtype=float)
    d = a if b_runs is None else a - np.asarray(b_runs, dtype=float)
    if d.ndim != 2 or d.size == 0:
        raise ValueError("hierarchical bootstrap needs seeds x examples values, the same examples for every seed")
    s, n = d.shape
    mean = float(np.nanmean(d))  # NaN: a value undefined for that seed and example (left out)
    if s == 1:
        return Estimate(metric, mean, -math.inf, math.inf, 1, "one seed: no seed-level interval", None, confidence)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    for r in range(resamples):
        seeds = rng.integers(0, s, size=s)
        examples = rng.integers(0, n, size=n)
        means[r] = np.nanmean(d[seeds][:, examples])
    half = _t_quantile(confidence, s - 1) * float(means.std(ddof=1))
    # the examples' share of that noise: every seed kept, examples alone resampled (its own stream, so that the
    # interval above is the one earlier runs gave)
    rng_ex = np.random.default_rng([seed, 1])
    ex_means = [np.nanmean(d[:, rng_ex.integers(0, n, size=n)]) for _ in range(resamples)]
    return Estimate(metric, mean, mean - half, mean + half, s,
                    f"hierarchical bootstrap: {s} seeds then {n} examples, t over seeds ({confidence:.0%})",
                    s - 1, confidence, n, float(np.std(ex_means, ddof=1)))


def bootstrap_statistic(statistic: Callable[[Any, Any], float], runs: Sequence, n: int, metric: str,
                        confidence: float = 0.95, resamples: int = 2000, seed: int = 0,
                        one_run: bool = False) -> Estimate:
    """A statistic that is not a mean over examples (a Matthews correlation, a gain in one) with a seed-then-example
    bootstrap: ``statistic(run, idx)`` is the value of one seed's ``run`` on the dev examples ``idx`` (the ``n``
    examples every seed shares). The value is the mean over seeds of the statistic on every example. Each resample
    draws seeds with replacement, then examples (one draw for all drawn seeds), and averages the statistic over the
    drawn seeds; the interval is ``value ± t(S-1) × SE`` as in ``hierarchical_bootstrap``. Seeds whose runs are all
    the same (a deterministic system trained on the same rows: one run repeated) are one run, and the interval is the
    bootstrap over examples alone, ``value ± z × SE``: a t interval over such seeds would have no width. One seed
    shows neither, and gets no interval (infinite), as in ``hierarchical_bootstrap``, unless ``one_run`` says the
    system is one run by construction (it does not depend on the seed: cross-fitted probes on fixed folds); then its
    first run is bootstrapped over examples, however many seeds there are."""
    import numpy as np

    if not runs or n < 1:
        raise ValueError("no runs or no examples to bootstrap")
    every = np.arange(n)
    if one_run:
        runs = [runs[0], runs[0]]
    if len(runs) == 1:
        return Estimate(metric, float(statistic(runs[0], every)), -math.inf, math.inf, 1,
                        "one seed: no seed-level interval", None, confidence)
    identical = all(np.array_equal(np.asarray(r), np.asarray(runs[0])) for r in runs[1:])
    use = [runs[0]] if identical else list(runs)
    value = float(np.mean([statistic(r, every) for r in use]))
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    for i in range(resamples):
        drawn = rng.integers(0, len(use), size=len(use))
        idx = rng.integers(0, n, size=n)
        stats[i] = np.mean([statistic(use[k], idx) for k in drawn])
    se = float(stats.std(ddof=1))
    if not identical:
        half = _t_quantile(confidence, len(use) - 1) * se
        return Estimate(metric, value, value - half, value + half, len(use),
                        f"hierarchical bootstrap: {len(use)} seeds then {n} examples, t over seeds ({confidence:.0%})",
                        len(use) - 1, confidence)
    half = _quantile(0.5 + confidence / 2, None) * se
    why = "one run whatever the seed" if one_run else f"the {len(runs)} seeds' runs identical: one run"
    return Estimate(metric, value, value - half, value + half, n,
                    f"bootstrap over {n} examples ({why}, {resamples:,} resamples, {confidence:.0%})", None,
                    confidence)


def same_within_seeds(scores: Mapping[str, Sequence[float]], tol: float = 1e-9) -> bool:
    """Every variant at the same score on every seed, as when every fine-tuned model predicts one class: a
    downstream comparison that cannot separate the variants (a tie, not evidence that they are equal)."""
    per_seed = list(zip(*scores.values(), strict=True))
    return bool(per_seed) and all(max(vals) - min(vals) < tol for vals in per_seed)


def _detect_text(est: Estimate) -> str:
    det = detectable_effect(est)
    return f"; could detect ±{det:.4f}" if det is not None else "; one run: no detectable effect"


def decide_above(est: Estimate, threshold: float = 0.0, what: str = "") -> Verdict:
    """Claim: the quantity is above ``threshold``. The reason reports the detectable effect beside the interval."""
    name = what or est.metric
    det, said = detectable_effect(est), est.text() + _detect_text(est)
    line = (float(threshold),)
    if est.low > threshold:
        return Verdict(SUPPORTED, f"{name} {said} is above {threshold:g}", est, detectable_effect=det, thresholds=line)
    if est.high < threshold:
        return Verdict(NOT_SUPPORTED, f"{name} {said} is below {threshold:g}", est, detectable_effect=det,
                       thresholds=line)
    return Verdict(INCONCLUSIVE, f"{name} {said} includes {threshold:g}", est, detectable_effect=det, thresholds=line)


ONE_SIDED = 0.95  # the level of a one-sided bound (non-inferiority, and each of an equivalence test's two sides)


def one_sided_bound(est: Estimate, side: str, level: float = ONE_SIDED) -> float:
    """The one-sided ``level`` bound of ``est`` ("lower" or "upper"), read from its interval: the value plus or
    minus ``q(level) x SE`` with ``SE`` that side's half-length over ``q(1 - α/2)`` (Student-t quantiles with the
    estimate's df, normal ones otherwise), so that a symmetric t interval gives the t bound exactly and a percentile
    bootstrap's skew is kept. Infinite without a finite interval (one run)."""
    if side not in ("lower", "upper"):
        raise ValueError(f"side must be 'lower' or 'upper', not {side!r}")
    end = est.low if side == "lower" else est.high
    if not math.isfinite(end):
        return end
    scale = _quantile(level, est.df) / _quantile(0.5 + est.confidence / 2, est.df)
    return est.value + (end - est.value) * scale


def _one_sided_text(est: Estimate, side: str, level: float) -> str:
    return f"one-sided {level:.0%} {side} bound {one_sided_bound(est, side, level):.4f}"


def decide_noninferior(est: Estimate, threshold: float, what: str = "", above: bool = True,
                       level: float = ONE_SIDED) -> Verdict:
    """A non-inferiority claim: the quantity is above ``threshold`` (``above``; a compressed model loses at most a
    point: change > -0.01) or below it (a rival gains at most the margin: difference < +0.01), decided by one-sided
    ``level`` bounds, as a margin stated before the run asks: supported when the bound on the claim's side clears
    the threshold, not supported when the opposite one-sided bound lies beyond it on the wrong side, inconclusive
    otherwise. The detectable effect is at the one-sided level."""
    name = what or est.metric
    confidence = 2 * level - 1  # the two-sided level whose quantile is the one-sided bound's
    det = detectable_effect(est, confidence=confidence)
    said = est.text() + ("; one run: no detectable effect" if det is None else f"; could detect ±{det:.4f}")
    near, far = ("lower", "upper") if above else ("upper", "lower")
    b_near, b_far = one_sided_bound(est, near, level), one_sided_bound(est, far, level)
    word, wrong = (">", "<") if above else ("<", ">")
    clears = b_near > threshold if above else b_near < threshold
    fails = b_far < threshold if above else b_far > threshold
    line = (float(threshold),)
    if clears:
        return Verdict(SUPPORTED, f"{name} {said}: {_one_sided_text(est, near, level)} {word} {threshold:g}", est,
                       detectable_effect=det, thresholds=line)
    if fails:
        return Verdict(NOT_SUPPORTED, f"{name} {said}: {_one_sided_text(est, far, level)} {wrong} {threshold:g}",
                       est, detectable_effect=det, thresholds=line)
    return Verdict(INCONCLUSIVE, f"{name} {said}: {_one_sided_text(est, near, level)} does not clear "
                                 f"{threshold:g}", est, detectable_effect=det, thresholds=line)


def decide_within(est: Estimate, margin: float, what: str = "", level: float = ONE_SIDED) -> Verdict:
    """Claim: the quantity is within ``±margin`` of zero (an equivalence claim, "no meaningful difference"), by two
    one-sided tests at ``level``: supported when the lower one-sided bound is above ``-margin`` and the upper one
    below ``+margin`` (the 90% interval inside the margin); not supported when a one-sided bound shows the quantity
    beyond the margin (lower bound above ``+margin`` or upper bound below ``-margin``); inconclusive otherwise. An
    interval too wide to fit inside the margin says it is underpowered and how many seeds would do."""
    name = what or est.metric
    confidence = 2 * level - 1
    det = detectable_effect(est, confidence=confidence)
    said = est.text() + ("; one run: no detectable effect" if det is None else f"; could detect ±{det:.4f}")
    lo, hi = one_sided_bound(est, "lower", level), one_sided_bound(est, "upper", level)
    bounds = f"one-sided {level:.0%} bounds [{lo:.4f}, {hi:.4f}]"
    lines = (-float(margin), float(margin))
    if -margin < lo and hi < margin:
        return Verdict(SUPPORTED, f"{name} {said}: {bounds} lie within ±{margin:g}", est, detectable_effect=det,
                       thresholds=lines)
    if lo > margin or hi < -margin:
        return Verdict(NOT_SUPPORTED, f"{name} {said}: {bounds} lie outside ±{margin:g}", est, detectable_effect=det,
                       thresholds=lines)
    reason = f"{name} {said}: {bounds} are not resolved against ±{margin:g}"
    if math.isfinite(hi - lo) and (hi - lo) / 2 >= margin:
        reason += (f"; underpowered: the one-sided bounds' half-width ±{(hi - lo) / 2:.4f} exceeds the margin "
                   f"±{margin:g}, so they can never fit inside it")
        if text := budget_text(est, margin):
            reason += f"; {text}"
    return Verdict(INCONCLUSIVE, reason, est, detectable_effect=det, paper_effect=margin, thresholds=lines)


def combine(verdicts: Sequence[Verdict], joiner: str = "; ", names: Sequence[str] | None = None) -> Verdict:
    """A claim made of parts, decided part by part: cannot test if any part cannot; else not supported if any part
    is not, supported if every part is, else inconclusive. ``names`` name the parts (each part's reason is then
    written after its name and outcome, "Q10: supported: ..."), so that a reader sees which part decided the claim.
    The detectable effect is the largest among the undecided parts."""
    if not verdicts:
        raise ValueError("no verdicts to combine")
    if names is not None:
        if len(names) != len(verdicts):
            raise ValueError(f"{len(names)} part names for {len(verdicts)} parts")
        verdicts = [dataclasses.replace(v, name=str(n)) for v, n in zip(verdicts, names, strict=True)]
    outcomes = {v.outcome for v in verdicts}
    outcome = CANNOT_TEST if CANNOT_TEST in outcomes else NOT_SUPPORTED if NOT_SUPPORTED in outcomes \
        else SUPPORTED if outcomes == {SUPPORTED} else INCONCLUSIVE
    estimate = verdicts[0].estimate if len(verdicts) == 1 else None
    open_parts = [v.detectable_effect for v in verdicts if v.outcome == INCONCLUSIVE and v.detectable_effect]
    validity = tuple(c for v in verdicts for c in v.validity)
    return Verdict(outcome, joiner.join((f"{v.name}: " if v.name else "") + v.text() for v in verdicts), estimate,
                   validity, max(open_parts) if open_parts else None, parts=tuple(verdicts),
                   thresholds=verdicts[0].thresholds if len(verdicts) == 1 else ())


ROUNDING = 1e-4  # committed per-seed scores carry 4 decimals: a system must clear the trivial score by more


def seed_interval_above(scores: Sequence[float], trivial: float | None, what: str,
                        margin: float = ROUNDING) -> Condition:
    """The validity condition "a fine-tuned system is above its task's trivial predictor by a seed-level interval":
    the lower end of the t interval over seeds of ``score - trivial`` above ``margin`` (at least ``ROUNDING``; one
    dev example's worth, 1/n, where the caller knows n: seeds that all score the trivial number plus a fraction of
    an example have no spread and would otherwise pass). Value: that lower end; one seed or a missing trivial score:
    not established, value null."""
    margin = max(float(margin), ROUNDING)
    if trivial is None or not scores:
        return Condition.check(f"{what} above the trivial predictor (lower end of the seed-level interval)", None,
                               ">", margin)
    est = mean_interval([float(x) - float(trivial) for x in scores], what)
    return Condition.check(f"{what} minus the trivial predictor {float(trivial):.4f} (lower end of the t interval "
                           f"over {len(scores)} seed(s))", est.low if math.isfinite(est.low) else None, ">", margin,
                           missing="one seed gives no interval: not established")


def paper_part_of(parts: Sequence, paper_part: int | None):
    """The part of a rule of several parts that the paper's effect is about (``Claim.paper_part``); None when no
    part is named or the index is not one of ``parts``."""
    return parts[paper_part] if paper_part is not None and 0 <= paper_part < len(parts) else None


def assess(verdict: Verdict, validity: Sequence[Condition] = (), paper_effect: float | None = None,
           paper_part: int | None = None) -> Verdict:
    """The rule's verdict checked against the pre-registered validity conditions and the paper's effect.

    Any unmet condition: ``cannot test``, with the failed conditions and their numbers first in the reason (the
    rule's own outcome kept as ``rule_outcome``). Else the rule's outcome, with the detectable effect beside it;
    an inconclusive verdict that could not have detected the paper's effect says it is underpowered and what budget
    would decide it. ``paper_part``: for a rule of several parts, the part the paper's effect is about (the others
    measure something else, a loss at heavy pruning, say); its detectable effect and spread are the ones compared
    with the paper's, and none is when that part is decided."""
    validity = tuple(verdict.validity) + tuple(validity)
    rule = (verdict.rule_outcome, verdict.rule_reason) if verdict.rule_outcome else (verdict.outcome, verdict.reason)
    det = verdict.detectable_effect
    if det is None and verdict.estimate is not None:
        det = detectable_effect(verdict.estimate)
    paper = paper_effect if paper_effect is not None else verdict.paper_effect
    unmet = [c for c in validity if not c.met]
    if unmet:
        if det is None:  # the rule's parts decided (so combine kept none), but the claim is untested: their reach
            det = max((v.detectable_effect for v in verdict.parts if v.detectable_effect is not None), default=None)
        reason = "; ".join(c.text() for c in unmet) + f" [the rule alone: {rule[0]}: {rule[1]}]"
        return Verdict(CANNOT_TEST, reason, verdict.estimate, validity, det, paper, *rule, verdict.parts,
                       thresholds=verdict.thresholds)
    reason = verdict.reason
    if det is not None and "could detect" not in reason and verdict.outcome != SUPPORTED:
        reason += f"; could detect ±{det:.4f}"
    part = paper_part_of(verdict.parts, paper_part)
    if part is not None:  # the part the paper's effect is about; decided, it needs no power note
        open_, cmp_det, cmp_est = part.outcome == INCONCLUSIVE, part.detectable_effect, part.estimate
    else:
        open_, cmp_det, cmp_est = True, det, verdict.estimate or _binding_estimate(verdict)
    if verdict.outcome == INCONCLUSIVE and open_ and paper is not None and "underpowered" not in reason:
        if cmp_det is None:
            reason += (f"; underpowered: one run gives no interval, the paper reports {paper:g}; at least 3 seeds "
                       "are needed")
        elif cmp_det > abs(paper):
            text = budget_text(cmp_est, paper) if cmp_est is not None else ""
            reason += f"; underpowered: could detect ±{cmp_det:.4f}, the paper reports {paper:g}" + (
                f"; {text}" if text else "")
    return Verdict(verdict.outcome, reason, verdict.estimate, validity, det, paper, *rule, verdict.parts,
                   thresholds=verdict.thresholds)


def _binding_estimate(verdict: Verdict) -> Estimate | None:
    """The estimate of the undecided part with the largest detectable effect."""
    best = None
    for v in verdict.parts:
        if v.outcome == INCONCLUSIVE and v.estimate is not None and v.detectable_effect is not None and (
                best is None or v.detectable_effect > best.detectable_effect):
            best = v
    return best.estimate if best is not None else None


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
