"""The 1B-to-scale decision gate: pure functions from per-pair evidence to a verdict.

Why pure: the gate is the one piece of the report whose mistakes cost real money (a 7B run that
should not have been launched, or a good idea dropped). Everything here takes plain numbers and
returns a verdict with every reason, so it can be tested exhaustively with synthetic evidence.

Conventions: an *improvement* is sign-adjusted so that positive = the variant is better
(``baseline - variant`` for ``direction: lower``). Per seed, the improvement is averaged over the
last ``last_n`` matched eval points. The noise comes from the spread of those points (one seed) or
from the spread of the per-seed means (several seeds, t with seeds-1 dof). Stability and overhead
limits are hard stops: no quality gain buys a diverging or 20%-slower model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from olmoablate.report.stats import seeds_needed, t_ppf

PROCEED, STOP, INCONCLUSIVE = "proceed", "stop", "inconclusive"

#: Defaults of the spec schema's gate block (handle plans written before a key existed).
GATE_DEFAULTS: dict[str, Any] = {
    "stage": "1B",
    "promote_to": [],
    "rule": "quality",
    "metric": "train/CE loss",
    "direction": "lower",
    "min_effect": 0.0,
    "confidence": 0.95,
    "last_n": 3,
    "variant": None,
    "reference": None,
    "tolerance": 0.02,
    "noise": {"floor": None},
    "stability": {"max_loss_spikes": 3, "max_grad_norm": None, "allow_nonfinite": False},
    "max_step_time_overhead": 0.10,
    "max_peak_memory_overhead": 0.10,
    "max_decode_latency_overhead": None,
}


def gate_config(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """The plan's gate block with the schema defaults filled in (nested blocks too)."""
    cfg: dict[str, Any] = {
        k: (dict(v) if isinstance(v, dict) else v) for k, v in GATE_DEFAULTS.items()
    }
    for key, value in (raw or {}).items():
        if isinstance(value, Mapping) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value  # an explicit null disables a limit (e.g. max_step_time_overhead)
    return cfg


@dataclass
class Estimate:
    """Improvement of a variant over a comparator with its uncertainty (metric units)."""

    mean: float
    se: float
    dof: float
    lower: float  # one-sided lower confidence bound
    upper: float  # one-sided upper confidence bound
    sd: float  # spread of one seed's effect: across seeds, or within-seed SE for a single seed
    n_seeds: int
    n_points: int
    per_seed: list[float]
    within_se: float  # noise floor from the spread of the last eval points (mean over seeds)

    def as_dict(self) -> dict[str, Any]:
        return {k: _json_num(v) for k, v in asdict(self).items()}


def estimate(per_seed_points: Sequence[Sequence[float]], confidence: float) -> Estimate | None:
    """Combine per-seed improvement points (the last n matched evals of each seed).

    One seed: mean of its points, SE = std(points)/sqrt(n), t with n-1 dof.
    Several seeds: mean of per-seed means, SE = std(per-seed means)/sqrt(seeds), t with seeds-1.
    Returns None when there are no points at all.
    """
    seeds = [np.asarray(p, dtype=float) for p in per_seed_points if len(p)]
    seeds = [p[np.isfinite(p)] for p in seeds]
    seeds = [p for p in seeds if p.size]
    if not seeds:
        return None
    per_seed = [float(p.mean()) for p in seeds]
    within = [float(p.std(ddof=1) / math.sqrt(p.size)) if p.size > 1 else math.nan for p in seeds]
    within_se = float(np.mean(within)) if all(math.isfinite(w) for w in within) else math.nan
    n_points = int(sum(p.size for p in seeds))
    if len(seeds) == 1:
        mean, se = per_seed[0], within[0]
        dof = float(seeds[0].size - 1)
        sd = se
    else:
        arr = np.asarray(per_seed)
        mean = float(arr.mean())
        sd = float(arr.std(ddof=1))
        se = sd / math.sqrt(arr.size)
        dof = float(arr.size - 1)
    if math.isfinite(se) and dof >= 1:
        t = t_ppf(confidence, dof)
        lower, upper = mean - t * se, mean + t * se
    else:
        lower, upper = -math.inf, math.inf
    return Estimate(mean, se, dof, lower, upper, sd, len(seeds), n_points, per_seed, within_se)


@dataclass
class QualityCheck:
    """One statistical comparison (vs baseline, or vs the reference) and its outcome."""

    name: str
    outcome: str  # pass | stop | inconclusive
    reason: str
    estimate: Estimate | None
    seeds_needed: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "outcome": self.outcome,
            "reason": self.reason,
            "estimate": self.estimate.as_dict() if self.estimate else None,
            "seeds_needed": self.seeds_needed,
        }


