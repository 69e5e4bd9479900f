"""A pre-registered sequential gate: decisions at each look, vectorised, and the look history.

A design (``gate.sequential``) replaces the fixed gate's one test at full alpha by interim looks
at fractions of the token budget (futility stops only, non-binding) and full-budget looks at
planned seed stages with alpha spent by a Lan-DeMets function. The decision functions take numpy
arrays so bench/gate_calibration.py measures their operating characteristics with this very code.
Also here: the design applied to the fixed verdicts, Holm over several variants, and
:func:`evaluate_gate`, one gate block to its headline verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from olmoablate.plan.gate import Gate, SequentialDesign
from olmoablate.plan.names import INCONCLUSIVE, PROCEED, STOP
from olmoablate.plan.planfile import GateEntry
from olmoablate.report.noise import NoiseSource, estimate
from olmoablate.report.verdict import (
    PairEvidence,
    VariantVerdict,
    as_gate,
    evaluate_variant,
    extension_level,
    quality_check,
)
from olmoablate.stats import holm, t_ppf, t_stage_levels

CONTINUE, FUTILITY = "continue", "stop: futility"


def _q(conf: float, dof: float) -> float:
    return t_ppf(conf, dof) if dof >= 1 else math.inf


def interim_decision(
    mean: np.ndarray, se: np.ndarray, dof: float, bar: float, futility_confidence: float
) -> np.ndarray:
    """``stop: futility`` where the upper bound at ``futility_confidence`` is below the bar,
    else ``continue``; never ``proceed`` (an interim delta is not the final one)."""
    upper = np.asarray(mean) + _q(futility_confidence, dof) * np.asarray(se)
    return np.where(upper < bar, FUTILITY, CONTINUE)


def stage_decision(
    mean: np.ndarray,
    se: np.ndarray,
    dof: float,
    bar: float,
    level: float,
    confidence: float,
    final: bool,
    futility_confidence: float,
) -> np.ndarray:
    """A full-budget look: ``proceed`` when the lower bound at 1 - ``level`` clears the bar; else
    ``stop``/``inconclusive`` at the final look, ``stop: futility``/``continue`` before it."""
    m, s = np.asarray(mean, dtype=float), np.asarray(se, dtype=float)
    lower = m - _q(1.0 - level, dof) * s
    if final:
        upper = m + _q(confidence, dof) * s
        rest = np.where(upper < bar, STOP, INCONCLUSIVE)
    else:
        rest = interim_decision(m, s, dof, bar, futility_confidence)
    return np.where(lower > bar, PROCEED, rest)


def stage_levels(design: SequentialDesign, alpha: float, n_seeds: int) -> list[float]:
    """Nominal one-sided levels of the design's full-budget looks (one look at ``n_seeds``
    when it declares no seed stages: the whole alpha), for the paired t of each stage."""
    stages = design.seed_stages or [n_seeds]
    return t_stage_levels(stages, alpha, design.spending)


@dataclass
class Look:
    """One look of the design as the report took it."""

    index: int  # 1-based
    of: int
    kind: str  # interim | seeds
    fraction: float  # of the token budget
    seeds: int
    decision: str  # continue | stop: futility | proceed | stop | inconclusive | not reached
    boundary: str
    mean: float | None = None
    lower: float | None = None
    upper: float | None = None
    planned: bool = True
    note: str = ""


@dataclass
class PairCurve:
    """One pair's improvement series (tokens, improvement) and its arm's planned budget."""

    seed: int
    x: list[float]
    y: list[float]
    tokens: float
    complete: bool
    gpu_hours: float = 0.0


@dataclass
class SequentialResult:
    """The look history, the current decision and what stopping saved."""

    looks: list[Look]
    decision: str
    reason: str
    gpu_hours_saved: float = 0.0
    status_line: str = ""
    flags: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _at_fraction(p: PairCurve, f: float, last_n: int) -> list[float] | None:
    """The pair's last ``last_n`` improvement points at or before fraction ``f`` of its budget
    (None when the pair has not reached it yet)."""
    xs = np.asarray(p.x, dtype=float)
    if xs.size == 0 or xs[-1] < f * p.tokens * (1 - 1e-9):
        return None
    keep = xs <= f * p.tokens * (1 + 1e-9)
    ys = np.asarray(p.y, dtype=float)[keep]
    return [float(v) for v in ys[-last_n:]] if ys.size else None


def _last_x(p: PairCurve, f: float) -> float:
    xs = [x for x in p.x if x <= f * p.tokens * (1 + 1e-9)]
    return xs[-1] if xs else 0.0


def evaluate_design(
    cfg: Gate,
    pairs: Sequence[PairCurve],
    noise: NoiseSource | None,
    extra_looks: int = 0,
) -> SequentialResult:
    """Walk the design's looks with the pairs' data so far (``pairs`` in the spec's seed order).
    ``extra_looks``: earlier registrations of an unplanned re-plan; every full-budget level is
    divided by 1 + extra_looks (Bonferroni, conservative) and flagged."""
    design = cfg.sequential
    assert design is not None
    bar, conf, last_n = cfg.min_effect, cfg.confidence, cfg.last_n
    alpha = 1.0 - conf
    n_all = len(pairs)
    stages = list(design.seed_stages) or [n_all]
    levels = stage_levels(design, alpha, stages[-1])
    flags: list[str] = []
    if extra_looks:
        levels = [lv / (1 + extra_looks) for lv in levels]
        flags.append(
            f"UNPLANNED: seeds were added by `plan --replan` after the gate was registered "
            f"({extra_looks} earlier registration(s)); full-budget looks are tested at level / "
            f"{1 + extra_looks} (Bonferroni), never at full alpha"
        )
    if n_all > stages[-1]:
        flags.append(
            f"UNPLANNED: {n_all} seeds but the design plans at most {stages[-1]}; the extra "
            "seeds are left out of every look"
        )
    plan_looks: list[tuple[str, float, int, int]] = [
        ("interim", f, stages[0], -1) for f in design.interim
    ]
    plan_looks += [("seeds", 1.0, n, k) for k, n in enumerate(stages)]
    total = len(plan_looks)
    looks: list[Look] = []
    decision, reason = CONTINUE, "no look reached yet"
    stopped_at: tuple[float, int] | None = None
    for i, (kind, frac, n, k) in enumerate(plan_looks, start=1):
        fq = design.futility_confidence
        if kind == "interim":
            boundary = f"stop for futility if the {fq:.0%} upper bound < {bar:g}"
        else:
            lv = levels[k]
            boundary = (
                f"proceed if the {1 - lv:.4%} lower bound > {bar:g} (one-sided level {lv:.3g})"
            )
        use = pairs[:n]
        if stopped_at is not None and kind == "interim":
            looks.append(Look(i, total, kind, frac, n, "after a futility stop", boundary))
            continue
        points = [_at_fraction(p, frac, last_n) for p in use] if len(use) == n else []
        if (
            len(points) < n
            or any(pt is None for pt in points)
            or (kind == "seeds" and not all(p.complete for p in use))
        ):
            looks.append(Look(i, total, kind, frac, n, "not reached", boundary))
            continue
        note = ""
        if kind == "interim":
            used = min(_last_x(p, frac) / p.tokens for p in use if p.tokens)
            if used < 0.9 * frac:
                note = (
                    f"no eval point near {frac:.0%}: the last one at or before it is at {used:.0%}"
                    " of tokens (earlier data: futility is still safe, power may suffer)"
                )
        est = estimate([pt or [] for pt in points], conf, noise)
        if est is None or not math.isfinite(est.se) or est.dof < 1:
            looks.append(
                Look(i, total, kind, frac, n, CONTINUE, boundary, note="noise unknown: no decision")
            )
            continue
        m, s = np.array(est.mean), np.array(est.se)
        if kind == "interim":
            d = str(interim_decision(m, s, est.dof, bar, fq))
        else:
            d = str(stage_decision(m, s, est.dof, bar, levels[k], conf, k == len(stages) - 1, fq))
        q_lower = _q(1 - (levels[k] if kind == "seeds" else alpha), est.dof)
        lower, upper = est.mean - q_lower * est.se, est.mean + _q(fq, est.dof) * est.se
        looks.append(Look(i, total, kind, frac, n, d, boundary, est.mean, lower, upper, note=note))
        if stopped_at is not None:  # a full-budget look after a futility stop: overridden
            flags.append(
                f"the futility stop at {stopped_at[0]:.0%} of tokens was overridden (the arms "
                "were trained on); non-binding, so this look keeps its level"
            )
            stopped_at = None
        decision = d
        reason = f"look {i} of {total} ({kind}, {frac:.0%} of tokens, {n} seed(s)): {d}"
        if d == FUTILITY:
            stopped_at = (frac, n)
        elif d in (PROCEED, STOP, INCONCLUSIVE):
            break
    saved = 0.0
    status = ""
    if stopped_at is not None:
        frac, _ = stopped_at
        done = next(lk for lk in looks if lk.decision == FUTILITY)
        for p in pairs:  # what the variant's arms have not trained yet is not spent
            progress = min(1.0, (p.x[-1] / p.tokens) if p.x and p.tokens else 0.0)
            saved += (1.0 - progress) * p.gpu_hours
        status = f"stopped for futility at look {done.index} of {done.of}, {frac:.0%} of tokens"
        reason = status + f" ({done.boundary}; non-binding: resuming the arms is allowed)"
    return SequentialResult(looks, decision, reason, saved, status, flags)


def earlier_registrations(entry: GateEntry | None) -> int:
    """How many earlier registrations of this gate had other seeds (unplanned seed additions)."""
    if entry is None or entry.seeds is None:
        return 0
    now = sorted(entry.seeds)
    return len(
        {tuple(sorted(h.seeds or [])) for h in entry.history if sorted(h.seeds or []) != now}
    )


def apply_design(
    cfg: Gate,
    verdicts: Sequence[VariantVerdict],
    evidence: Mapping[str, Sequence[PairEvidence]],
    noise: NoiseSource | None,
    entry: GateEntry | None,
    legacy: bool = False,
) -> tuple[list[VariantVerdict], dict[str, SequentialResult]]:
    """The verdicts with each gated (non-exploratory) one's quality check rewritten by the design
    (new verdicts, same order), and the look history per variant (empty without a design).
    Without a design, seeds added by an unplanned ``plan --replan`` are still never tested at
    full alpha (Bonferroni over the registrations)."""
    extra = earlier_registrations(entry)
    out: dict[str, SequentialResult] = {}
    family = [v for v in verdicts if v.role != "exploratory" and v.checks]
    m = max(1, len(family))
    revised: dict[int, VariantVerdict] = {}
    for v in family:
        chk = v.checks[0]
        blockers = v.blockers
        if cfg.sequential is not None:
            order = list(entry.seeds) if entry is not None and entry.seeds else []
            ranked = sorted(
                (p for p in evidence.get(v.variant, []) if p.valid),
                key=lambda e: (order.index(e.seed) if e.seed in order else len(order), e.seed),
            )
            pairs = [
                PairCurve(p.seed, p.curve_x, p.curve, p.tokens, p.complete, p.gpu_hours)
                for p in ranked
            ]
            # several variants: each design at alpha / m (Bonferroni; Holm does not apply
            # across sequential looks)
            sub = (
                cfg
                if m == 1
                else cfg.model_copy(update={"confidence": 1 - (1 - cfg.confidence) / m})
            )
            res = evaluate_design(sub, pairs, noise, extra)
            out[v.variant] = res
            if res.decision == PROCEED:
                outcome = "pass"
                # later stages' seeds are run only when needed: their pairs do not block
                used = next(lk.seeds for lk in res.looks if lk.decision == PROCEED)
                later = [f"pair {p.pair_id}:" for p in ranked[used:]]
                blockers = [b for b in blockers if not b.startswith(tuple(later) or ("\0",))]
            elif res.decision in (FUTILITY, STOP):
                outcome = STOP
            else:
                outcome = INCONCLUSIVE
            reason = f"{chk.name}: sequential design: {res.reason}" + "".join(
                f"; {f}" for f in res.flags
            )
            if m > 1:
                reason += f"; {m} gated variants: each design at alpha / {m} (Bonferroni)"
            chk = replace(chk, outcome=outcome, reason=reason)
        elif extra and chk.estimate is not None:
            conf = 1.0 - (1.0 - cfg.confidence) / (1 + extra)
            est = estimate(
                [p.improvement for p in evidence.get(v.variant, []) if p.valid], conf, noise
            )
            nxt = extension_level(cfg.confidence, extra)
            new = quality_check(
                chk.name, est, cfg.min_effect, conf, cfg.metric, "", legacy, nxt
            )
            chk = replace(
                chk,
                outcome=new.outcome,
                estimate=new.estimate,
                reason=(
                    f"{new.reason}; UNPLANNED: seeds were added by `plan --replan` after the gate "
                    f"was registered with other seeds ({extra} earlier registration(s)): tested at "
                    f"one-sided {conf:.4g} (alpha / {1 + extra}), never at full alpha; declare "
                    "gate.sequential.seed_stages to plan added seeds"
                ),
            )
        revised[id(v)] = v.revised(checks=[chk, *v.checks[1:]], blockers=blockers)
    return [revised.get(id(v), v) for v in verdicts], out


def apply_holm(
    verdicts: Sequence[VariantVerdict], confidence: float
) -> tuple[list[VariantVerdict], str]:
    """Holm over the gated variants' first (quality) checks, H0: improvement <= min_effect, keeps
    P(promoting any null variant) at 1 - confidence: the new verdicts (a pass that does not survive
    becomes inconclusive) and the sentence to say (none, and the verdicts unchanged, for fewer
    than two)."""
    m = len(verdicts)
    if m < 2:
        return list(verdicts), ""
    alpha = 1.0 - confidence
    ps = [
        (v.checks[0].p_value if v.checks and v.checks[0].p_value is not None else 1.0)
        for v in verdicts
    ]
    rejected, adjusted = holm(ps, alpha)
    out: list[VariantVerdict] = []
    for v, rej, adj in zip(verdicts, rejected, adjusted, strict=True):
        if not v.checks:
            out.append(replace(v, role="family"))
            continue
        chk = replace(v.checks[0], holm_p=adj)
        if chk.outcome == "pass" and not rej:
            chk = replace(
                chk,
                outcome=INCONCLUSIVE,
                reason=chk.reason
                + f"; but not after Holm correction over {m} variants (adjusted p {adj:.3g} > "
                f"{alpha:.3g})",
            )
        elif chk.outcome == "pass":
            chk = replace(
                chk, reason=chk.reason + f"; survives Holm over {m} variants (adjusted p {adj:.3g})"
            )
        out.append(v.revised(role="family", checks=[chk, *v.checks[1:]]))
    note = (
        f"family-wise error controlled by Holm over {m} gated variants "
        f"({', '.join(v.variant for v in verdicts)}) at {alpha:.3g}"
    )
    return out, note


@dataclass
class GateOutcome:
    verdict: str
    reasons: list[str]
    verdicts: list[VariantVerdict]
    family_note: str = ""
    #: per gated variant: the sequential design's look history (`olmoablate.report.sequential`)
    sequential: dict[str, SequentialResult] = field(default_factory=dict)


def evaluate_gate(
    cfg: Gate | Mapping[str, Any],
    evidence: Mapping[str, Sequence[PairEvidence]],
    family: Sequence[str],
    exploratory: Sequence[str] = (),
    noise: NoiseSource | None = None,
    way_out: str = "",
    legacy: bool = False,
    entry: GateEntry | None = None,
) -> GateOutcome:
    """One gate block -> the headline verdict. ``family``: one primary variant (``gate.variant``)
    or every gated variant under Holm; ``exploratory``: shown, uncorrected, never promoted."""
    cfg = as_gate(cfg)
    conf = cfg.confidence
    fam = [evaluate_variant(v, evidence.get(v, []), cfg, noise, way_out, legacy) for v in family]
    note = ""
    if cfg.sequential is None:
        fam, note = apply_holm(fam, conf)
    fam, seq = apply_design(cfg, fam, evidence, noise, entry, legacy)
    expl = [
        replace(
            v,
            role="exploratory",
            notes=[*v.notes, "exploratory: not gated, uncorrected for multiplicity, never promoted"],
        )
        for v in (
            evaluate_variant(x, evidence.get(x, []), cfg, noise, way_out, legacy)
            for x in exploratory
        )
    ]
    if not fam:
        return GateOutcome(INCONCLUSIVE, ["no variant to gate (no pairs at the stage size)"], expl)
    if len(fam) == 1:
        verdict, reasons = fam[0].verdict, [f"[{fam[0].variant}] {r}" for r in fam[0].reasons]
    else:
        if any(v.verdict == PROCEED for v in fam):
            verdict = PROCEED
        elif all(v.verdict == STOP for v in fam):
            verdict = STOP
        else:
            verdict = INCONCLUSIVE
        reasons = [note] + [f"[{v.variant}] {r}" for v in fam for r in v.reasons]
    return GateOutcome(verdict, reasons, fam + expl, note, seq)
