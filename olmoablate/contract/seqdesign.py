"""Group-sequential boundaries for the gate's seed stages: Lan-DeMets alpha spending.

Why here (the contract): `plan` prints the boundaries a design will use and `report` decides
with them, so both compute them with this one function.

Approximation (stated in docs/gate-statistics.md): the boundaries are computed on the z scale,
where the cumulative statistics Z_1..Z_K of looks at information fractions t_k = n_k / n_K are
jointly normal with Corr(Z_i, Z_j) = sqrt(t_i / t_j) (independent increments of a Brownian
motion). c_k solves P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k) = a(t_k) - a(t_{k-1}) for
the spending function a(t), by recursive numerical integration (Armitage, McPherson & Rowe 1969)
on a grid. Futility stops are ignored in this computation (non-binding), so overriding one never
raises the false-proceed rate. The paired t at look k has n_k - 1 dof and an estimated sd, so each
c_k is applied as a matched tail probability: proceed when the one-sided t p-value with n_k - 1
dof is <= 1 - Phi(c_k). bench/gate_calibration.py checks the resulting level by simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

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
    """One-sided nominal levels of the paired t at cumulative seed stages ``stages``.

    Why not only the z-scale levels: matching tail probabilities is an approximation, and with
    few seeds it is off (2 then 4 seeds, O'Brien-Fleming: 5.2% false proceed at nominal 5%,
    measured). At the bar the vector of stage t statistics is pivotal (its law depends only on
    the stage sizes), so the exact boundaries are found on it: the first stage's level is its
    spend (the marginal t is exact); each later boundary is the quantile, among draws that did
    not cross earlier, leaving exactly that stage's spend above it -- a fixed-seed simulation of
    ``T_REPS`` draws (deterministic; MC error about 0.0003 on the total level).
    """
    from olmoablate.contract.stats import t_cdf

    st = [int(n) for n in stages]
    if len(st) == 1:  # one full-budget look (any noise source): the whole alpha
        return [alpha]
    if any(n < 2 for n in st) or any(b <= a for a, b in zip(st, st[1:], strict=False)):
        raise ValueError(f"seed stages must increase from >= 2 seeds, got {st}")
    fr = stage_fractions(st)
    cum = [spent(f, alpha, kind) for f in fr]
    inc = [cum[0]] + [b - a for a, b in zip(cum, cum[1:], strict=False)]
    levels = [inc[0]]
    if len(st) == 1:
        return levels
    rng = np.random.default_rng(20231)
    z = rng.standard_normal((T_REPS, st[-1]))
    csum, csq = np.cumsum(z, axis=1), np.cumsum(z * z, axis=1)
    alive = np.ones(T_REPS, dtype=bool)
    for k, n in enumerate(st):
        mean = csum[:, n - 1] / n
        var = (csq[:, n - 1] - n * mean**2) / (n - 1)
        t = mean / np.sqrt(var / n)
        if k == 0:
            from olmoablate.contract.stats import t_ppf

            c = t_ppf(1.0 - inc[0], n - 1)
        else:
            live = np.sort(t[alive])[::-1]
            m = int(round(inc[k] * T_REPS))
            c = float(live[m]) if 0 <= m < live.size else math.inf
            levels.append(max(1e-12, 1.0 - t_cdf(c, n - 1)))
        alive &= t < c
    return levels


def stage_fractions(stages: Sequence[int]) -> list[float]:
    """Information fractions of seed stages (cumulative seeds / the last stage's seeds)."""
    return [n / stages[-1] for n in stages]
