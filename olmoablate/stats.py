"""The statistics the gate needs: Student-t, Holm, seed counts, the alpha-spending boundaries of
seed stages, the power and MDE of a registered design and the predictive chance of more seeds
(what `plan` prints and `report` decides with).

The t CDF is the regularized incomplete beta function, evaluated with the standard continued
fraction, and the quantile is found by bisection: plenty fast for the handful of calls a report
makes, and it kept the decisions free of scipy. The power of a design (noncentral t) and its
root finding use scipy, imported where they are computed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np


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


def p_above(mean: float, se: float, bar: float, dof: float) -> float:
    """One-sided p-value of H0: effect <= bar against H1: effect > bar (t with ``dof``)."""
    if not (math.isfinite(se) and se > 0):
        if math.isfinite(se) and se == 0:
            return 0.0 if mean > bar else 1.0
        return 1.0
    return 1.0 - t_cdf((mean - bar) / se, dof)


def chi2_cdf(x: float, dof: float) -> float:
    """P(X <= x) for a chi-square with ``dof`` degrees of freedom: the regularized lower gamma
    P(dof/2, x/2) by its power series (fine for the few dof a measured floor has)."""
    if x <= 0:
        return 0.0
    a, h = dof / 2.0, x / 2.0
    term = total = 1.0 / a
    for n in range(1, 10_000):
        term *= h / (a + n)
        total += term
        if term < total * 1e-15:
            break
    return min(1.0, math.exp(-h + a * math.log(h) - math.lgamma(a)) * total)


def chi2_ppf(p: float, dof: float) -> float:
    """Quantile of the chi-square with ``dof`` degrees of freedom, by bisection."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    lo, hi = 0.0, max(1.0, dof)
    while chi2_cdf(hi, dof) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if chi2_cdf(mid, dof) < p else (lo, mid)
    return 0.5 * (lo + hi)


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


# Group-sequential boundaries for the gate's seed stages: Lan-DeMets alpha spending (`plan`
# prints the boundaries a design will use, `report` decides with them: both call this code).
#
# Approximation (stated in docs/gate-statistics.md): the boundaries are computed on the z scale,
# where the cumulative statistics Z_1..Z_K of looks at information fractions t_k = n_k / n_K are
# jointly normal with Corr(Z_i, Z_j) = sqrt(t_i / t_j) (independent increments of a Brownian
# motion). c_k solves P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k) = a(t_k) - a(t_{k-1}) for
# the spending function a(t), by recursive numerical integration (Armitage, McPherson & Rowe 1969)
# on a grid. Futility stops are ignored in this computation (non-binding), so overriding one never
# raises the false-proceed rate. The paired t at look k has n_k - 1 dof and an estimated sd, so each
# c_k is applied as a matched tail probability: proceed when the one-sided t p-value with n_k - 1
# dof is <= 1 - Phi(c_k). bench/gate_calibration.py checks the resulting level by simulation.


OBRIEN_FLEMING, POCOCK = "obrien_fleming", "pocock"
_N = NormalDist()


