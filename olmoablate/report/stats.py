"""Small statistics the gate needs: Student-t quantiles and confidence bounds, without scipy.

Why not scipy: it is not a dependency of olmoablate (the report must run wherever results are
copied, with the package's own requirements). The t CDF is the regularized incomplete beta
function, evaluated with the standard continued fraction; the quantile is found by bisection,
which is plenty fast for the handful of calls a report makes.
"""

from __future__ import annotations

import math
from statistics import NormalDist


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with ``dof`` degrees of freedom (normal when dof is inf)."""
    if math.isinf(dof):
        return NormalDist().cdf(t)
    x = dof / (dof + t * t)
    tail = 0.5 * betainc(dof / 2.0, 0.5, x)
    return 1.0 - tail if t > 0 else tail


def t_ppf(p: float, dof: float) -> float:
    """Quantile of Student's t: the t with P(T <= t) = p."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if math.isinf(dof):
        return NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_ppf(1.0 - p, dof)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, dof) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, dof) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def seeds_needed(
    mean: float, sd: float, threshold: float, confidence: float, limit: int = 1000
) -> int | None:
    """Smallest n >= 2 with t_{conf, n-1} * sd / sqrt(n) < |mean - threshold|.

    Why: when the verdict is inconclusive, the useful answer is "how many paired seeds would
    separate the observed effect from the bar", using the spread seen so far. None when the
    observed mean does not clear the bar (no number of seeds makes it proceed) or more than
    ``limit`` would be needed.
    """
    gap = abs(mean - threshold)
    if mean <= threshold or not math.isfinite(sd) or gap == 0.0:
        return None
    if sd == 0.0:
        return 2
    for n in range(2, limit + 1):
        if t_ppf(confidence, n - 1) * sd / math.sqrt(n) < gap:
            return n
    return None
