"""The fixed-sample verdict of one variant: pure functions from per-pair evidence to a verdict.

Pure because the gate's mistakes cost real money (a 7B run that should not have been launched, or
a good idea dropped): plain numbers in, a verdict with every reason out, testable exhaustively.
An *improvement* is sign-adjusted (positive = the variant is better), averaged per seed over the
last ``last_n`` matched eval points; its noise is the run-to-run sd of that paired delta
(:mod:`.noise`). Stability and overhead limits are hard stops: no quality gain buys a diverging or
20%-slower model. docs/gate-statistics.md explains the statistics.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from olmoablate.plan.gate import Gate
from olmoablate.plan.names import INCONCLUSIVE, PROCEED, STOP, RunState
from olmoablate.report.compare import ArmHealth
from olmoablate.report.noise import (
    FLOOR,
    NONE,
    Estimate,
    NoiseSource,
    estimate,
    floor_source,
    jitter,
)
from olmoablate.report.overhead import ArmTiming, OverheadCheck, overhead_checks
from olmoablate.report.pairing import parity_note
from olmoablate.stats import p_above, predictive_resolve, predictive_seeds, seeds_needed

#: The verdict words (a gate's and a variant's), spelled here only.


def as_gate(gate: Gate | Mapping[str, Any]) -> Gate:
    """A gate block as the schema's model (a spec's mapping gets the schema's defaults)."""
    return gate if isinstance(gate, Gate) else Gate.model_validate(dict(gate))


@dataclass(frozen=True)
class QualityCheck:
    """One statistical comparison (vs baseline, or vs the reference) and its outcome (a value:
    a correction makes a new one, ``dataclasses.replace``)."""

    name: str
    outcome: str  # pass | stop | inconclusive
    reason: str
    estimate: Estimate | None
    seeds_needed: int | None = None
    seeds_toward: str | None = None  # proceed | stop: where more seeds would resolve it
    seeds_line: str = ""
    p_value: float | None = None  # one-sided, H0: improvement <= min_effect
    holm_p: float | None = None

    def as_dict(self) -> dict[str, Any]:
        est = self.estimate.as_dict() if self.estimate else None
        return {**dataclasses.asdict(self), "estimate": est}  # the estimate's NaNs as null


def extension_level(confidence: float, toward: str) -> float | None:
    """The one-sided level at which seeds added after this look by ``plan --replan`` are really
    tested, toward ``toward`` (one home for the rule of ``report.sequential.replan_decision``):
    this look was tested at the full level, so no level is left for a proceed (None: the changed
    gate is ``inconclusive (unplanned)`` at best), while a stop spends no alpha and keeps the
    gate's own level. Should that rule change, this is the one place the seeds line follows."""
    return 1.0 - confidence if toward == STOP else None


def seeds_line(
    est: Estimate,
    bar: float,
    confidence: float,
    legacy: bool = False,
    next_level: float | None = None,
) -> tuple[str, int | None, str | None]:
    """What more seeds would do: the predictive chance that k paired seeds resolve the gate with
    its own paired t at the level they would really be tested at (``next_level``, default
    :func:`extension_level`), averaged over the effect and noise the seeds seen leave uncertain
    (:func:`olmoablate.stats.predictive_resolve`; a chance, never "k seeds would resolve it").
    ``legacy``: the count line of plans from before it (their verdicts reproduced byte for
    byte)."""
    if not math.isfinite(est.sd):
        return "seeds needed: unknown until the noise of the paired delta is known", None, None
    toward = PROCEED if est.mean > bar else STOP
    if not legacy:
        level = extension_level(confidence, toward) if next_level is None else next_level
        return _power_line(est, bar, confidence, toward, level)
    need = seeds_needed(est.mean, est.sd, bar, confidence, known_sd=est.source == FLOOR)
    at = f"at the observed effect {est.mean:+.4g} and spread sd {est.sd:.3g} per seed"
    if est.lower > bar or est.upper < bar:
        return f"seeds needed: resolved ({toward}) with {est.n_seeds} seed(s)", need, toward
    if need is None:
        if est.mean == bar:
            return f"seeds needed: none: the observed effect equals min_effect {bar:g}", None, None
        return f"seeds needed: more than 1000 toward {toward} {at}", None, toward
    return (
        f"seeds needed: about {need} paired seed(s) would resolve it toward {toward} {at}",
        need,
        toward,
    )


