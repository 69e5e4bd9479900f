"""Scaling ladders: the baseline law, compute multipliers with intervals, their trend with scale
and the projection to the sizes a proposal would be promoted to (docs/scaling.md).

One home for the estimator, because `plan` (the interval width a design is expected to give),
`report` (the verdict) and `bench/ladder_calibration.py` (its coverage) must use the same one.

**The model.** Rung ``r`` is one size trained to its own budget by both arms with paired seeds.
Each run's loss ``y`` (the gate metric, averaged over its last eval points) is

    baseline:  y_b[r,s] = L(C_b[r]) + u[r,s] + e_b[r,s]
    variant:   y_v[r,s] = L(C*[r])  + u[r,s] + e_v[r,s]       L(C) = E + A * C^(-alpha)

``u`` is the seed's effect shared by both arms of a pair (same data order, same init seed),
``e`` the rest. ``C*[r]`` is the compute the baseline would need to reach the variant's
expected loss, so the compute multiplier in FLOPs is ``m[r] = C*[r] / C_v[r]`` (the variant's
own training FLOPs, so its extra FLOPs count against it). In tokens and in unique parameters
the same ``C*`` is read along the ladder's own path (the tokens and parameters the baseline
ladder uses at compute ``C*``, a log-log line through the baseline rungs), divided by the
variant's tokens or unique parameters.

**Estimation.** One generalized least-squares fit of (E, A, alpha, C*[1..R]) to every run, with
the covariance of a pair written in two variances estimated from the seeds (paired, by seed):
``sd_delta`` of the paired difference ``y_b - y_v`` and ``sd_mean`` of the pair's average,
each pooled over rungs with sum(n_r - 1) degrees of freedom. scipy's ``least_squares`` (trust
region, E >= 0 and alpha > 0) does the fit. Intervals are Wald intervals on log-multipliers from
the fit's covariance (seed noise and the law's fit uncertainty together), with Student-t
quantiles at Satterthwaite's degrees of freedom for the two estimated variances. The trend
``log m = log m0 + gamma * log(C_v / C_ref)`` is a second GLS stage on the rung log-multipliers
with their full covariance; a projection is that line at a target's planned compute, its
variance including gamma's. Why not a bootstrap: with 2-3 seeds a seed bootstrap has 3-10
distinct resamples and its intervals undercover; why Wald on log m: log m is nearly linear in
the data at the noise levels of a ladder (bench/ladder_calibration.py measures the coverage).

**Refusals.** A multiplier is undefined where the variant's loss is at or below the fitted E;
the projection is refused when a lack-of-fit test rejects at ``LACK_OF_FIT_P`` (the law against
free baseline means per rung, R - 3 dof; the trend against free multipliers, R - 2 dof), and
when the noise cannot be estimated (one seed and no declared ``noise.floor``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as st
from scipy.optimize import brentq, least_squares

#: Units a multiplier is read in (docs/scaling.md): training FLOPs (the gate's default),
#: tokens along the ladder's path, unique parameters along the ladder's path.
UNITS = ("flops", "tokens", "params")
#: A lack-of-fit test rejecting at this p-value refuses the projection.
LACK_OF_FIT_P = 0.05


@dataclass(frozen=True)
class Rung:
    """One ladder rung: both arms' training FLOPs, tokens and (unique) parameters of one run,
    and each seed's loss (the gate metric's final value, lower is better)."""

    size: str
    flops_b: float
    flops_v: float
    tokens_b: float
    tokens_v: float
    params_b: float
    params_v: float
    loss_b: Mapping[int, float]
    loss_v: Mapping[int, float]


@dataclass(frozen=True)
class Target:
    """A size a proposal would be promoted to, at its planned budget (the variant's numbers)."""

    size: str
    flops_v: float
    tokens_v: float
    params_v: float


@dataclass(frozen=True)
class DeclaredNoise:
    """A paired-delta sd measured earlier (the gate's ``noise.floor``): ``dof`` = pairs - 1, or
    inf when declared exact. Used only where the ladder has no repeated seed."""

    sd_delta: float
    dof: float


@dataclass(frozen=True)
class Interval:
    """A multiplier (or gamma) with a two-sided interval at ``level``; ``dof`` of its t."""

    estimate: float
    lower: float
    upper: float
    level: float
    dof: float


@dataclass(frozen=True)
class Law:
    """``L(C) = E + A * C^(-alpha)``, C in FLOPs."""

    E: float
    A: float
    alpha: float

    def loss(self, compute: float | np.ndarray) -> float | np.ndarray:
        return self.E + self.A * np.power(compute, -self.alpha)

    def compute_for(self, loss: float) -> float | None:
        """The compute at which the law reaches ``loss``; None at or below E (never reached)."""
        if not loss > self.E:
            return None
        return float((self.A / (loss - self.E)) ** (1.0 / self.alpha))


@dataclass(frozen=True)
class LackOfFit:
    """One lack-of-fit F test; ``dof`` its numerator degrees of freedom (0: not testable)."""

    name: str
    statistic: float
    dof: int
    dof_denominator: float
    p: float | None
    why_untestable: str = ""

    @property
    def rejects(self) -> bool:
        return self.p is not None and self.p < LACK_OF_FIT_P


@dataclass(frozen=True)
class RungMultiplier:
    """The multiplier measured at one rung; ``multiplier`` is None where it is undefined."""

    size: str
    flops_v: float
    multiplier: Interval | None
    why_undefined: str = ""


@dataclass(frozen=True)
class Projection:
    size: str
    flops_v: float
    multiplier: Interval


@dataclass(frozen=True)
class Trend:
    """``log m = beta[0] + beta[1] * log(C_v / c_ref)`` with covariance ``cov``; ``dof`` is the
    slope's. ``parts`` are the covariance's shares of the two estimated variances (each
    variance's derivative times the variance) and ``part_dofs`` their degrees of freedom, so a
    point of the line gets its own Satterthwaite dof: the band the report draws and the
    projection it prints are one computation."""

    beta: tuple[float, float]
    cov: tuple[tuple[float, float], tuple[float, float]]
    c_ref: float
    dof: float
    parts: tuple[tuple[tuple[float, float], tuple[float, float]], ...] = ()
    part_dofs: tuple[float, ...] = ()

    def band(self, flops_v: float, level: float) -> Interval:
        """The trend's multiplier at ``flops_v`` with its interval (a projection when beyond the
        rungs)."""
        z = math.log(flops_v / self.c_ref)

        def quad(m: Sequence[Sequence[float]]) -> float:
            return m[0][0] + 2 * z * m[0][1] + z * z * m[1][1]

        var = quad(self.cov)
        dof = _satterthwaite(var, [quad(p) for p in self.parts], self.part_dofs) if self.parts else self.dof
        return _interval(self.beta[0] + self.beta[1] * z, var, dof, level)


@dataclass
class LadderFit:
    """Everything one ladder says in one ``unit``, intervals two-sided at ``level``."""

    unit: str
    level: float
    law: Law | None
    rungs: list[RungMultiplier]
    gamma: Interval | None
    trend: Trend | None
    projections: list[Projection]
    lack_of_fit: list[LackOfFit]
    sd_delta: float | None
    sd_mean: float | None
    #: Where the noise came from: "seeds (k dof)", "noise.floor ...", or why it is unknown.
    noise_source: str
    #: Why there is no projection (lack of fit, an undefined rung, the noise); "" when there is.
    refused: str = ""


# ------------------------------------------------------------------------------------ the estimator
_XI_BOUND = 60.0  # |log(C*/C_ref)|: e^60 is "never reached"; a fit on the bound is undefined


def _half_width(var: float, dof: float, level: float) -> float:
    """Half the two-sided ``level`` interval of an estimate with variance ``var``: Student t at
    ``dof`` (normal when inf)."""
    q = st.norm.ppf((1 + level) / 2) if math.isinf(dof) else st.t.ppf((1 + level) / 2, max(dof, 1e-3))
    return float(q * math.sqrt(max(var, 0.0)))


def _interval(est: float, var: float, dof: float, level: float) -> Interval:
    """A log-scale estimate's interval, on the multiplier scale."""
    half = _half_width(var, dof, level)
    return Interval(_exp(est), _exp(est - half), _exp(est + half), level, dof)


def _exp(x: float) -> float:
    """exp that says inf (an interval with no upper end) instead of raising OverflowError."""
    return math.inf if x > 709 else math.exp(x)


@dataclass
class _Data:
    """Every run as one observation: rung index, arm (0 baseline, 1 variant), seed, loss."""

    rung: np.ndarray
    arm: np.ndarray
    seed: np.ndarray
    y: np.ndarray
    n_rungs: int

    @classmethod
    def of(cls, rungs: Sequence[Rung]) -> _Data:
        rows = [
            (r, arm, s, float(v))
            for r, rung in enumerate(rungs)
            for arm, losses in ((0, rung.loss_b), (1, rung.loss_v))
            for s, v in sorted(losses.items())
        ]
        a = np.array(rows, dtype=float).reshape(-1, 4)
        return cls(a[:, 0].astype(int), a[:, 1].astype(int), a[:, 2].astype(int), a[:, 3], len(rungs))

    def pairs(self) -> list[tuple[int, int, int]]:
        """(rung, baseline index, variant index) of every paired seed."""
        out = []
        for i in np.flatnonzero(self.arm == 0):
            j = np.flatnonzero((self.arm == 1) & (self.rung == self.rung[i]) & (self.seed == self.seed[i]))
            if j.size:
                out.append((int(self.rung[i]), int(i), int(j[0])))
        return out

    def whitener(self, sd_mean: float, sd_delta: float) -> np.ndarray:
        """W with W Sigma W^T = I: a pair's average has variance sd_mean^2, its difference
        sd_delta^2 (so each run sd_mean^2 + sd_delta^2/4, the pair's covariance their difference)."""
        n = self.y.size
        sigma = np.eye(n) * (sd_mean**2 + sd_delta**2 / 4)
        for _, i, j in self.pairs():
            sigma[i, j] = sigma[j, i] = sd_mean**2 - sd_delta**2 / 4
        return np.linalg.inv(np.linalg.cholesky(sigma))


def replicate_noise(rungs: Sequence[Rung]) -> tuple[float, float, int]:
    """(sd_mean, sd_delta, dof) pooled over rungs from the paired seeds; dof = sum(n_r - 1)."""
    ss_a = ss_d = 0.0
    dof = 0
    for rung in rungs:
        seeds = sorted(set(rung.loss_b) & set(rung.loss_v))
        if len(seeds) < 2:
            continue
        b = np.array([rung.loss_b[s] for s in seeds])
        v = np.array([rung.loss_v[s] for s in seeds])
        a, d = (b + v) / 2, b - v
        ss_a += float(((a - a.mean()) ** 2).sum())
        ss_d += float(((d - d.mean()) ** 2).sum())
        dof += len(seeds) - 1
    if dof == 0:
        return math.nan, math.nan, 0
    return math.sqrt(ss_a / dof), math.sqrt(ss_d / dof), dof


class _Model:
    """The mean of every observation as a function of p = (E, a, alpha, xi_1..xi_R), with
    L(x) = E + exp(a - alpha x), x = log(C / c_ref); the variant at rung r sits at x = xi_r."""

    def __init__(self, data: _Data, x_b: np.ndarray) -> None:
        self.d = data
        self.x_b = x_b  # baseline log-compute per rung

    def x_of(self, p: np.ndarray) -> np.ndarray:
        xi = p[3:]
        return np.where(self.d.arm == 0, self.x_b[self.d.rung], xi[self.d.rung])

    def mean(self, p: np.ndarray) -> np.ndarray:
        return p[0] + np.exp(p[1] - p[2] * self.x_of(p))

    def jac(self, p: np.ndarray) -> np.ndarray:
        x = self.x_of(p)
        g = np.exp(p[1] - p[2] * x)
        j = np.zeros((self.d.y.size, 3 + self.d.n_rungs))
        j[:, 0] = 1.0
        j[:, 1] = g
        j[:, 2] = -x * g
        v = self.d.arm == 1
        j[np.flatnonzero(v), 3 + self.d.rung[v]] = -p[2] * g[v]
        return j


def _initial(data: _Data, x_b: np.ndarray) -> np.ndarray:
    """A starting point: the best of a few E values for a log-linear fit of the baseline means."""
    R = data.n_rungs
    mb = np.array([data.y[(data.arm == 0) & (data.rung == r)].mean() for r in range(R)])
    mv = np.array([data.y[(data.arm == 1) & (data.rung == r)].mean() for r in range(R)])
    lo = float(mb.min())
    best = None
    for frac in (0.0, 0.3, 0.6, 0.8, 0.9, 0.95):
        E = frac * lo
        slope, icpt = np.polyfit(x_b, np.log(mb - E), 1)
        rss = float(((E + np.exp(icpt + slope * x_b) - mb) ** 2).sum())
        if best is None or rss < best[0]:
            best = (rss, E, icpt, max(-slope, 1e-3))
    _, E, a, alpha = best
    xi = np.array([
        (a - math.log(m - E)) / alpha if m > E else _XI_BOUND / 2 for m in mv
    ])
    return np.concatenate([[E, a, alpha], np.clip(xi, -_XI_BOUND + 1, _XI_BOUND - 1)])


def _fit(model: _Model, W: np.ndarray, p0: np.ndarray, e_max: float) -> tuple[np.ndarray, float, bool]:
    """GLS fit by scipy's trust-region least squares; (p, whitened RSS, converged)."""
    R = model.d.n_rungs
    lb = np.concatenate([[0.0, -np.inf, 1e-6], np.full(R, -_XI_BOUND)])
    ub = np.concatenate([[e_max, np.inf, 10.0], np.full(R, _XI_BOUND)])
    p0 = np.clip(p0, lb + 1e-9, ub - 1e-9)
    y = model.d.y
    res = least_squares(
        lambda p: W @ (model.mean(p) - y),
        p0,
        jac=lambda p: W @ model.jac(p),
        bounds=(lb, ub),
        method="trf",
        x_scale="jac",
        xtol=1e-12,
        ftol=1e-12,
        gtol=1e-12,
        max_nfev=2000,
    )
    return res.x, float((res.fun**2).sum()), bool(res.success)


def _path(rungs: Sequence[Rung], unit: str) -> tuple[float, float]:
    """(k, c) of the ladder's path log X_b = c + k log C_b (X = tokens or parameters), through
    the baseline rungs; (1, 0) for FLOPs. Reading C* along it gives the other units."""
    if unit == "flops":
        return 1.0, 0.0
    attr = "tokens_b" if unit == "tokens" else "params_b"
    lc = np.log([r.flops_b for r in rungs])
    lx = np.log([getattr(r, attr) for r in rungs])
    k, c = np.polyfit(lc, lx, 1)
    return float(k), float(c)


def _own(rung: Rung | Target, unit: str) -> float:
    return {"flops": rung.flops_v, "tokens": rung.tokens_v, "params": rung.params_v}[unit]


def _satterthwaite(v: float, dv: Sequence[float], dofs: Sequence[float]) -> float:
    """Degrees of freedom of a variance ``v`` whose parts ``dv[k]`` scale with an estimated
    variance of ``dofs[k]`` degrees of freedom (inf = known)."""
    den = sum(d * d / n for d, n in zip(dv, dofs, strict=True) if math.isfinite(n) and n > 0)
    return math.inf if den <= 0 else v * v / den


def fit_ladder(
    rungs: Sequence[Rung],
    targets: Sequence[Target] = (),
    *,
    unit: str = "flops",
    level: float = 0.95,
    declared: DeclaredNoise | None = None,
) -> LadderFit:
    """Fit the baseline law, the rung multipliers, their trend and the projections (module
    docstring). Never raises on data: what cannot be estimated is said in ``refused``."""
    if unit not in UNITS:
        raise ValueError(f"unit {unit!r} (allowed: {', '.join(UNITS)})")
    rungs = sorted(rungs, key=lambda r: r.flops_b)
    R = len(rungs)
    empty = LadderFit(unit, level, None, [], None, None, [], [], None, None, "")
    if R < 2 or any(not r.loss_b or not r.loss_v for r in rungs):
        empty.refused = f"a ladder needs at least 2 rungs with both arms ({R} given)"
        return empty
    data = _Data.of(rungs)
    c_ref = math.exp(np.mean(np.log([r.flops_b for r in rungs])))
    x_b = np.log(np.array([r.flops_b for r in rungs]) / c_ref)
    model = _Model(data, x_b)
    n_par = 3 + R
    resid_dof = data.y.size - n_par

    # the noise: replicate seeds, else the declared floor plus the fit's residuals
    sd_mean, sd_delta, rep_dof = replicate_noise(rungs)
    e_max = float(data.y[data.arm == 0].min()) * (1 - 1e-9)
    p0 = _initial(data, x_b)
    if rep_dof > 0:
        dof_mean = dof_delta = float(rep_dof)
        source = f"seeds ({rep_dof} dof)"
    elif declared is None:
        empty.refused = (
            "every rung has one seed: the paired noise cannot be estimated (add a seed, or "
            "declare gate.noise.floor)"
        )
        empty.noise_source = "none"
        return empty
    elif resid_dof < 1:
        empty.refused = (
            f"one seed per rung and {R} rungs: the law's noise cannot be estimated (the fit has "
            f"{n_par} parameters for {data.y.size} runs); add a seed or a rung"
        )
        empty.noise_source = "none"
        return empty
    else:
        sd_delta, dof_delta = declared.sd_delta, declared.dof
        sd_mean, dof_mean = _residual_sd_mean(model, sd_delta, p0, e_max, resid_dof)
        source = f"noise.floor sd {sd_delta:.3g} ({_dof_txt(dof_delta)}) + fit residuals ({resid_dof} dof)"
    sd_mean = max(sd_mean, sd_delta / 2 * 1.0001, 1e-12)
    sd_delta = max(sd_delta, 1e-12)

    W = data.whitener(sd_mean, sd_delta)
    p, rss, ok = _fit(model, W, p0, e_max)
    law = Law(float(p[0]), float(math.exp(p[1]) * c_ref ** p[2]), float(p[2]))
    fit = LadderFit(unit, level, law, [], None, None, [], [], sd_delta, sd_mean, source)
    if not ok:
        fit.refused = "the law's least-squares fit did not converge"
        return fit

    # covariance of p under the estimated variances, and under each one scaled (Satterthwaite)
    J = model.jac(p)

    def cov_p(sm: float, sdl: float) -> np.ndarray:
        Jw = data.whitener(sm, sdl) @ J
        return np.linalg.pinv(Jw.T @ Jw)

    h = 1e-4
    covs = [cov_p(sd_mean, sd_delta), cov_p(sd_mean * math.sqrt(1 + h), sd_delta),
            cov_p(sd_mean, sd_delta * math.sqrt(1 + h))]
    dofs = (dof_mean, dof_delta)

    k, c = _path(rungs, unit)
    own = np.log([_own(r, unit) for r in rungs])
    logm = k * (p[3:] + math.log(c_ref)) + c - own
    G = np.zeros((R, n_par))
    G[np.arange(R), 3 + np.arange(R)] = k
    Vs = [G @ cv @ G.T for cv in covs]

    def var_dof(g: np.ndarray) -> tuple[float, float]:
        """Variance of g . logm and its Satterthwaite dof."""
        v = [float(g @ V @ g) for V in Vs]
        return v[0], _satterthwaite(v[0], [(v[1] - v[0]) / h, (v[2] - v[0]) / h], dofs)

    defined = np.ones(R, dtype=bool)
    for r, rung in enumerate(rungs):
        mv = float(np.mean(list(rung.loss_v.values())))
        if abs(p[3 + r]) >= _XI_BOUND - 1e-6 or mv <= law.E:
            defined[r] = False
            why = (
                f"undefined: the variant's loss {mv:.4g} at {rung.size} is at or below the "
                f"baseline law's irreducible loss E = {law.E:.4g} (no baseline compute reaches it)"
            )
            fit.rungs.append(RungMultiplier(rung.size, rung.flops_v, None, why))
            continue
        e = np.zeros(R)
        e[r] = 1.0
        v, nu = var_dof(e)
        fit.rungs.append(RungMultiplier(rung.size, rung.flops_v, _interval(logm[r], v, nu, level)))
    if not defined.all():
        fit.refused = "; ".join(m.why_undefined for m in fit.rungs if m.multiplier is None)

    # lack of fit of the law: the law against free baseline means per rung (R - 3 dof)
    sat = _saturated_rss(data, W)
    lof_dof = R - 3
    if lof_dof < 1:
        fit.lack_of_fit.append(LackOfFit("law", math.nan, 0, math.nan, None, f"{R} rungs for 3 law parameters"))
    elif rep_dof == 0:
        fit.lack_of_fit.append(LackOfFit(
            "law", math.nan, 0, math.nan, None, "one seed per rung: the residuals set the noise"
        ))
    else:
        F = max(rss - sat, 0.0) / lof_dof
        fit.lack_of_fit.append(LackOfFit("law", F, lof_dof, float(rep_dof), float(st.f.sf(F, lof_dof, rep_dof))))

    # the trend: GLS of the defined rung log-multipliers on log C_v
    idx = np.flatnonzero(defined)
    if idx.size >= 2:
        c_tr = math.exp(np.mean(np.log([rungs[i].flops_v for i in idx])))
        X = np.column_stack([np.ones(idx.size), np.log([rungs[i].flops_v / c_tr for i in idx])])
        Vi = [np.linalg.pinv(V[np.ix_(idx, idx)]) for V in Vs]
        covb = [np.linalg.pinv(X.T @ vi @ X) for vi in Vi]
        beta = covb[0] @ X.T @ Vi[0] @ logm[idx]
        # dof of the trend: Satterthwaite for the slope's variance
        dvs = [(covb[1][1, 1] - covb[0][1, 1]) / h, (covb[2][1, 1] - covb[0][1, 1]) / h]
        nu_g = _satterthwaite(covb[0][1, 1], dvs, dofs)
        parts = tuple(_pairs((cb - covb[0]) / h) for cb in covb[1:])
        trend = Trend(
            (float(beta[0]), float(beta[1])), _pairs(covb[0]), c_tr, nu_g, parts, dofs
        )
        fit.trend = trend
        half = _half_width(covb[0][1, 1], nu_g, level)
        fit.gamma = Interval(float(beta[1]), float(beta[1] - half), float(beta[1] + half), level, nu_g)
        res = logm[idx] - X @ beta
        t_dof = idx.size - 2
        if t_dof < 1:
            fit.lack_of_fit.append(LackOfFit("trend", math.nan, 0, math.nan, None, f"{idx.size} rungs for 2 trend parameters"))
        else:
            F = float(res @ Vi[0] @ res) / t_dof
            nu = float(np.mean([var_dof(np.eye(R)[i])[1] for i in idx]))
            pv = float(st.chi2.sf(F * t_dof, t_dof) if math.isinf(nu) else st.f.sf(F, t_dof, nu))
            fit.lack_of_fit.append(LackOfFit("trend", F, t_dof, nu, pv))
        for t in targets:
            fit.projections.append(Projection(t.size, t.flops_v, trend.band(t.flops_v, level)))
    elif not fit.refused:
        fit.refused = "fewer than 2 rungs with a defined multiplier: no trend"
    bad = [f"{t.name} (F = {t.statistic:.3g}, p = {t.p:.3g})" for t in fit.lack_of_fit if t.rejects]
    if bad and not fit.refused:
        fit.refused = (
            f"lack of fit at p < {LACK_OF_FIT_P}: {', '.join(bad)} — the law does not describe "
            "the rungs, so no projection"
        )
    if fit.refused:
        fit.projections = []
    return fit


def _pairs(m: np.ndarray) -> tuple[tuple[float, float], tuple[float, float]]:
    return ((float(m[0, 0]), float(m[0, 1])), (float(m[1, 0]), float(m[1, 1])))


def _dof_txt(dof: float) -> str:
    return "exact" if math.isinf(dof) else f"{dof:g} dof"


def _saturated_rss(data: _Data, W: np.ndarray) -> float:
    """Whitened RSS with a free mean per (rung, arm): the pure seed error."""
    cells = data.rung * 2 + data.arm
    X = (cells[:, None] == np.unique(cells)[None, :]).astype(float)
    Xw, yw = W @ X, W @ data.y
    beta, *_ = np.linalg.lstsq(Xw, yw, rcond=None)
    r = yw - Xw @ beta
    return float(r @ r)


def _residual_sd_mean(
    model: _Model, sd_delta: float, p0: np.ndarray, e_max: float, dof: int
) -> tuple[float, float]:
    """One seed per rung: the pair-average sd that makes the whitened RSS equal its dof (with
    the paired sd declared), found by root search with a refit at each trial."""
    def excess(log_sd: float) -> float:
        W = model.d.whitener(math.exp(log_sd), sd_delta)
        _, rss, _ = _fit(model, W, p0, e_max)
        return rss - dof

    lo, hi = math.log(sd_delta / 2 * 1.001), math.log(max(sd_delta, 1e-6) * 1e4)
    if excess(lo) <= 0:
        return math.exp(lo), float(dof)
    if excess(hi) > 0:
        return math.exp(hi), float(dof)
    return math.exp(brentq(excess, lo, hi, xtol=1e-3)), float(dof)


# ---------------------------------------------------------------------------------------- the gate
#: What the bounds say about the bar (the report turns them into the gate's verdict words).
CLEARS, FALLS_SHORT, UNDECIDED = "clears", "falls short", "undecided"
_UNIT_WORD = {"flops": "compute", "tokens": "tokens", "params": "parameters"}


def unit_word(unit: str) -> str:
    """How a multiplier in ``unit`` reads in a sentence: "1.12x compute"."""
    return _UNIT_WORD[unit]


def decide(fit: LadderFit, min_multiplier: float) -> tuple[str, str]:
    """(outcome, one line): CLEARS when every target's lower bound is at least
    ``min_multiplier``, FALLS_SHORT when some target's upper bound is below it, UNDECIDED
    otherwise and whenever the projection is refused. ``fit.level`` is two-sided, so each bound
    is one-sided at (1 + level) / 2 — requiring every target's bound is an intersection-union
    test, valid at that level without adjustment."""
    one_sided = f"one-sided {(1 + fit.level) / 2 * 100:g}% bounds"
    if fit.refused:
        return UNDECIDED, f"projection refused: {fit.refused}"
    if not fit.projections:
        return UNDECIDED, "no target to project to (gate.at)"
    word = unit_word(fit.unit)
    parts = [
        f"projected {p.multiplier.estimate:.3g}x {word} [{p.multiplier.lower:.3g}, "
        f"{p.multiplier.upper:.3g}] at {p.size}"
        for p in fit.projections
    ]
    lows = [p.multiplier.lower for p in fit.projections]
    highs = [p.multiplier.upper for p in fit.projections]
    if min(lows) >= min_multiplier:
        outcome, how = CLEARS, f"every lower bound >= min_multiplier {min_multiplier:g}"
    elif min(highs) < min_multiplier:
        outcome, how = FALLS_SHORT, f"an upper bound < min_multiplier {min_multiplier:g}"
    else:
        outcome, how = UNDECIDED, f"not separable from min_multiplier {min_multiplier:g}"
    return outcome, f"{'; '.join(parts)} ({one_sided}): {how}"


# ------------------------------------------------------------------------------------- simulation
@dataclass(frozen=True)
class Truth:
    """A synthetic truth: the baseline law, the multiplier trend in FLOPs
    (``m(C_v) = m0 * (C_v / c_ref)^gamma``) and the noise, optionally misspecified."""

    law: Law
    m0: float
    gamma: float
    c_ref: float
    sd_delta: float
    sd_mean: float
    variant_E_shift: float = 0.0
    curvature: float = 0.0

    def true_log_multiplier(self, flops_v: float) -> float:
        return math.log(self.m0) + self.gamma * math.log(flops_v / self.c_ref)

    def means(self, flops_b: float, flops_v: float) -> tuple[float, float]:
        """Expected losses of the two arms of a rung. Misspecified truths: ``curvature`` adds
        ``curvature * log(C / c_ref)^2`` to the law (both arms), ``variant_E_shift`` moves the
        variant's irreducible loss (its multiplier then drifts with scale unlike a power law)."""
        c_star = math.exp(self.true_log_multiplier(flops_v)) * flops_v

        def law(c: float) -> float:
            return float(self.law.loss(c)) + self.curvature * math.log(c / self.c_ref) ** 2

        return law(flops_b), law(c_star) + self.variant_E_shift


def simulate(
    truth: Truth,
    design: Sequence[Rung],
    n_seeds: int,
    rng: np.random.Generator,
) -> list[Rung]:
    """The ladder ``design`` (its FLOPs, tokens and parameters; losses ignored) with ``n_seeds``
    paired seeds drawn from ``truth``: each pair's average ~ N(mean, sd_mean^2) and difference
    ~ N(mean, sd_delta^2), independent (equal per-arm variances)."""
    out = []
    for rung in design:
        mb, mv = truth.means(rung.flops_b, rung.flops_v)
        a = rng.normal((mb + mv) / 2, truth.sd_mean, n_seeds)
        d = rng.normal(mb - mv, truth.sd_delta, n_seeds)
        out.append(
            Rung(
                rung.size, rung.flops_b, rung.flops_v, rung.tokens_b, rung.tokens_v,
                rung.params_b, rung.params_v,
                {s: float(a[s] + d[s] / 2) for s in range(n_seeds)},
                {s: float(a[s] - d[s] / 2) for s in range(n_seeds)},
            )
        )
    return out


def fitted_truth(
    fit: LadderFit, rungs: Sequence[Rung], declared: DeclaredNoise | None = None
) -> Truth | None:
    """The fit taken as the truth (the law, the FLOP trend, the noise): the plug-in model that
    `chance_to_resolve` simulates from. None when the fit has no trend. `declared` is the noise
    floor the fit itself used: a one-seed ladder in tokens or params refits its FLOP trend
    with it (without it that refit has no noise and no trend)."""
    if fit.law is None or fit.trend is None or fit.sd_delta is None or fit.sd_mean is None:
        return None
    if fit.unit != "flops":
        flops = fit_ladder(rungs, unit="flops", level=fit.level, declared=declared)
        trend = flops.trend
        if trend is None:
            return None
    else:
        trend = fit.trend
    return Truth(
        fit.law, math.exp(trend.beta[0]), trend.beta[1], trend.c_ref, fit.sd_delta, fit.sd_mean
    )


def chance_to_resolve(
    fit: LadderFit,
    rungs: Sequence[Rung],
    targets: Sequence[Target],
    min_multiplier: float,
    *,
    declared: DeclaredNoise | None = None,
    draws: int = 200,
    seed: int = 0,
) -> dict[str, float]:
    """What would resolve an undecided gate, as probabilities: the share of simulated futures
    in which the gate decides (clears or falls short) after (a) one more seed at every rung or
    (b) one more rung at 4x the largest rung's compute, with that rung's seeds. The runs already
    made are kept; only the new runs are drawn, from the fit taken as the truth (a plug-in
    predictive probability: it ignores the fit's own uncertainty, so it is optimistic when
    that uncertainty is large)."""
    truth = fitted_truth(fit, rungs, declared)
    if truth is None:
        return {}
    rng = np.random.default_rng(seed)
    rungs = sorted(rungs, key=lambda r: r.flops_b)
    top = rungs[-1]
    n_seeds = max(len(top.loss_v), 1)
    grown = Rung(
        "next", top.flops_b * 4, top.flops_v * 4, top.tokens_b * 2, top.tokens_v * 2,
        top.params_b * 2, top.params_v * 2, {}, {},
    )
    out = {}
    for option in ("one more seed", "one more rung"):
        decided = 0
        for _ in range(draws):
            if option == "one more seed":
                new = []
                for r in rungs:
                    (extra,) = simulate(truth, [r], 1, rng)
                    s = max([*r.loss_b, *r.loss_v]) + 1
                    new.append(Rung(
                        r.size, r.flops_b, r.flops_v, r.tokens_b, r.tokens_v, r.params_b,
                        r.params_v, {**r.loss_b, s: extra.loss_b[0]}, {**r.loss_v, s: extra.loss_v[0]},
                    ))
            else:
                new = [*rungs, *simulate(truth, [grown], n_seeds, rng)]
            f = fit_ladder(new, targets, unit=fit.unit, level=fit.level, declared=declared)
            decided += decide(f, min_multiplier)[0] != UNDECIDED
        out[option] = decided / draws
    return out
