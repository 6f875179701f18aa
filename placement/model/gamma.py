"""The Gamma distribution of spot interruption rates: its CDF P, its quantiles and the prior's 90th percentile.

Pure math on floats. Split from :mod:`placement.model.calibration` (which re-exports ``gamma_quantile``,
``prior_p90`` and ``PRIOR_NODE_HOURS``) because every plan reports each spot candidate's p90 while most plans read
no calibration file: a plan process loads these few functions, not the calibration file's schema and records.
"""

from __future__ import annotations

import functools
import math

PRIOR_NODE_HOURS = 100.0  # weight of the prior spot rate, in node-hours (the figure)


def _gamma_p(a: float, x: float) -> float:
    """The regularised lower incomplete gamma function P(a, x) (series below a + 1, Lentz continued fraction above;
    Numerical Recipes 6.2), to about 1e-12."""
    if x <= 0.0:
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1.0
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return min(1.0, total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


@functools.lru_cache(maxsize=4096)
def gamma_quantile(q: float, shape: float, rate: float) -> float:
    """The ``q`` quantile of a Gamma(shape, rate) distribution (mean shape / rate): bisection on P to a relative
    1e-10, from [0, mean] doubled until it holds the quantile. ``shape`` 0 is the point mass at 0.

    The bisection's steps away from the quantile are decided by comparison with a bracket Newton's method found
    and P confirmed (:func:`_quantile_bracket`), so only the steps inside it evaluate P: the same float as the
    bisection evaluating P at every step, in about half the evaluations (each one a series of tens of terms)."""
    if not 0.0 < q < 1.0:
        raise ValueError("q must be between 0 and 1")
    if shape <= 0.0:
        return 0.0
    known = _quantile_bracket(q, shape, rate)
    b_lo, b_hi = known if known is not None else (-math.inf, math.inf)

    def below(m: float) -> bool:  # P(shape, m·rate) < q
        if m < b_lo:
            return True
        if m > b_hi:
            return False
        return _gamma_p(shape, m * rate) < q

    mean = shape / rate
    lo, hi = 0.0, max(mean, 1e-300)
    while below(hi):
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if below(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-10 * hi:
            break
    return 0.5 * (lo + hi)


QUANTILE_GAP = 1e-8  # P at a confirmed bracket's ends is this far from q: over 10x P's own error to shapes of 1e6
# statistics.NormalDist().inv_cdf(0.9), the standard normal's 90th percentile: every quantile a plan asks for is the
# p90, and importing statistics (decimal, fractions) cost a fresh plan process more than the rest of this module.
_Z90 = 1.2815515655446008


def _normal_quantile(q: float) -> float:
    """The standard normal's ``q`` quantile (statistics.NormalDist, imported only for a q other than 0.9)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(q)


def _quantile_bracket(q: float, shape: float, rate: float) -> tuple[float, float] | None:
    """(b_lo, b_hi) around the ``q`` quantile of Gamma(shape, rate) with P(b_lo) < q - QUANTILE_GAP and
    P(b_hi) > q + QUANTILE_GAP as computed, or None. P is increasing, so every point below b_lo has P < q and
    every point above b_hi P > q, computed or exact (P's error, about 1e-12 relative and at most 1e-9 to shapes
    of 1e6, is far under the gap). Newton's method on P from the Wilson-Hilferty approximation finds the quantile
    x; the bracket is x·(1 ± tol), tol such that P moves about 4 gaps across it (density × x × tol)."""
    try:
        z = _Z90 if q == 0.9 else _normal_quantile(q)
        c = 1.0 / (9.0 * shape)
        y = shape * (1.0 - c + z * math.sqrt(c)) ** 3  # in units of 1/rate
        if not y > 0.0:
            y = shape
        lg = math.lgamma(shape)
        for _ in range(50):
            density = math.exp((shape - 1.0) * math.log(y) - y - lg)
            step = (_gamma_p(shape, y) - q) / density
            nxt = y - step
            y = nxt if nxt > 0.0 else y / 2.0
            if abs(step) <= 1e-7 * y:  # quadratic: y is now good to about 1e-14, far inside the bracket
                break
        else:
            return None
        density = math.exp((shape - 1.0) * math.log(y) - y - lg)
        tol = 4.0 * QUANTILE_GAP / (density * y)
        if not (math.isfinite(tol) and 0.0 < tol < 1e-3):
            return None
        b_lo, b_hi = y * (1.0 - tol), y * (1.0 + tol)
        if not (_gamma_p(shape, b_lo) < q - QUANTILE_GAP and _gamma_p(shape, b_hi) > q + QUANTILE_GAP):
            return None
        return b_lo / rate, b_hi / rate
    except (ValueError, OverflowError, ZeroDivisionError):
        return None


def prior_p90(rate: float, weight: float = PRIOR_NODE_HOURS) -> float:
    """The 90th percentile of the prior alone (no calibration row): Gamma(rate × weight, weight)."""
    return gamma_quantile(0.9, rate * weight, weight) if rate > 0 else 0.0
