"""Where the gate's noise comes from: paired seeds, a declared floor, or A/A baselines.

The gate needs the run-to-run sd of one seed's *paired delta* (what another seed would change:
init, data order, trajectory). The last eval points of one run share all of that, so their spread
is within-run jitter, kept only as a diagnostic around a smooth fit (docs/gate-statistics.md).
Sources, in the gate's order: >= 2 paired seeds (t, seeds - 1 dof); one seed with
``gate.noise.floor`` (t with pairs - 1 dof, normal when ``known``); one seed with
``gate.noise.measure.aa_seeds: k`` (the k + 1 baselines' run-level sd x sqrt(2), k dof:
conservative, since a real pair's arms are positively correlated); else unknown (inconclusive).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from olmoablate.plan.gate import MIN_FLOOR_PAIRS, NoiseFloor
from olmoablate.stats import chi2_cdf, chi2_ppf, t_ppf

PAIRED, FLOOR, AA, NONE = "paired seeds", "declared floor", "A/A baselines", "none"


@dataclass
class NoiseSource:
    """The sd of one seed's paired delta, and how much it is worth (its degrees of freedom)."""

    kind: str  # FLOOR | AA
    sd: float  # sd of one paired delta (metric units)
    dof: float  # inf for a declared (known) floor; k for k A/A seeds
    detail: str
    run_sd: float | None = None  # A/A: the run-level sd of one run
    runs: list[str] = field(default_factory=list)
    run_values: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: _json_num(v) for k, v in asdict(self).items()}


def floor_source(floor: float | NoiseFloor) -> NoiseSource:
    """The declared floor as a noise source: t with pairs - 1 dof, or normal when known (a bare
    number is a floor read from an old plan.json: known, with the old wording)."""
    what = "declared floor: sd of the paired delta across seeds ="
    if not isinstance(floor, NoiseFloor):
        how = f"{floor:g} (gate.noise.floor, treated as known: normal bound)"
        return NoiseSource(FLOOR, float(floor), math.inf, f"{what} {how}")
    if floor.pairs is None:
        how = "(gate.noise.floor with known: true: the sd is claimed exact, normal bound)"
        return NoiseSource(FLOOR, floor.sd, math.inf, f"{what} {floor.sd:g} {how}")
    how = (
        f"measured from {floor.pairs} seed pairs (gate.noise.floor: Student t with "
        f"{floor.pairs - 1} dof, the uncertainty of the measured sd)"
    )
    return NoiseSource(FLOOR, floor.sd, float(floor.pairs - 1), f"{what} {floor.sd:g} {how}")


@dataclass
class FloorUncertainty:
    """What a one-seed noise source measured from a few pairs can be off by. The gate's 5% is an
    average over floor measurements; given one floor s (nu dof), a one-seed gate at the bar
    falsely proceeds with probability 1 - Phi(t_{1-alpha,nu} s / sigma), which the sd's
    chi-square interval turns into a range -- and every gate using this floor shares it."""

    sd: float
    dof: float
    pairs: int  # dof + 1: seed pairs (floor) or baselines (A/A)
    sd_low: float  # 95% chi-square interval for the true sd
    sd_high: float
    fp_low: float  # conditional false-proceed at the bar over that interval
    fp_high: float
    share_above_10: float  # of floors measured from this many pairs: conditional rate > 10%
    line: str
    warning: str  # "" unless measured from fewer than MIN_FLOOR_PAIRS

    def as_dict(self) -> dict[str, Any]:
        return {k: _json_num(v) for k, v in asdict(self).items()}


