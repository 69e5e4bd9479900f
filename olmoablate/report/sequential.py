"""A pre-registered sequential gate: decisions at each look, vectorised, and the look history.

A design (``gate.sequential``) replaces the fixed gate's one test at full alpha by interim looks
at fractions of the token budget (futility stops only, non-binding) and full-budget looks at
planned seed stages with alpha spent by a Lan-DeMets function. The decision functions take numpy
arrays so bench/gate_calibration.py measures their operating characteristics with this very code.
Also here: the design applied to the fixed verdicts, Holm over several variants, a gate changed
by ``plan --replan`` after a look (:func:`first_look`, :func:`replan_decision`) and
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
from olmoablate.plan.planfile import GateEntry, GateRegistration
from olmoablate.report.noise import NONE, NoiseSource, estimate
from olmoablate.report.verdict import (
    PairEvidence,
    VariantVerdict,
    as_gate,
    evaluate_variant,
)
from olmoablate.stats import (
    FUTILITY_POWER_COST,
    calibrated_futility,
    holm,
    t_ppf,
    t_stage_levels,
)

CONTINUE, FUTILITY = "continue", "stop: futility"
#: the verdict of a gate changed after a look that only the change could have moved
UNPLANNED = f"{INCONCLUSIVE} (unplanned)"


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


def futility_confidence(
    design: SequentialDesign, alpha: float, n_seeds: int, floor_dof: float = math.inf
) -> float:
    """The confidence of the upper bound the design's interim looks use: the declared
    ``futility_confidence``, raised (deterministically, from the design alone) until all its
    futility stops cost at most FUTILITY_POWER_COST of power wherever the design promises 80%
    or more, under the Brownian interim model (an interim delta at fraction f has sd 1/sqrt(f)
    of the final one's; docs/gate-statistics.md). Seed-stage looks keep the declared one.
    ``floor_dof``: the dof of a one-seed noise source."""
    stages = tuple(design.seed_stages or [n_seeds])
    if stages[0] >= 2:
        floor_dof = math.inf  # the seeds' own spread: the floor plays no part
    return calibrated_futility(
        stages, tuple(design.interim), alpha, design.spending, floor_dof,
        design.futility_confidence,
    )  # fmt: skip


def interim_noise(noise: NoiseSource | None, fraction: float) -> NoiseSource | None:
    """A one-seed noise source (floor or A/A, measured at the full budget) for an interim look
    at ``fraction`` of the tokens: sd / sqrt(fraction), as the Brownian information model says
    (an interim delta holds that fraction of the final one's information). The optimistic
    model would keep the full-budget sd, which stops real effects more often."""
    if noise is None or fraction >= 1.0:
        return noise
    return replace(
        noise,
        sd=noise.sd / math.sqrt(fraction),
        detail=f"{noise.detail}; at {fraction:.0%} of tokens: sd / sqrt({fraction:g})",
    )


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
    cfg: Gate, pairs: Sequence[PairCurve], noise: NoiseSource | None
) -> SequentialResult:
    """Walk the design's looks with the pairs' data so far (``pairs`` in the spec's seed order).
    A design changed after a look is decided by :func:`evaluate_gate` with the registration in
    force at that look (:func:`replan_decision`), never by giving the new design more alpha."""
    design = cfg.sequential
    assert design is not None
    bar, conf, last_n = cfg.min_effect, cfg.confidence, cfg.last_n
    alpha = 1.0 - conf
    n_all = len(pairs)
    stages = list(design.seed_stages) or [n_all]
    levels = stage_levels(design, alpha, stages[-1])
    flags: list[str] = []
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
    fq = futility_confidence(design, alpha, stages[-1], noise.dof if noise else math.inf)
    declared = design.futility_confidence
    why = (
        ""
        if fq == declared
        else f" (declared {declared:.0%}, raised so futility costs <= "
        f"{FUTILITY_POWER_COST:.0%} of power under the Brownian interim model)"
    )
    for i, (kind, frac, n, k) in enumerate(plan_looks, start=1):
        if kind == "interim":
            boundary = f"stop for futility if the {fq:.1%} upper bound < {bar:g}{why}"
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
        src = interim_noise(noise, frac) if kind == "interim" else noise
        est = estimate([pt or [] for pt in points], conf, src)
        if est is None or not math.isfinite(est.se) or est.dof < 1:
            looks.append(
                Look(i, total, kind, frac, n, CONTINUE, boundary, note="noise unknown: no decision")
            )
            continue
        m, s = np.array(est.mean), np.array(est.se)
        if kind == "interim":
            d = str(interim_decision(m, s, est.dof, bar, fq))
        else:
            last = k == len(stages) - 1
            d = str(stage_decision(m, s, est.dof, bar, levels[k], conf, last, declared))
        q_lower = _q(1 - (levels[k] if kind == "seeds" else alpha), est.dof)
        q_upper = _q(fq if kind == "interim" else declared, est.dof)
        lower, upper = est.mean - q_lower * est.se, est.mean + q_upper * est.se
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


def first_look(entry: GateEntry | None) -> GateRegistration | None:
    """The registration in force when the gate's results could first be looked at: the earliest
    one a ``plan --replan`` replaced after the spec's runs had started (one without that record,
    from an older plan, is assumed replaced after). None: the gate was never changed after a
    look, so it decides as registered."""
    if entry is None:
        return None
    return next((h for h in entry.history if h.after_runs is not False), None)


def replan_decision(first: np.ndarray, now: np.ndarray) -> np.ndarray:
    """The decision of a gate changed after a look (block or seeds), from ``first``: the
    decision of the registration in force at that look on its own seeds, and ``now``: the changed
    gate's. The first registration was tested at its full level, so it alone may proceed (or
    continue to its own planned stages); when it is inconclusive no level is left for a second
    chance: the changed gate may stop (a stop spends no alpha) but otherwise the verdict is
    ``inconclusive (unplanned)``, never a plain proceed. Vectorised: bench/gate_calibration.py
    measures it with this very function."""
    f, n = np.asarray(first), np.asarray(now)
    return np.where(f != INCONCLUSIVE, f, np.where(n == STOP, STOP, UNPLANNED))


def apply_design(
    cfg: Gate,
    verdicts: Sequence[VariantVerdict],
    evidence: Mapping[str, Sequence[PairEvidence]],
    noise: NoiseSource | None,
    entry: GateEntry | None,
) -> tuple[list[VariantVerdict], dict[str, SequentialResult]]:
    """The verdicts with each gated (non-exploratory) one's quality check rewritten by the design
    (new verdicts, same order), and the look history per variant (empty without a design)."""
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
            res = evaluate_design(sub, pairs, noise)
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
    #: a gate changed after a look: what changed and how it is decided ("" when it was not)
    unplanned: str = ""
    #: the verdict as said: ``inconclusive (unplanned)`` when only the changed gate could have
    #: moved it (``verdict`` stays one of the three words, for gate.json and the board)
    label: str = ""


def _decide(
    cfg: Gate,
    evidence: Mapping[str, Sequence[PairEvidence]],
    family: Sequence[str],
    noise: NoiseSource | None,
    way_out: str,
    legacy: bool,
    entry: GateEntry | None,
) -> tuple[list[VariantVerdict], str, dict[str, SequentialResult]]:
    """The family's verdicts under ``cfg`` as registered: Holm across the variants (fixed
    gates) or the design's looks, the family note and the look histories."""
    fam = [evaluate_variant(v, evidence.get(v, []), cfg, noise, way_out, legacy) for v in family]
    note = ""
    if cfg.sequential is None:
        fam, note = apply_holm(fam, cfg.confidence)
    fam, seq = apply_design(cfg, fam, evidence, noise, entry)
    return fam, note, seq


