"""Power-law fits with their uncertainty, and the loss-optimal size of an iso-FLOP profile.

A power law ``y = A * x**(-alpha)`` is a straight line in log-log space, so it is fitted there by least squares
(``scipy.optimize.curve_fit``, whose covariance gives the exponent's standard error) and its uncertainty is also
measured by a seeded bootstrap over the points (the 2.5 and 97.5 percentiles of the refitted exponent), which
does not trust the straight-line noise model. With two points the fit is exact and has no uncertainty (reported
as NaN, never as zero).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np

from ptmlab.core.errors import PtmlabError


@dataclass(frozen=True)
class PowerLaw:
    """``y = coef * x ** (-exponent)`` fitted on ``n`` points."""

    coef: float
    exponent: float
    stderr: float  # standard error of the exponent (least-squares covariance); NaN with 2 points
    ci_low: float  # bootstrap 95% interval of the exponent; NaN when too few points to resample
    ci_high: float
    n: int

    def predict(self, x) -> np.ndarray:
        return self.coef * np.asarray(x, dtype=float) ** (-self.exponent)

    def describe(self, symbol: str = "alpha") -> str:
        text = f"{symbol} = {self.exponent:.3f}"
        if math.isfinite(self.stderr):
            text += f" ± {self.stderr:.3f} (SE)"
        if math.isfinite(self.ci_low):
            text += f", bootstrap 95% CI [{self.ci_low:.3f}, {self.ci_high:.3f}]"
        return text + f", {self.n} points"

    def as_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def _line(logx, b, slope):
    return b + slope * logx


def fit_power_law(x, y, bootstrap: int = 1000, seed: int = 0) -> PowerLaw:
    """Fit ``y = A x^-alpha`` to positive ``x``, ``y`` (at least two distinct x)."""
    from scipy.optimize import OptimizeWarning, curve_fit

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise PtmlabError("a power-law fit needs two sequences of the same length")
    if np.any(x <= 0) or np.any(y <= 0) or not np.all(np.isfinite(x)) or not np.all(np.isfinite(y)):
        raise PtmlabError("a power-law fit needs positive, finite x and y")
    if len(np.unique(x)) < 2:
        raise PtmlabError(f"a power-law fit needs at least two distinct x values, got {len(np.unique(x))}")
    lx, ly = np.log(x), np.log(y)
    slope0, b0 = np.polyfit(lx, ly, 1)
    if len(x) > 2:
        with warnings.catch_warnings():  # a perfect fit has no covariance: its SE is reported as NaN
            warnings.simplefilter("ignore", OptimizeWarning)
            (b, slope), cov = curve_fit(_line, lx, ly, p0=(b0, slope0))
        stderr = float(math.sqrt(cov[1, 1])) if np.isfinite(cov[1, 1]) else math.nan
    else:
        b, slope, stderr = b0, slope0, math.nan
    lo = hi = math.nan
    if len(x) >= 4 and bootstrap > 0:
        rng = np.random.default_rng(seed)
        slopes = []
        for _ in range(bootstrap):
            idx = rng.integers(0, len(x), len(x))
            if len(np.unique(lx[idx])) < 2:
                continue
            slopes.append(np.polyfit(lx[idx], ly[idx], 1)[0])
        if len(slopes) >= bootstrap // 2:
            lo, hi = (float(-v) for v in np.percentile(slopes, [97.5, 2.5]))
    return PowerLaw(float(math.exp(b)), float(-slope), stderr, lo, hi, len(x))


def lower_envelope(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (x, loss) points no point of smaller or equal x beats: the compute frontier of learning curves."""
    out: list[tuple[float, float]] = []
    best = math.inf
    for x, loss in sorted(points):
        if loss < best:
            if out and out[-1][0] == x:
                out.pop()
            out.append((x, loss))
            best = loss
    return out


def isoflop_optimum(params, losses) -> tuple[float, bool]:
    """The loss-optimal parameter count of one budget's runs: the vertex of a parabola in log N when three or
    more sizes give an upward curve, else the best size. Returns (N_opt, at_edge); ``at_edge`` says the optimum
    is the smallest or largest size tried, so the true optimum may lie outside the grid."""
    n, loss = np.asarray(params, dtype=float), np.asarray(losses, dtype=float)
    if len(n) == 0:
        raise PtmlabError("no finished runs at this budget")
    best = int(np.argmin(loss))
    at_edge = n[best] in (n.min(), n.max()) if len(n) > 1 else True
    if len(np.unique(n)) >= 3 and not at_edge:
        a, b, _ = np.polyfit(np.log(n), loss, 2)
        if a > 0:
            v = -b / (2 * a)
            return float(math.exp(min(max(v, math.log(n.min())), math.log(n.max())))), False
    return float(n[best]), bool(at_edge)
