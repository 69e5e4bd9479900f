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
from dataclasses import dataclass, field

import numpy as np

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
    """One lack-of-fit F test: ``dof`` numerator degrees of freedom (0 = not testable)."""

    name: str
    statistic: float
    dof: int
    dof_denominator: float
    p: float | None

    @property
    def rejects(self) -> bool:
        return self.p is not None and self.p < LACK_OF_FIT_P


@dataclass(frozen=True)
class RungMultiplier:
    size: str
    flops_v: float
    multiplier: Interval | None  # None: undefined (variant at or below E)
    why_undefined: str = ""


@dataclass(frozen=True)
class Projection:
    size: str
    flops_v: float
    multiplier: Interval


@dataclass
class LadderFit:
    """Everything one ladder says, in one ``unit``, intervals at ``level`` (two-sided)."""

    unit: str
    level: float
    law: Law | None
    rungs: list[RungMultiplier]
    gamma: Interval | None
    projections: list[Projection]
    lack_of_fit: list[LackOfFit]
    sd_delta: float | None
    sd_mean: float | None
    noise_source: str
    #: Why there is no projection (lack of fit, undefined rung, noise), "" when there is one.
    refused: str = ""
    points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


def fit_ladder(
    rungs: Sequence[Rung],
    targets: Sequence[Target] = (),
    *,
    unit: str = "flops",
    level: float = 0.95,
    declared: DeclaredNoise | None = None,
) -> LadderFit:
    """Fit the baseline law, the rung multipliers, their trend and the projections."""
    raise NotImplementedError


def decide(
    fit: LadderFit, min_multiplier: float
) -> tuple[str, str]:
    """The multiplier gate: (verdict word, one-line reason). ``fit.level`` two-sided = one-sided
    bounds at (1 + level) / 2. proceed: every target's lower bound >= min_multiplier; stop: some
    target's upper bound < min_multiplier; inconclusive otherwise and whenever refused."""
    raise NotImplementedError


@dataclass(frozen=True)
class Truth:
    """A synthetic truth: the baseline law, the multiplier trend (in FLOPs, at ``c_ref``), the
    noise; optional misspecification (a variant irreducible-loss shift, law curvature)."""

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


def simulate(
    truth: Truth,
    design: Sequence[Rung],
    n_seeds: int,
    rng: np.random.Generator,
) -> list[Rung]:
    """The ladder ``design`` (its FLOPs, tokens and parameters; losses ignored) with ``n_seeds``
    paired seeds drawn from ``truth``."""
    raise NotImplementedError