def _power_line(
    est: Estimate, bar: float, confidence: float, toward: str, level: float | None
) -> tuple[str, int | None, str | None]:
    if est.lower > bar or est.upper < bar:
        return f"seeds needed: resolved ({toward}) with {est.n_seeds} seed(s)", None, toward
    gap = est.mean - bar
    if gap == 0:
        return f"seeds needed: none: the observed effect equals min_effect {bar:g}", None, None
    if not (math.isfinite(est.sd) and est.sd > 0):
        return "seeds needed: unknown (no spread to extrapolate from)", None, toward
    if level is None:
        return (
            "seeds: none added by `plan --replan` can resolve toward proceed: this look was "
            f"tested at the full level {1 - confidence:.3g}, so a gate changed after it may only "
            "stop (the verdict is 'inconclusive (unplanned)' otherwise; docs/gate-statistics.md); "
            "seeds that may proceed are pre-registered (gate.sequential.seed_stages) before a look",
            None,
            toward,
        )
    n = est.n_seeds
    # toward stop: the upper bound at the same level, so the mirrored gap
    g = abs(gap) / est.sd
    dof = est.dof if n == 1 else math.inf
    nxt = max(2, n + 1)
    p_next = float(predictive_resolve(g, n, nxt, level, dof)[0])
    hit = predictive_seeds(g, n, level, POWER_TARGET, dof)
    line = f"seeds: {nxt} paired seeds give a {p_next:.0%} chance to resolve toward {toward}"
    if hit is not None and hit[0] != nxt:
        line += f", {hit[0]} give {hit[1]:.0%}"
    elif hit is None:
        line += f"; even 200 give less than {POWER_TARGET:.0%}"
    line += (
        f", with the added seeds pooled and tested at one-sided level {level:.3g} (how the "
        "report tests seeds added by `plan --replan` after this look); "
        f"predictive: averaged over the effect and noise {n} seed(s) leave uncertain (reference "
        "prior; calibrated by bench/power_calibration.py), not the power at the observed "
        "effect; a chance, not a promise"
    )
    return line, hit[0] if hit else None, toward


#: The resolving chance the seeds statement looks for (the k seeds with at least this chance).
POWER_TARGET = 0.8