def floor_uncertainty(src: NoiseSource, alpha: float) -> FloorUncertainty | None:
    """The uncertainty of a measured one-seed source (None when claimed exact: infinite dof)."""
    nu = src.dof
    if not math.isfinite(nu) or nu < 1 or not src.sd > 0:
        return None
    lo_q, hi_q = chi2_ppf(0.025, nu), chi2_ppf(0.975, nu)
    sd_low, sd_high = src.sd * math.sqrt(nu / hi_q), src.sd * math.sqrt(nu / lo_q)
    q = t_ppf(1.0 - alpha, nu)
    norm = NormalDist()
    fp_low = 1.0 - norm.cdf(q * math.sqrt(hi_q / nu))
    fp_high = 1.0 - norm.cdf(q * math.sqrt(lo_q / nu))
    # P(conditional rate > 10%) = P(s / sigma < z_0.9 / q) = P(chi2_nu < nu (z_0.9 / q)^2)
    share = chi2_cdf(nu * (norm.inv_cdf(0.9) / q) ** 2, nu)
    pairs = int(round(nu)) + 1
    what = "A/A baselines" if src.kind == AA else "seed pairs"
    line = (
        f"noise floor uncertainty: sd_d {src.sd:.4g} measured from {pairs} {what} ({nu:g} dof): "
        f"the true sd may be {sd_low:.3g} to {sd_high:.3g} (95% chi-square interval), so a "
        f"one-seed gate at the bar falsely proceeds {fp_low:.1%} to {fp_high:.1%} of the time "
        f"given this floor; {1 - alpha:.0%} confidence is only an average over floor "
        f"measurements ({share:.1%} of floors from {pairs} {what} leave it above 10%)"
    )
    warning = (
        f"the noise floor is measured from only {pairs} {what} (fewer than {MIN_FLOOR_PAIRS}): "
        f"given it, a one-seed gate at the bar may falsely proceed up to {fp_high:.0%} of the "
        f"time ({share:.0%} of such floors leave it above 10%), and every gate using it errs "
        f"together; re-measure it from >= {MIN_FLOOR_PAIRS} seed pairs"
    )
    return FloorUncertainty(
        src.sd, nu, pairs, sd_low, sd_high, fp_low, fp_high, share, line,
        warning if pairs < MIN_FLOOR_PAIRS else "",
    )  # fmt: skip


def floor_key(src: NoiseSource) -> tuple[Any, ...]:
    """What makes two gates' noise the same measurement: a declared floor's sd and dof, or the
    same A/A baseline runs."""
    if src.kind == AA:
        return (AA, tuple(src.runs))
    return (src.kind, src.sd, src.dof)


def aa_source(values: Sequence[float], runs: Sequence[str]) -> NoiseSource | None:
    """Run-to-run sd from the baselines' ``values`` (each the metric averaged over the same
    last_n matched eval points); None with fewer than two."""
    vals = [float(v) for v in values if math.isfinite(v)]
    if len(vals) < 2:
        return None
    run_sd, dof = float(np.std(vals, ddof=1)), float(len(vals) - 1)
    return NoiseSource(
        AA, run_sd * math.sqrt(2.0), dof,
        f"A/A baselines: run-level sd {run_sd:.3g} from {len(vals)} baselines with different "
        f"seeds ({int(dof)} dof); sd of a paired delta = sd x sqrt(2) = {run_sd * math.sqrt(2):.3g}"
        " (t bound). Conservative when the two arms of a pair are positively correlated "
        "(shared seed, data order), and only if the variant is no noisier than the baseline: an "
        "assumption one seed cannot check (variant run sd 1.5x the baseline's: 5.9-7.8% false "
        "proceeds at nominal 5%, docs/gate-statistics.md)",
        run_sd, list(runs), vals,
    )  # fmt: skip


def run_level_values(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], last_n: int, window: int = 0
) -> list[float]:
    """Each run's metric averaged over the last ``last_n`` x-values common to all runs; ``window``
    > 1 (a per-step metric): over windows of that many steps first, as the paired gate series."""
    if not curves:
        return []
    common = curves[0][0]
    for x, _ in curves[1:]:
        common = np.intersect1d(common, x)
    if common.size == 0:
        return [math.nan] * len(curves)
    out: list[float] = []
    for x, y in curves:
        idx = np.searchsorted(x, common)
        ys = np.asarray(y, dtype=float)[idx]
        if window > 1 and ys.size >= window:
            n_win = ys.size // window
            ys = ys[ys.size - n_win * window :].reshape(n_win, window).mean(axis=1)
        out.append(float(ys[-last_n:].mean()))
    return out


