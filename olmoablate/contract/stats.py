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


def quantile(p: float, dof: float) -> float:
    """t quantile, or the normal one when the sd is known (``dof`` = inf)."""
    return t_ppf(p, dof)


def p_above(mean: float, se: float, bar: float, dof: float) -> float:
    """One-sided p-value of H0: effect <= bar against H1: effect > bar (t with ``dof``)."""
    if not (math.isfinite(se) and se > 0):
        if math.isfinite(se) and se == 0:
            return 0.0 if mean > bar else 1.0
        return 1.0
    return 1.0 - t_cdf((mean - bar) / se, dof)


def holm(p_values: list[float], alpha: float) -> tuple[list[bool], list[float]]:
    """Holm's step-down procedure: which hypotheses are rejected at family-wise level ``alpha``,
    and the Holm-adjusted p-values (same order as given).

    Why Holm: it controls the probability of promoting *any* null variant at ``alpha`` whatever
    the dependence between the tests (the variants share baselines, so they are correlated), and
    is uniformly more powerful than Bonferroni.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    rejected = [False] * m
    adjusted = [1.0] * m
    running = 0.0
    still = True
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
        if still and p_values[i] <= alpha / (m - rank):
            rejected[i] = True
        else:
            still = False
    return rejected, adjusted


def seeds_needed(
    mean: float,
    sd: float,
    threshold: float,
    confidence: float,
    limit: int = 1000,
    known_sd: bool = False,
) -> int | None:
    """Smallest n >= 2 with q_{conf} * sd / sqrt(n) < |mean - threshold|, either direction.

    Why both directions: when the interval straddles ``min_effect`` the useful answer is "how
    many paired seeds would separate the observed effect from the bar" -- toward proceed when the
    observed mean is above it, toward stop when below. ``sd`` is the spread of one seed's paired
    delta; q is Student's t with n-1 dof (the spread will be estimated from those seeds), or the
    normal quantile when ``known_sd`` (a declared noise floor). None when the mean sits exactly on
    the bar, the spread is unknown, or more than ``limit`` seeds would be needed.
    """
    gap = abs(mean - threshold)
    if not math.isfinite(sd) or not math.isfinite(gap) or gap == 0.0:
        return None
    if sd == 0.0:
        return 2
    for n in range(2, limit + 1):
        q = t_ppf(confidence, math.inf if known_sd else n - 1)
        if q * sd / math.sqrt(n) < gap:
            return n
    return None


def mde(
    sd: float, n: int, confidence: float, power: float = 0.8, dof: float | None = None
) -> float:
    """Minimum detectable effect above the bar: (q_conf + q_power) * sd / sqrt(n).

    An effect this far above ``min_effect`` is declared (lower bound > bar) with probability
    ``power`` when one paired delta has sd ``sd``. ``dof`` None: t with n-1 dof (sd estimated from
    the seeds); ``math.inf``: known sd (normal).
    """
    d = (n - 1) if dof is None else dof
    if n < 1 or d < 1 or not math.isfinite(sd):
        return math.inf
    return (t_ppf(confidence, d) + t_ppf(power, d)) * sd / math.sqrt(n)


def nct_sf(c: float, dof: float, nc: float) -> float:
    """P(T > c) for the noncentral t with ``dof`` degrees of freedom and noncentrality ``nc``.

    T = (Z + nc) / sqrt(V / dof) with V ~ chi^2_dof, so P(T > c) = E_W[1 - Phi(c W / sqrt(dof)
    - nc)] with W ~ chi_dof; the expectation is one Simpson integral over W (no scipy). ``dof``
    inf: the normal case 1 - Phi(c - nc).
    """
    nd = NormalDist()
    if math.isinf(dof):
        return 1.0 - nd.cdf(c - nc)
    lo = max(0.0, math.sqrt(dof) - 12.0)
    hi = math.sqrt(dof) + 12.0
    m = 800
    h = (hi - lo) / m
    log_norm = (1.0 - dof / 2.0) * math.log(2.0) - math.lgamma(dof / 2.0)
    total = 0.0
    for i in range(m + 1):
        w = lo + i * h
        if w <= 0.0:
            dens = math.sqrt(2.0 / math.pi) if dof == 1 else 0.0
        else:
            dens = math.exp(log_norm + (dof - 1.0) * math.log(w) - w * w / 2.0)
        val = dens * (1.0 - nd.cdf(c * w / math.sqrt(dof) - nc))
        total += val * (1 if i in (0, m) else (4 if i % 2 else 2))
    return min(1.0, max(0.0, total * h / 3.0))


def resolve_power(gap: float, sd: float, n: int, confidence: float) -> float:
    """Chance that ``n`` paired seeds resolve the gate (paired t, n - 1 dof, the gate's test)
    when the true effect is ``gap`` away from the bar and one paired delta has sd ``sd``.

    Toward proceed (gap > 0): P(lower bound > bar); toward stop (gap < 0): P(upper bound < bar);
    the same number by symmetry. Plug-in: at the observed effect and spread it is an estimate of
    the chance, not a promise.
    """
    if n < 2 or not (math.isfinite(sd) and sd > 0) or not math.isfinite(gap):
        return math.nan
    return nct_sf(t_ppf(confidence, n - 1), n - 1, abs(gap) / sd * math.sqrt(n))


def seeds_for_power(
    gap: float, sd: float, confidence: float, power: float = 0.8, start: int = 2, limit: int = 200
) -> tuple[int, float] | None:
    """Smallest n >= ``start`` whose :func:`resolve_power` reaches ``power``, with that power."""
    if not (math.isfinite(sd) and sd > 0) or not math.isfinite(gap) or gap == 0:
        return None
    lo = max(2, start)
    if resolve_power(gap, sd, limit, confidence) < power:
        return None
    hi = limit  # the power grows with n: bisect for the smallest n that reaches it
    while lo < hi:
        mid = (lo + hi) // 2
        if resolve_power(gap, sd, mid, confidence) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo, resolve_power(gap, sd, lo, confidence)