def quality_check(
    name: str,
    est: Estimate | None,
    min_effect: float,
    confidence: float,
    metric: str,
    way_out: str = "",
    legacy: bool = False,
) -> QualityCheck:
    """Does the improvement clear ``min_effect`` with confidence (or clearly miss it)?"""
    bar = float(min_effect)
    conf = f"{confidence:.0%}"
    if est is None:
        return QualityCheck(name, INCONCLUSIVE, f"{name}: no matched eval points of {metric}", None)
    desc = (
        f"{name}: improvement {est.mean:+.4g} (one-sided {conf} bounds [{_fmt(est.lower)}, "
        f"{_fmt(est.upper)}], {est.n_seeds} seed(s), noise: {est.source})"
    )
    line, need, toward = seeds_line(est, bar, confidence, legacy)
    if not math.isfinite(est.se) or est.source == NONE:
        why = est.source_detail or "the noise cannot be estimated"
        reason = f"{desc}; cannot be bounded: {why}" + (f"; {way_out}" if way_out else "")
        return QualityCheck(name, INCONCLUSIVE, reason, est, None, None, line)
    p = p_above(est.mean, est.se, bar, est.dof)
    if est.lower > bar:
        return QualityCheck(
            name, "pass", f"{desc} > min_effect {bar:g}", est, need, toward, line, p
        )
    if est.mean < bar and est.upper < bar:
        reason = f"{desc}: clearly below min_effect {bar:g} (upper bound too)"
        return QualityCheck(name, STOP, reason, est, need, toward, line, p)
    reason = f"{desc}: not separable from min_effect {bar:g}; {line}"
    return QualityCheck(name, INCONCLUSIVE, reason, est, need, toward, line, p)


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
        f"{_fmt(-est.lower)}], {est.n_seeds} seed(s), noise: {est.source})"
    )
    if math.isfinite(est.lower) and -est.lower <= tolerance:
        return QualityCheck(name, "pass", f"{desc} within tolerance {tolerance:g}", est)
    if math.isfinite(est.upper) and -est.upper > tolerance:
        return QualityCheck(name, STOP, f"{desc}: clearly worse than tolerance {tolerance:g}", est)
    return QualityCheck(name, INCONCLUSIVE, f"{desc}: cannot confirm within {tolerance:g}", est)


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
    overhead: dict[str, float | None] = field(default_factory=dict)  # ratio - 1 (point)
    #: The tail of the improvement series (tokens, improvement): the jitter diagnostic.
    series_x: list[float] = field(default_factory=list)
    series: list[float] = field(default_factory=list)
    #: Steady-state step times of (baseline, variant), when the metrics have them.
    timing: tuple[ArmTiming, ArmTiming] | None = None
    #: The whole improvement series and the variant arm's budget (sequential designs' looks).
    curve_x: list[float] = field(default_factory=list)
    curve: list[float] = field(default_factory=list)
    tokens: float = 0.0
    gpu_hours: float = 0.0
    #: Differences between the arms' execution records (:mod:`.pairing`): cost not compared.
    execution_mismatch: list[str] = field(default_factory=list)
    #: quality_per_param: the tail of the improvement series over the reference arm (what its
    #: first check decides; the gate card plots it).
    reference_series_x: list[float] = field(default_factory=list)
    reference_series: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class VariantVerdict:
    """One variant's verdict with every reason. A value: the family-wise correction and the
    design make new verdicts (:meth:`revised`), never edit one that a caller holds."""

    variant: str
    verdict: str
    reasons: list[str]
    checks: list[QualityCheck]
    pairs: list[str]
    excluded_pairs: list[str]
    role: str = "primary"  # primary | family (Holm) | exploratory
    noise: str = ""
    jitter: str = ""
    step_time: OverheadCheck | None = None
    notes: list[str] = field(default_factory=list)
    preamble: list[str] = field(default_factory=list)  # excluded pairs
    stops: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)

    def revised(self, **changes: Any) -> VariantVerdict:
        """A new verdict with ``changes`` (e.g. ``checks`` after Holm's correction), its reasons
        and verdict recomputed from its stops, blockers and checks."""
        new = dataclasses.replace(self, **changes)
        reasons = [*new.preamble, *new.stops, *new.blockers, *(c.reason for c in new.checks)]
        verdict = combine(new.stops, new.blockers, new.checks)
        return dataclasses.replace(new, reasons=reasons, verdict=verdict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "verdict": self.verdict, "role": self.role,
            "reasons": self.reasons, "checks": [c.as_dict() for c in self.checks],
            "noise": self.noise, "jitter": self.jitter,
            "step_time": self.step_time.as_dict() if self.step_time else None,
            "notes": self.notes, "pairs": self.pairs, "excluded_pairs": self.excluded_pairs,
        }  # fmt: skip


def stability_stops(health: ArmHealth, cfg: Gate, who: str) -> list[str]:
    """Hard-stop reasons from one arm's stability record."""
    stab = cfg.stability
    out: list[str] = []
    limit = stab.max_loss_spikes
    if health.spikes > limit:
        out.append(f"{who}: {health.spikes} loss spikes > max_loss_spikes {limit}")
    if health.nonfinite and not stab.allow_nonfinite:
        out.append(f"{who}: non-finite loss/grad values (allow_nonfinite is false)")
    if health.diverged:
        out.append(f"{who}: run diverged (state {health.state or RunState.DIVERGED})")
    gmax = stab.max_grad_norm
    if gmax is not None and health.max_grad_norm is not None and health.max_grad_norm > gmax:
        out.append(f"{who}: max grad norm {health.max_grad_norm:.4g} > max_grad_norm {gmax:g}")
    return out