def spent(t: float, alpha: float, kind: str) -> float:
    """Cumulative one-sided alpha spent by information fraction ``t`` (Lan & DeMets 1983).

    O'Brien-Fleming type: 2 (1 - Phi(z_{1 - alpha/2} / sqrt(t))) -- almost nothing early.
    Pocock type: alpha ln(1 + (e - 1) t) -- roughly even across looks.
    """
    t = min(max(t, 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if kind == OBRIEN_FLEMING:
        return 2.0 * (1.0 - _N.cdf(_N.inv_cdf(1.0 - alpha / 2.0) / math.sqrt(t)))
    if kind == POCOCK:
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    raise ValueError(f"unknown spending function {kind!r} (allowed: {OBRIEN_FLEMING}, {POCOCK})")


def z_boundaries(fractions: Sequence[float], alpha: float, kind: str) -> list[float]:
    """Upper z boundaries c_1..c_K for looks at ``fractions`` (increasing, the last 1)."""
    t = [float(f) for f in fractions]
    if not t or any(b <= a for a, b in zip(t, t[1:], strict=False)) or t[0] <= 0:
        raise ValueError(f"fractions must increase in (0, 1], got {t}")
    dx = 0.0025
    x = np.arange(-9.0, 9.0 + dx / 2, dx)  # grid of B(t) = Z sqrt(t); sd <= 1
    prev_spent = 0.0
    bounds: list[float] = []
    dens = np.exp(-0.5 * x**2 / t[0]) / math.sqrt(2 * math.pi * t[0])
    for k, tk in enumerate(t):
        if k > 0:
            dt = tk - t[k - 1]
            cont = np.where(x < bounds[-1] * math.sqrt(t[k - 1]), dens, 0.0)
            half = int(math.ceil(9.0 * math.sqrt(dt) / dx))
            kx = np.arange(-half, half + 1) * dx
            kern = np.exp(-0.5 * kx**2 / dt) / math.sqrt(2 * math.pi * dt) * dx
            dens = np.convolve(cont, kern, mode="same")
        inc = max(spent(tk, alpha, kind) - prev_spent, 1e-15)
        prev_spent = spent(tk, alpha, kind)
        # P(B >= x_i, still continuing): trapezoid rule on the grid
        tail = np.cumsum((dens * dx)[::-1])[::-1] - 0.5 * dens * dx
        # smallest x with tail <= inc, interpolated; on the z scale c = x / sqrt(t)
        i = int(np.searchsorted(-tail, -inc))
        if i <= 0:
            xb = x[0]
        elif i >= len(x):
            xb = x[-1]
        else:
            t0, t1 = tail[i - 1], tail[i]
            w = (t0 - inc) / (t0 - t1) if t0 != t1 else 0.0
            xb = x[i - 1] + w * dx
        bounds.append(float(xb / math.sqrt(tk)))
    return bounds


def nominal_levels(fractions: Sequence[float], alpha: float, kind: str) -> list[float]:
    """One-sided nominal p-value thresholds 1 - Phi(c_k) of each look (z scale)."""
    return [1.0 - _N.cdf(c) for c in z_boundaries(fractions, alpha, kind)]


#: Draws of the fixed-seed simulation that calibrates the paired-t levels of seed stages.
T_REPS = 400_000


def t_stage_levels(stages: Sequence[int], alpha: float, kind: str) -> list[float]:
    """One-sided nominal levels of the paired t at cumulative seed stages ``stages`` (computed
    once per design and process: the report and the bench ask for the same designs often)."""
    return list(_t_stage_levels(tuple(int(n) for n in stages), float(alpha), kind))


@functools.lru_cache(maxsize=64)
def _t_stage_levels(st: tuple[int, ...], alpha: float, kind: str) -> tuple[float, ...]:
    """:func:`t_stage_levels`, as a tuple.

    Why not only the z-scale levels: matching tail probabilities is an approximation, and with
    few seeds it is off (2 then 4 seeds, O'Brien-Fleming: 5.2% false proceed at nominal 5%,
    measured). At the bar the vector of stage t statistics is pivotal (its law depends only on
    the stage sizes), so the exact boundaries are found on it: the first stage's level is its
    spend (the marginal t is exact); each later boundary is the quantile, among draws that did
    not cross earlier, leaving exactly that stage's spend above it -- a fixed-seed simulation of
    ``T_REPS`` draws (deterministic; MC error about 0.0003 on the total level).
    """
    if len(st) == 1:  # one full-budget look (any noise source): the whole alpha
        return (alpha,)
    if any(n < 2 for n in st) or any(b <= a for a, b in zip(st, st[1:], strict=False)):
        raise ValueError(f"seed stages must increase from >= 2 seeds, got {st}")
    fr = stage_fractions(st)
    cum = [spent(f, alpha, kind) for f in fr]
    inc = [cum[0]] + [b - a for a, b in zip(cum, cum[1:], strict=False)]
    levels = [inc[0]]
    rng = np.random.default_rng(20231)
    z = rng.standard_normal((T_REPS, st[-1]))
    csum, csq = np.cumsum(z, axis=1), np.cumsum(z * z, axis=1)
    alive = np.ones(T_REPS, dtype=bool)
    for k, n in enumerate(st):
        mean = csum[:, n - 1] / n
        var = (csq[:, n - 1] - n * mean**2) / (n - 1)
        t = mean / np.sqrt(var / n)
        if k == 0:
            c = t_ppf(1.0 - inc[0], n - 1)
        else:
            live = np.sort(t[alive])[::-1]
            m = int(round(inc[k] * T_REPS))
            c = float(live[m]) if 0 <= m < live.size else math.inf
            levels.append(max(1e-12, 1.0 - t_cdf(c, n - 1)))
        alive &= t < c
    return tuple(levels)


def stage_fractions(stages: Sequence[int]) -> list[float]:
    """Information fractions of seed stages (cumulative seeds / the last stage's seeds)."""
    return [n / stages[-1] for n in stages]


# Power and minimum detectable effect of the design actually registered (`plan`'s MDE lines).
#
# Why not (q_conf + q_power) sd / sqrt(n): that shortcut is the normal-theory answer; with the
# gate's few seeds the power of the paired t at it is 77% (2 seeds, or one seed with a 1-dof A/A
# source), and it knows nothing of seed stages, whose alpha spending costs power (2 then 4 seeds:
# 79% O'Brien-Fleming, 64% Pocock at the fixed-design MDE). Here a fixed single look is exact
# (noncentral t); anything else -- seed stages, an A/A source whose baseline is also the pair's --
# is simulated with fixed draws: for each draw, the smallest true effect that would proceed, so the
# power at any effect is the fraction of draws below it and the MDE is their ``power`` quantile.
# Effects are in units of sd_d (the sd of one seed's paired delta) above ``min_effect``.
# bench/power_calibration.py checks the printed MDEs through the report's own decision code.

#: Draws behind a simulated power (seeded: `plan` prints the same numbers every time, in about
#: 0.05 s per design; MC error of a power near 80% about 0.13 point).
POWER_DRAWS = 100_000
_POWER_SEED = 20342


@dataclass(frozen=True)
class PowerDesign:
    """What decides a gate, as far as its power goes.

    ``stages``: cumulative paired seeds of the full-budget looks (``(n,)`` for a fixed gate;
    ``(1,)`` one seed bounded by a noise source); ``levels``: each look's one-sided nominal level,
    any split across variants already applied; ``noise_dof``: one seed with a declared floor, the
    floor's dof (inf: known); ``aa_seeds``: one seed with k A/A baselines (the k + 1 baselines'
    run sd x sqrt(2), k dof), at within-seed arm correlation ``rho``; ``futility_confidence``: a
    non-final seed stage stops for futility when that upper bound is below the bar (obeyed here:
    `watch` cancels the remaining runs, so power is not counted after it).
    """

    stages: tuple[int, ...]
    levels: tuple[float, ...]
    noise_dof: float = math.inf
    aa_seeds: int = 0
    rho: float = 0.0
    futility_confidence: float = 0.5

    @property
    def exact(self) -> bool:
        """One look without an A/A source: the power is a noncentral t (or normal) tail."""
        return len(self.stages) == 1 and not (self.stages[0] == 1 and self.aa_seeds)

    def how(self) -> str:
        """How the power was computed, for the line that prints it."""
        if self.exact:
            return "exact noncentral t" if self._dof() < math.inf else "exact normal"
        return f"{POWER_DRAWS} simulated draws, MC error about 0.13 point"

    def _dof(self) -> float:
        n = self.stages[0]
        return float(n - 1) if n >= 2 else self.noise_dof


def design_for(
    stages: Sequence[int],
    alpha: float,
    spending: str | None = None,
    variants: int = 1,
    noise_dof: float = math.inf,
    aa_seeds: int = 0,
    rho: float = 0.0,
    futility_confidence: float = 0.5,
) -> PowerDesign:
    """The :class:`PowerDesign` of a registered gate: ``alpha`` split over ``variants`` (Holm's
    first step for a fixed gate -- a floor on Holm's power --, Bonferroni for designs, as the
    report), spent over ``stages`` by ``spending`` as the report does (:func:`t_stage_levels`)."""
    st = tuple(int(n) for n in stages)
    a = alpha / max(1, variants)
    levels = tuple(t_stage_levels(st, a, spending or OBRIEN_FLEMING)) if len(st) > 1 else (a,)
    return PowerDesign(st, levels, float(noise_dof), int(aa_seeds), float(rho), futility_confidence)


@functools.lru_cache(maxsize=32)
def _thresholds(design: PowerDesign) -> np.ndarray:
    """Per simulated draw, the smallest true effect (sd_d units) at which the design proceeds,
    sorted. A look at stage k proceeds when mean + effect - c_k se > 0, i.e. effect > u_k =
    c_k se - mean; a non-final stage stops for futility when effect < f_k = -q_f se - mean; so a
    draw proceeds iff effect > min_k max(u_k, f_1, ..., f_{k-1})."""
    rng = np.random.default_rng(_POWER_SEED)
    st = design.stages
    if st[0] == 1:  # one seed bounded by k A/A baselines, one of which is the pair's own
        k, rho = design.aa_seeds, design.rho
        seed0 = rng.standard_normal(POWER_DRAWS) * math.sqrt(rho)
        nv, nb = rng.standard_normal((2, POWER_DRAWS)) * math.sqrt(1.0 - rho)
        others = rng.standard_normal((POWER_DRAWS, k))
        base = np.column_stack([seed0 + nb, others])
        sd_d = math.sqrt(2.0 * (1.0 - rho))
        se = np.std(base, axis=1, ddof=1) * math.sqrt(2.0) / sd_d
        return np.sort(t_ppf(1.0 - design.levels[0], k) * se - (nv - nb) / sd_d)
    z = rng.standard_normal((POWER_DRAWS, st[-1]))
    csum, csq = np.cumsum(z, axis=1), np.cumsum(z * z, axis=1)
    best = np.full(POWER_DRAWS, np.inf)
    fut = np.full(POWER_DRAWS, -np.inf)
    for k, (n, lv) in enumerate(zip(st, design.levels, strict=True)):
        mean = csum[:, n - 1] / n
        se = np.sqrt(np.maximum(csq[:, n - 1] - n * mean**2, 0.0) / (n - 1) / n)
        best = np.minimum(best, np.maximum(t_ppf(1.0 - lv, n - 1) * se - mean, fut))
        if k < len(st) - 1:
            fut = np.maximum(fut, -t_ppf(design.futility_confidence, n - 1) * se - mean)
    return np.sort(best)


def design_power(design: PowerDesign, effect: float) -> float:
    """Probability that ``design`` proceeds when the true effect is ``effect`` sd_d above the bar."""
    if design.exact:
        from scipy import stats as st

        n, dof, lv = design.stages[0], design._dof(), design.levels[0]
        if math.isinf(dof):
            return float(st.norm.sf(st.norm.isf(lv) - effect * math.sqrt(n)))
        return float(st.nct.sf(st.t.isf(lv, dof), dof, effect * math.sqrt(n)))
    thr = _thresholds(design)
    return float(np.searchsorted(thr, effect, side="left") / thr.size)


def design_mde(design: PowerDesign, power: float = 0.8) -> float:
    """The smallest true effect (sd_d units above the bar) that ``design`` proceeds on with
    probability ``power``: a root of the exact power, or the ``power`` quantile of the simulated
    thresholds."""
    if design.exact:
        from scipy.optimize import brentq

        hi = 1.0
        while design_power(design, hi) < power:
            hi *= 2.0
            if hi > 1e6:
                return math.inf
        return float(brentq(lambda e: design_power(design, e) - power, -hi, hi, xtol=1e-10))
    return float(np.quantile(_thresholds(design), power))


# "k more seeds" as a calibrated predictive probability (the report's seeds line).
#
# Why not the power at the observed effect and spread: that plug-in treats two seeds' estimates
# as the truth and ignores the level the added seeds will be tested at; after an inconclusive
# 2-seed look it stated 84-89% on average while users who followed it resolved far less often.
# Here the chance is averaged over what the seeds seen leave uncertain: with the reference prior
# p(mu, sigma) ~ 1/sigma^2, given n seeds with mean m and sd s, sigma^2 ~ (n - 1) s^2 / chi^2_n
# and mu | sigma ~ N(m, sigma^2 / n) (the prior under which a statement made from scale-free
# statistics is calibrated for effects spread evenly in units of sigma; with 1/sigma, chi^2_{n-1},
# it is not: measured by bench/power_calibration.py); the new seeds' deltas are drawn from that,
# pooled with the old ones as the report pools them, and tested by the paired t with N - 1 dof at
# the one-sided ``level`` the extension will really be tested at. One seed bounded by a noise
# source: sigma is the source's sd, uncertain with its dof (known: fixed).

#: Posterior draws behind one predictive probability (seeded; MC error at most 0.35 point).
PREDICTIVE_DRAWS = 20_000
_PREDICTIVE_SEED = 20343


def predictive_resolve(
    gap: float | np.ndarray,
    n: int,
    total: int,
    level: float,
    noise_dof: float = math.inf,
    draws: int = PREDICTIVE_DRAWS,
) -> np.ndarray:
    """Predictive probability that ``total`` paired seeds (the ``n`` seen plus ``total - n``
    new) give a one-sided ``level`` lower bound above the bar, for each standardised gap
    (observed mean - bar) / sd (``sd``: the seeds' sample sd; one seed: its noise source's, with
    ``noise_dof``). Toward stop: pass -gap (the upper bound is symmetric). Vectorised over gap."""
    k = int(total) - int(n)
    if n < 1 or k < 1 or total < 2 or not 0.0 < level < 1.0:
        raise ValueError(f"need n >= 1 seen, total > n and >= 2, level in (0, 1): {n}, {total}")
    rng = np.random.default_rng(_PREDICTIVE_SEED)
    if n >= 2:
        u2 = (n - 1) / rng.chisquare(n, draws)
    elif math.isinf(noise_dof):
        u2 = np.ones(draws)
    else:
        u2 = noise_dof / rng.chisquare(noise_dof, draws)
    z = rng.standard_normal(draws)
    new_ss = rng.chisquare(k - 1, draws) if k > 1 else np.zeros(draws)
    g = np.atleast_1d(np.asarray(gap, dtype=float))[:, None]
    spread = np.sqrt(u2 * (1.0 / n + 1.0 / k)) * z  # new seeds' mean - old mean, in units of sd
    mean = g + k * spread / total
    ss = (n - 1) + u2 * new_ss + n * k / total * spread**2
    se = np.sqrt(ss / (total - 1) / total)
    out: np.ndarray = (mean - t_ppf(1.0 - level, total - 1) * se > 0).mean(axis=1)
    return out


def predictive_seeds(
    gap: float,
    n: int,
    level: float,
    target: float = 0.8,
    noise_dof: float = math.inf,
    limit: int = 200,
) -> tuple[int, float] | None:
    """Smallest total seed count > ``n`` whose :func:`predictive_resolve` reaches ``target``
    (with that probability); None when even ``limit`` seeds do not (the predictive chance tends
    to the posterior probability of the effect's side of the bar, which may be below target)."""
    def p(total: int) -> float:
        return float(predictive_resolve(gap, n, total, level, noise_dof)[0])

    lo = max(2, n + 1)
    if p(limit) < target:
        return None
    hi = limit  # nearly monotone in the seed count: bisect for the first that reaches it
    while lo < hi:
        mid = (lo + hi) // 2
        if p(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo, p(lo)


# -- Futility looks under two interim information models (docs/gate-statistics.md, "Futility
# under two interim models, and shared floors"). Units: sd_d = 1 (the sd of one seed's paired
# delta at the full budget). What an interim delta at token fraction f is worth is an assumption:
# PRECISE: as precise as the final one (sd 1, correlation INTERIM_CORR with it) -- optimistic;
# BROWNIAN: the textbook information model, the delta at f is the final one's Brownian path at f
# averaged, sd 1/sqrt(f), correlation sqrt(f) with the final -- conservative.

PRECISE, BROWNIAN = "precise", "brownian"
INTERIM_MODELS = (PRECISE, BROWNIAN)
#: The precise model's correlation of an interim delta with the final one (the bench's r).
INTERIM_CORR = 0.7
#: The most power futility looks may cost at any true effect under the Brownian model: the
#: calibrated futility confidence is the smallest (>= the declared one) that keeps this.
FUTILITY_POWER_COST = 0.01
#: The power `plan` promises at bar + MDE (and so above it).
POWER_PROMISED = 0.8
#: Draws per effect of the fixed-seed simulation that calibrates futility bounds.
F_REPS = 20_000
#: Effects (delta - bar, in units of sd_d / sqrt(last stage's seeds)) the calibration checks.
F_GRID = (*(0.5 * i for i in range(17)), 10.0, 12.0, 16.0, 24.0)


@dataclass(frozen=True)
class FutilityDraws:
    """One simulated design at one true effect: per draw, each look's standardized statistic
    (mean - bar) / se. ``looks``: (kind, tokens spent by then as seeds x fraction, dof,
    statistics), interim looks first, then the seed stages; ``crit``: each stage's proceed
    threshold on that statistic (t quantile at 1 - its level)."""

    looks: tuple[tuple[str, float, float, np.ndarray], ...]
    crit: tuple[float, ...]
    n_max: int


def futility_draws(
    stages: Sequence[int],
    interim: Sequence[float],
    alpha: float,
    kind: str,
    floor_dof: float,
    effect: float,
    model: str,
    reps: int,
    rng: np.random.Generator,
) -> FutilityDraws:
    """Draws of a design with true effect ``effect`` = delta - bar (sd_d = 1) under ``model``.
    One first-stage seed: its se is the floor (sd 1 measured with ``floor_dof`` dof, inf:
    known), scaled by 1 / sqrt(f) at an interim look at fraction f (a floor for the interim's
    information); several: the seeds' own spread at that look (paired t, n - 1 dof)."""
    st = [int(n) for n in stages]
    fr = [float(f) for f in interim]
    n1, nk = st[0], st[-1]
    final = rng.standard_normal((reps, nk))
    if n1 == 1:
        s_floor = (
            np.ones(reps)
            if math.isinf(floor_dof)
            else np.sqrt(rng.chisquare(floor_dof, reps) / floor_dof)
        )
    looks: list[tuple[str, float, float, np.ndarray]] = []
    if fr:
        if model == BROWNIAN:  # W(f) at the looks, then W(1) = the final noise of stage 1
            cuts = [*fr, 1.0]
            incs = rng.standard_normal((reps, n1, len(cuts))) * np.sqrt(np.diff([0.0, *cuts]))
            path = np.cumsum(incs, axis=2)
            final[:, :n1] = path[:, :, -1]
            interim_d = [path[:, :, j] / f for j, f in enumerate(fr)]
        elif model == PRECISE:
            r = INTERIM_CORR
            interim_d = [
                r * final[:, :n1] + math.sqrt(1 - r * r) * rng.standard_normal((reps, n1))
                for _ in fr
            ]
        else:
            raise ValueError(f"unknown interim model {model!r} (allowed: {INTERIM_MODELS})")
        for f, d in zip(fr, interim_d, strict=True):
            if n1 == 1:
                stat, dof = (effect + d[:, 0]) * math.sqrt(f) / s_floor, floor_dof
            else:
                sd = d.std(axis=1, ddof=1) / math.sqrt(n1)
                stat, dof = (effect + d.mean(axis=1)) / sd, float(n1 - 1)
            looks.append(("interim", n1 * f, dof, stat))
    levels = t_stage_levels(st, alpha, kind)
    crit: list[float] = []
    for n, lv in zip(st, levels, strict=True):
        d = final[:, :n]
        if n == 1:
            stat, dof = (effect + d[:, 0]) / s_floor, floor_dof
        else:
            stat = (effect + d.mean(axis=1)) / (d.std(axis=1, ddof=1) / math.sqrt(n))
            dof = float(n - 1)
        looks.append(("seeds", float(n), dof, stat))
        crit.append(t_ppf(1.0 - lv, dof) if dof >= 1 else math.inf)
    return FutilityDraws(tuple(looks), tuple(crit), nk)


def futility_outcome(
    draws: FutilityDraws, interim_confidence: float | None, stage_confidence: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per draw: proceeded (bool) and variant-arm tokens spent as a share of the fixed design
    with the last stage's seeds. The rules are the report's: an interim look stops when the
    upper bound at ``interim_confidence`` is below the bar; a seed stage proceeds above its
    threshold, else (not the last) stops for futility when the upper bound at
    ``stage_confidence`` (default: the interim one) is below it. None: no such stops."""
    if stage_confidence is None:
        stage_confidence = interim_confidence
    reps = draws.looks[0][3].shape[0]
    alive = np.ones(reps, dtype=bool)
    proceed = np.zeros(reps, dtype=bool)
    tokens = np.zeros(reps)
    stages = [lk for lk in draws.looks if lk[0] == "seeds"]
    spent_before = 0.0
    for kind, tok, dof, stat in draws.looks:
        conf = interim_confidence if kind == "interim" else stage_confidence
        q = (  # no futility, or no noise to bound with: never stop
            math.inf if conf is None or dof < 1 else _t_ppf_cached(conf, dof)
        )
        if kind == "interim":
            stop = alive & (stat + q < 0)
            tokens[stop] += tok
            alive &= ~stop
            continue
        k = next(i for i, lk in enumerate(stages) if lk[1] == tok)
        tokens[alive] += tok - spent_before
        spent_before = tok
        up = alive & (stat > draws.crit[k])
        proceed |= up
        alive &= ~up
        if k == len(stages) - 1:
            break
        alive &= ~(stat + q < 0)
    return proceed, tokens / draws.n_max


@functools.lru_cache(maxsize=4096)
def _t_ppf_cached(p: float, dof: float) -> float:
    return t_ppf(p, dof)


@functools.lru_cache(maxsize=256)
def calibrated_futility(
    stages: tuple[int, ...],
    interim: tuple[float, ...],
    alpha: float,
    kind: str,
    floor_dof: float,
    declared: float,
) -> float:
    """The confidence a design's interim (token-fraction) looks use: the smallest at or above
    ``declared`` with which all its futility stops (interim looks, and seed stages at the
    declared confidence) cost at most FUTILITY_POWER_COST of power at every effect of F_GRID
    where the design without futility has POWER_PROMISED, under the Brownian model (fixed-seed
    simulation, common draws across confidences: deterministic). Why: with the declared bound
    (0.5: stop when the interim mean is below the bar) a noisy interim delta stops real effects
    (one seed, looks at 25%/50%: 5 points of power at 4x the bar). Seed stages keep the
    declared confidence: a full-budget look is as precise under either model. If they alone
    cost more than the budget, the interim looks get the largest confidence (0.999)."""
    if not interim:
        return declared
    rng = np.random.default_rng(20262)
    nk = stages[-1]
    sets: list[tuple[FutilityDraws, np.ndarray]] = []
    for g in F_GRID:
        dr = futility_draws(
            stages, interim, alpha, kind, floor_dof, g / math.sqrt(nk), BROWNIAN, F_REPS, rng
        )
        base = futility_outcome(dr, None)[0]
        if base.mean() >= POWER_PROMISED or (g == F_GRID[-1] and not sets):
            sets.append((dr, base))  # where `plan` promises power: bar + MDE and above

    def cost(c: float) -> float:
        return max(
            float(np.mean(base & ~futility_outcome(dr, c, declared)[0])) for dr, base in sets
        )

    if cost(declared) <= FUTILITY_POWER_COST:
        return declared
    lo, hi = declared, 0.999
    if cost(hi) > FUTILITY_POWER_COST:
        return hi
    for _ in range(14):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if cost(mid) <= FUTILITY_POWER_COST else (mid, hi)
    return round(hi, 4)
