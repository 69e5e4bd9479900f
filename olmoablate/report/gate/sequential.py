"""A pre-registered sequential gate: decisions at each look, vectorised, and the look history.

Why its own module: a design (``gate.sequential``) replaces the fixed gate's one test at full
alpha by several looks -- interim looks at fractions of the token budget that can only stop for
futility, and full-budget looks at planned seed stages with alpha spent by a Lan-DeMets function
(`olmoablate.contract.seqdesign`). The decision functions take numpy arrays so
bench/gate_calibration.py measures their operating characteristics with exactly this code; the
report calls them with one replicate.

Decisions: ``continue`` | ``stop: futility`` (interim or non-final stage: the upper bound at
``futility_confidence`` is below ``min_effect``; non-binding) | ``proceed`` (full-budget looks
only: the lower bound at the stage's spending-adjusted confidence is above ``min_effect``); the
final look is ``proceed`` | ``stop`` (upper bound at the gate's confidence below the bar) |
``inconclusive``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from olmoablate.contract.gatespec import SequentialDesign
from olmoablate.contract.schema import Gate
from olmoablate.contract.seqdesign import t_stage_levels
from olmoablate.contract.stats import t_ppf
from olmoablate.report.gate.noise import NoiseSource, estimate

CONTINUE, FUTILITY, PROCEED, STOP, INCONCLUSIVE = (
    "continue",
    "stop: futility",
    "proceed",
    "stop",
    "inconclusive",
)


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
    """A full-budget look: ``proceed`` when the lower bound at 1 - ``level`` (the stage's
    spending-adjusted one-sided level, applied to the t with ``dof``) clears the bar; else at the
    final look ``stop`` / ``inconclusive`` (upper bound at ``confidence``), before it
    ``stop: futility`` / ``continue``."""
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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
        return {
            "looks": [lk.as_dict() for lk in self.looks],
            "decision": self.decision,
            "reason": self.reason,
            "gpu_hours_saved": self.gpu_hours_saved,
            "status_line": self.status_line,
            "flags": self.flags,
        }


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
    """Walk the design's looks in order with the pairs' data so far.

    ``pairs`` are the variant's pairs in the spec's seed order. ``extra_looks`` > 0: seeds were
    added by an unplanned re-plan; every full-budget level is divided by 1 + extra_looks
    (Bonferroni over the registrations, conservative) and the result is flagged.
    """
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
        if kind == "interim":
            d = str(interim_decision(np.array(est.mean), np.array(est.se), est.dof, bar, fq))
        else:
            final = k == len(stages) - 1
            d = str(
                stage_decision(
                    np.array(est.mean), np.array(est.se), est.dof, bar, levels[k], conf, final, fq
                )
            )
        q_f = _q(fq, est.dof)
        looks.append(
            Look(
                i,
                total,
                kind,
                frac,
                n,
                d,
                boundary,
                est.mean,
                est.mean - _q(1 - (levels[k] if kind == "seeds" else alpha), est.dof) * est.se,
                est.mean + q_f * est.se,
                note=note,
            )
        )
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