def evaluate_variant(
    variant: str,
    evidence: Sequence[PairEvidence],
    cfg: Gate | Mapping[str, Any],
    noise: NoiseSource | None = None,
    way_out: str = "",
    legacy: bool = False,
) -> VariantVerdict:
    """Verdict for one variant at the stage size from all its pairs (one per seed); ``noise``: the
    one-seed source (default: the declared floor; A/A baselines are measured by the caller)."""
    cfg = as_gate(cfg)
    floor = cfg.noise.floor
    if noise is None and floor is not None:
        noise = floor_source(floor)
    stops: list[str] = []
    blockers: list[str] = []
    excluded = [p.pair_id for p in evidence if not p.valid]
    preamble = [
        f"pair {p.pair_id} INVALID, excluded: {'; '.join(p.invalid_reasons)}"
        for p in evidence
        if not p.valid
    ]
    valid = [p for p in evidence if p.valid]
    if not valid:
        blockers.append(f"no valid pair for variant {variant!r} at stage {cfg.stage}")
    for p in valid:
        stops.extend(f"pair {p.pair_id}: {r}" for r in stability_stops(p.variant, cfg, "variant"))
        base = stability_stops(p.baseline, cfg, "baseline")
        if base:
            blockers.append(
                f"pair {p.pair_id}: baseline unstable ({'; '.join(base)}); comparison unreliable"
            )
        if not p.complete:
            blockers.append(f"pair {p.pair_id}: not complete ({p.incomplete_reason})")
        if p.execution_mismatch and _has_cost_limits(cfg):
            blockers.append(
                f"pair {p.pair_id}: {parity_note(p.execution_mismatch)}; the overhead limits "
                "cannot be checked on it"
            )
    o_stops, o_blockers, step_check = overhead_checks(
        [(p.pair_id, p.timing, p.overhead) for p in valid], cfg
    )
    stops.extend(o_stops)
    blockers.extend(o_blockers)
    checks: list[QualityCheck] = []
    conf, metric, last_n = cfg.confidence, cfg.metric, cfg.last_n
    jit = [jitter(p.series_x, p.series, last_n) for p in valid]
    jit_known = [j for j in jit if j is not None]
    jitter_se = max((j.se_of_mean for j in jit_known), default=math.nan)
    jitter_txt = (
        "within-run eval jitter of the paired delta (diagnostic, not the gate's noise): sd "
        f"{max(j.sd for j in jit_known):.3g} per eval point around a smooth fit of the last "
        f"{jit_known[0].points} points, {jitter_se:.3g} on the mean of the last {last_n}"
        if jit_known
        else ""
    )
    if valid:
        main = estimate([p.improvement for p in valid], conf, noise, jitter_se)
        if cfg.rule == "quality_per_param":
            ref = estimate([p.reference_improvement or [] for p in valid], conf, noise, jitter_se)
            name = f"vs reference {cfg.reference!r} (parameter-matched)"
            checks.append(quality_check(name, ref, cfg.min_effect, conf, metric, way_out, legacy))
            checks.append(tolerance_check(main, cfg.tolerance, conf, metric))
        else:
            checks.append(
                quality_check("vs baseline", main, cfg.min_effect, conf, metric, way_out, legacy)
            )
    reasons = [*preamble, *stops, *blockers, *(c.reason for c in checks)]
    est = checks[0].estimate if checks else None
    noise_txt = f"noise source: {est.source_detail}" if est else ""
    return VariantVerdict(
        variant, combine(stops, blockers, checks), reasons, checks, [p.pair_id for p in valid],
        excluded, noise=noise_txt, jitter=jitter_txt, step_time=step_check,
        notes=list(step_check.notes) if step_check else [], preamble=preamble, stops=stops,
        blockers=blockers,
    )  # fmt: skip


def _has_cost_limits(cfg: Gate) -> bool:
    limits = (cfg.max_step_time_overhead, cfg.max_peak_memory_overhead)
    return any(lim is not None for lim in (*limits, cfg.max_decode_latency_overhead))


def combine(stops: Sequence[str], blockers: Sequence[str], checks: Sequence[QualityCheck]) -> str:
    if stops or any(c.outcome == STOP for c in checks):
        return STOP
    if not blockers and checks and all(c.outcome == "pass" for c in checks):
        return PROCEED
    return INCONCLUSIVE


def _fmt(x: float) -> str:
    return f"{x:+.4g}" if math.isfinite(x) else ("+inf" if x > 0 else "-inf")