def _said(v: VariantVerdict, res: SequentialResult | None) -> str:
    """A verdict as :func:`replan_decision` reads it: a design still waiting for its next look
    says ``continue`` (it has alpha left), otherwise the variant's verdict word."""
    if v.verdict == INCONCLUSIVE and res is not None and res.decision == CONTINUE:
        return CONTINUE
    return v.verdict


def _unbounded(v: VariantVerdict) -> bool:
    """The variant's check could not be bounded at all (one seed, no noise source): such a look
    proceeds with probability 0 whatever the data, so it spent no alpha."""
    est = v.checks[0].estimate if v.checks else None
    return est is not None and (est.source == NONE or not math.isfinite(est.se))


def _registration(seeds: Sequence[int] | None, sha: str | None) -> str:
    return f"seeds {list(seeds) if seeds is not None else '?'}, gate {(sha or '?')[:12]}"


def _after_replan(
    first: GateRegistration,
    entry: GateEntry,
    cfg: Gate,
    now: tuple[list[VariantVerdict], str, dict[str, SequentialResult]],
    evidence: Mapping[str, Sequence[PairEvidence]],
    family: Sequence[str],
    noise: NoiseSource | None,
    way_out: str,
    legacy: bool,
) -> tuple[list[VariantVerdict], str, dict[str, SequentialResult], str]:
    """A gate changed (block or seeds) after a look, decided as one family with the registration
    in force at that look (:func:`replan_decision`): that registration on its own seeds, Holm or
    its design included, may proceed; the changed gate is shown as exploratory and may only stop.
    Returns the verdicts, the family note, the look histories and the UNPLANNED line."""
    fam, note, seq = now
    then, was = _registration(first.seeds, first.gate_sha256), first.created or "earlier"
    changed = (
        f"UNPLANNED: the gate was changed by `plan --replan` after its runs had started"
        f"{' (assumed: an older plan.json)' if first.after_runs is None else ''} (registered "
        f"{was} with {then}; now {_registration(entry.seeds, entry.gate_sha256)})"
    )
    head = (
        f"{changed}: decided with the registration in force at the first look, the changed gate "
        "is exploratory"
    )
    block = first.block(entry) if first.seeds is not None else None
    if block is None:
        fam0, note0, seq0 = None, "", {}
        why = (
            "the gate in force at the first look is not recorded in plan.json (a plan from "
            "before the record), so its decision cannot be recomputed"
        )
    else:
        keep = set(first.seeds or [])
        ev0 = {v: [p for p in ps if p.seed in keep] for v, ps in evidence.items()}
        entry0 = entry.model_copy(update={"gate": block, "seeds": first.seeds, "history": []})
        noise0 = noise if block.noise == cfg.noise else None
        fam0, note0, seq0 = _decide(block, ev0, family, noise0, way_out, legacy, entry0)
        why = ""
        # the report's own way out of a one-seed gate without a noise source: that look could
        # not proceed whatever the data, so a change of only the noise source or seeds is free
        only_noise = block.model_copy(update={"noise": cfg.noise}) == cfg
        if only_noise and fam0 and all(_unbounded(v0) for v0 in fam0):
            return fam, note, seq, (
                f"{changed}: the first look could not be bounded (no noise source for its "
                "seed), so it spent no alpha, and the change only adds a noise source or seeds: "
                "the changed gate decides at its full level"
            )
    out: list[VariantVerdict] = []
    for i, v in enumerate(fam):
        v0 = fam0[i] if fam0 is not None else None
        before = _said(v0, seq0.get(v.variant)) if v0 is not None else INCONCLUSIVE
        decided = str(replan_decision(np.array(before), np.array(_said(v, seq.get(v.variant)))))
        if not v.checks:
            out.append(v)
            continue
        c = v.checks[0]
        shown = f"the changed gate's own estimate, exploratory (not a decision): {c.reason}"
        if v0 is not None and before != INCONCLUSIVE and v0.checks:
            c0 = v0.checks[0]
            c0 = replace(c0, reason=f"{c0.reason}; {shown}")
            stops = [*v0.stops, *(x for x in v.stops if x not in v0.stops)]
            out.append(v0.revised(checks=[c0, *v0.checks[1:]], stops=stops, role=v.role))
            continue
        first_said = why or (
            f"the registration in force at the first look says inconclusive "
            f"({v0.checks[0].reason if v0 is not None and v0.checks else 'no estimate'})"
        )
        if decided == STOP:
            reason = f"{c.reason}; the changed gate clearly misses the bar (a stop spends no alpha)"
            out.append(v.revised(checks=[replace(c, reason=reason), *v.checks[1:]]))
            continue
        reason = (
            f"{UNPLANNED}: {first_said}; that look was tested at the full level, so no level is "
            f"left for a second chance; {shown}; to add seeds after a look, pre-register them "
            "next time (gate.sequential.seed_stages, docs/gate-statistics.md)"
        )
        chk = replace(c, outcome=INCONCLUSIVE, reason=reason)
        out.append(v.revised(checks=[chk, *v.checks[1:]]))
    if fam0 is not None:
        note = f"at the first look ({then}): {note0}" if note0 else ""
        seq = {k: replace(r, flags=[head, *r.flags]) for k, r in (seq0 or seq).items()}
    else:
        seq = {k: replace(r, flags=[head, "exploratory", *r.flags]) for k, r in seq.items()}
    return out, note, seq, head


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
    or every gated variant under Holm; ``exploratory``: shown, uncorrected, never promoted.
    A gate ``plan --replan`` changed after a look is decided with the registration in force at
    that look (:func:`first_look`, :func:`replan_decision`)."""
    cfg = as_gate(cfg)
    fam, note, seq = _decide(cfg, evidence, family, noise, way_out, legacy, entry)
    first = first_look(entry)
    unplanned = ""
    if first is not None and entry is not None:
        now = (fam, note, seq)
        fam, note, seq, unplanned = _after_replan(
            first, entry, cfg, now, evidence, family, noise, way_out, legacy
        )
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
    label = verdict
    if unplanned:
        reasons = [unplanned, *reasons]
        said = (v.checks[0].reason for v in fam if v.checks)
        if verdict == INCONCLUSIVE and any(r.startswith(UNPLANNED) for r in said):
            label = UNPLANNED
    return GateOutcome(verdict, reasons, fam + expl, note, seq, unplanned, label)