def quality_check(
    name: str,
    est: Estimate | None,
    min_effect: float,
    noise_floor: float | None,
    confidence: float,
    metric: str,
) -> QualityCheck:
    """Does the improvement clear ``min_effect`` (and the fixed noise floor) with confidence?"""
    bar = max(min_effect, noise_floor or 0.0)
    conf = f"{confidence:.0%}"
    if est is None:
        return QualityCheck(name, INCONCLUSIVE, f"{name}: no matched eval points of {metric}", None)
    desc = (
        f"{name}: improvement {est.mean:+.4g} (one-sided {conf} bounds [{_fmt(est.lower)}, "
        f"{_fmt(est.upper)}], {est.n_seeds} seed(s), SE {est.se:.3g})"
    )
    if not math.isfinite(est.se):
        return QualityCheck(
            name,
            INCONCLUSIVE,
            f"{desc}; noise cannot be estimated from one seed and one eval point "
            "(use last_n >= 2 or more seeds)",
            est,
        )
    if est.lower > bar:
        floor_txt = f" and the noise floor {noise_floor:g}" if noise_floor else ""
        return QualityCheck(name, "pass", f"{desc} > min_effect {min_effect:g}{floor_txt}", est)
    if est.mean < min_effect and est.upper < min_effect:
        return QualityCheck(
            name, STOP, f"{desc}: clearly below min_effect {min_effect:g} (upper bound too)", est
        )
    need = seeds_needed(est.mean, est.sd, bar, confidence)
    if need is None:
        extra = (
            "seeds needed: none (∞): the observed improvement does not exceed the bar, so no "
            "number of seeds makes it proceed"
            if est.mean <= bar
            else "seeds needed: more than 1000 at the observed spread"
        )
    else:
        extra = f"seeds needed: about {need} paired seed(s) would resolve it at the observed spread"
    return QualityCheck(
        name, INCONCLUSIVE, f"{desc}: not separable from min_effect {bar:g}; {extra}", est, need
    )


def tolerance_check(
    est: Estimate | None, tolerance: float, confidence: float, metric: str
) -> QualityCheck:
    """quality_per_param: the looped arm may be worse than the depth-matched baseline by at
    most ``tolerance`` (``est`` is the improvement over the baseline, so worsening = -est)."""
    name = "vs depth-matched baseline (tolerance)"
    conf = f"{confidence:.0%}"
    if est is None:
        return QualityCheck(name, INCONCLUSIVE, f"{name}: no matched eval points of {metric}", None)
    desc = (
        f"{name}: worsening {-est.mean:+.4g} (one-sided {conf} bounds [{_fmt(-est.upper)}, "
        f"{_fmt(-est.lower)}], {est.n_seeds} seed(s))"
    )
    if math.isfinite(est.lower) and -est.lower <= tolerance:
        return QualityCheck(name, "pass", f"{desc} within tolerance {tolerance:g}", est)
    if math.isfinite(est.upper) and -est.upper > tolerance:
        return QualityCheck(name, STOP, f"{desc}: clearly worse than tolerance {tolerance:g}", est)
    return QualityCheck(name, INCONCLUSIVE, f"{desc}: cannot confirm within {tolerance:g}", est)


@dataclass
class ArmHealth:
    """Stability facts about one arm at the stage (from metrics and status)."""

    spikes: int = 0
    nonfinite: bool = False
    diverged: bool = False
    max_grad_norm: float | None = None
    state: str | None = None


@dataclass
class PairEvidence:
    """Everything the gate needs about one pair (one seed of one variant at the stage size)."""

    pair_id: str
    seed: int
    valid: bool = True
    invalid_reasons: list[str] = field(default_factory=list)
    complete: bool = True
    incomplete_reason: str = ""
    improvement: list[float] = field(default_factory=list)  # last-n points vs baseline
    reference_improvement: list[float] | None = None  # quality_per_param: last-n vs reference
    variant: ArmHealth = field(default_factory=ArmHealth)
    baseline: ArmHealth = field(default_factory=ArmHealth)
    overhead: dict[str, float | None] = field(default_factory=dict)  # ratio - 1


@dataclass
class VariantVerdict:
    variant: str
    verdict: str
    reasons: list[str]
    checks: list[QualityCheck]
    pairs: list[str]
    excluded_pairs: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "verdict": self.verdict,
            "reasons": self.reasons,
            "checks": [c.as_dict() for c in self.checks],
            "pairs": self.pairs,
            "excluded_pairs": self.excluded_pairs,
        }