@dataclass
class Jitter:
    """Within-run eval jitter of the paired delta (a diagnostic, never the gate's noise)."""

    sd: float  # residual sd of one eval point around the smooth fit
    se_of_mean: float  # what it contributes to the mean of last_n points: sd / sqrt(last_n)
    points: int
    degree: int


def jitter(x: Sequence[float], y: Sequence[float], last_n: int) -> Jitter | None:
    """Residual sd of the last points of a delta series around a linear (>= 8 points:
    quadratic) fit in tokens. None with fewer than 4 points (no residual dof worth the name)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    if xs.size < 4 or np.ptp(xs) == 0:
        return None
    degree = 2 if xs.size >= 8 else 1
    t = (xs - xs.mean()) / np.ptp(xs)
    coef = np.polyfit(t, ys, degree)
    resid = ys - np.polyval(coef, t)
    dof = xs.size - degree - 1
    sd = float(math.sqrt(float(resid @ resid) / dof))
    return Jitter(sd, sd / math.sqrt(max(1, last_n)), int(xs.size), degree)


@dataclass
class Estimate:
    """Improvement of a variant over a comparator with its uncertainty (metric units)."""

    mean: float
    se: float
    dof: float
    lower: float  # one-sided lower confidence bound
    upper: float  # one-sided upper confidence bound
    sd: float  # sd of one seed's paired delta (across seeds, or from the noise source)
    n_seeds: int
    n_points: int
    per_seed: list[float]
    within_se: float  # within-run jitter of the last_n mean (diagnostic), nan when unknown
    source: str = PAIRED
    source_detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: _json_num(v) for k, v in asdict(self).items()}


def estimate(
    per_seed_points: Sequence[Sequence[float]],
    confidence: float,
    noise: NoiseSource | None = None,
    jitter_se: float = math.nan,
) -> Estimate | None:
    """Mean paired improvement over seeds (each seed: the mean of its last matched points) and its
    one-sided bounds: paired t on the per-seed means, or with one seed the ``noise`` source (no
    source: infinite bounds). A source claiming less noise than the within-run jitter alone puts on
    the mean (``jitter_se``) is raised to it. None when there are no points at all."""
    seeds = [np.asarray(p, dtype=float) for p in per_seed_points if len(p)]
    seeds = [p[np.isfinite(p)] for p in seeds]
    seeds = [p for p in seeds if p.size]
    if not seeds:
        return None
    per_seed = [float(p.mean()) for p in seeds]
    n_points = int(sum(p.size for p in seeds))
    n = len(seeds)
    mean = float(np.mean(per_seed))
    if n >= 2:
        sd = float(np.std(per_seed, ddof=1))
        se, dof = sd / math.sqrt(n), float(n - 1)
        source = PAIRED
        detail = f"paired seeds: sd of {n} per-seed deltas {sd:.3g}, Student t with {n - 1} dof"
    elif noise is not None:
        sd, dof, source, detail = noise.sd, noise.dof, noise.kind, noise.detail
        if math.isfinite(jitter_se) and jitter_se > sd:
            detail += (
                f"; raised to the within-run jitter of the last-points mean {jitter_se:.3g} "
                "(the declared noise cannot be smaller than that)"
            )
            sd = jitter_se
        se = sd
    else:
        sd = se = math.nan
        dof = 0.0
        source = NONE
        detail = (
            "none: one seed and no gate.noise source, so the run-to-run noise of the paired "
            "delta is unknown (the spread of one run's last eval points is within-run jitter, "
            "not run-to-run noise)"
        )
    if math.isfinite(se) and dof >= 1:
        q = t_ppf(confidence, dof)
        lower, upper = mean - q * se, mean + q * se
    else:
        lower, upper = -math.inf, math.inf
    return Estimate(
        mean, se, dof, lower, upper, sd, n, n_points, per_seed, jitter_se, source, detail
    )


def _json_num(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list):
        return [_json_num(x) for x in v]
    return v