def stability_stops(health: ArmHealth, cfg: Mapping[str, Any], who: str) -> list[str]:
    """Hard-stop reasons from one arm's stability record."""
    stab = cfg.get("stability") or {}
    out: list[str] = []
    limit = stab.get("max_loss_spikes")
    if limit is not None and health.spikes > limit:
        out.append(f"{who}: {health.spikes} loss spikes > max_loss_spikes {limit}")
    if health.nonfinite and not stab.get("allow_nonfinite", False):
        out.append(f"{who}: non-finite loss/grad values (allow_nonfinite is false)")
    if health.diverged:
        out.append(f"{who}: run diverged (state {health.state or 'diverged'})")
    gmax = stab.get("max_grad_norm")
    if gmax is not None and health.max_grad_norm is not None and health.max_grad_norm > gmax:
        out.append(f"{who}: max grad norm {health.max_grad_norm:.4g} > max_grad_norm {gmax:g}")
    return out


_OVERHEAD_LIMITS = (
    ("step_time", "max_step_time_overhead", "step time"),
    ("peak_memory", "max_peak_memory_overhead", "peak memory"),
    ("decode_latency", "max_decode_latency_overhead", "decode latency"),
)


def overhead_stops(pairs: Sequence[PairEvidence], cfg: Mapping[str, Any]) -> list[str]:
    """Hard-stop reasons from measured overheads (mean over seeds of variant/baseline - 1)."""
    out: list[str] = []
    for key, limit_key, label in _OVERHEAD_LIMITS:
        limit = cfg.get(limit_key)
        vals = [p.overhead.get(key) for p in pairs]
        vals = [v for v in vals if v is not None and math.isfinite(v)]
        if limit is None or not vals:
            continue
        mean = float(np.mean(vals))
        if mean > limit:
            out.append(f"{label} overhead {mean:+.1%} over baseline > limit {limit:.0%}")
    return out


def evaluate_variant(
    variant: str, evidence: Sequence[PairEvidence], cfg: Mapping[str, Any]
) -> VariantVerdict:
    """Verdict for one variant at the stage size from all its pairs (one per seed)."""
    cfg = gate_config(cfg)
    reasons: list[str] = []
    stops: list[str] = []
    blockers: list[str] = []
    excluded = [p.pair_id for p in evidence if not p.valid]
    for p in evidence:
        if not p.valid:
            reasons.append(f"pair {p.pair_id} INVALID, excluded: {'; '.join(p.invalid_reasons)}")
    valid = [p for p in evidence if p.valid]
    if not valid:
        blockers.append(f"no valid pair for variant {variant!r} at stage {cfg['stage']}")
    for p in valid:
        stops.extend(f"pair {p.pair_id}: {r}" for r in stability_stops(p.variant, cfg, "variant"))
        base = stability_stops(p.baseline, cfg, "baseline")
        if base:
            blockers.append(
                f"pair {p.pair_id}: baseline unstable ({'; '.join(base)}); comparison unreliable"
            )
        if not p.complete:
            blockers.append(f"pair {p.pair_id}: not complete ({p.incomplete_reason})")
    stops.extend(overhead_stops(valid, cfg))
    checks: list[QualityCheck] = []
    conf, metric = float(cfg["confidence"]), str(cfg["metric"])
    floor = (cfg.get("noise") or {}).get("floor")
    if valid:
        main = estimate([p.improvement for p in valid], conf)
        if cfg["rule"] == "quality_per_param":
            ref = estimate([p.reference_improvement or [] for p in valid], conf)
            checks.append(
                quality_check(
                    f"vs reference {cfg.get('reference')!r} (parameter-matched)",
                    ref,
                    float(cfg["min_effect"]),
                    floor,
                    conf,
                    metric,
                )
            )
            checks.append(tolerance_check(main, float(cfg["tolerance"]), conf, metric))
        else:
            checks.append(
                quality_check("vs baseline", main, float(cfg["min_effect"]), floor, conf, metric)
            )
    reasons.extend(stops)
    reasons.extend(blockers)
    reasons.extend(c.reason for c in checks)
    if stops or any(c.outcome == STOP for c in checks):
        verdict = STOP
    elif not blockers and checks and all(c.outcome == "pass" for c in checks):
        verdict = PROCEED
    else:
        verdict = INCONCLUSIVE
    return VariantVerdict(variant, verdict, reasons, checks, [p.pair_id for p in valid], excluded)


def overall(verdicts: Sequence[VariantVerdict], primary: str | None) -> tuple[str, list[str]]:
    """The headline verdict: the primary (gated) variant's verdict, with its reasons."""
    if not verdicts:
        return INCONCLUSIVE, ["no variant to gate (no pairs at the stage size)"]
    chosen = next((v for v in verdicts if v.variant == primary), verdicts[0])
    return chosen.verdict, [f"[{chosen.variant}] {r}" for r in chosen.reasons]


def _fmt(x: float) -> str:
    return f"{x:+.4g}" if math.isfinite(x) else ("+inf" if x > 0 else "-inf")


def _json_num(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list):
        return [_json_num(x) for x in v]
    return v
