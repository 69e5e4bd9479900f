"""The multiplier gate (``rule: multiplier``, docs/scaling.md): a scaling ladder read off the
results folder, fitted and decided by :mod:`olmoablate.scaling`, as one variant's verdict.

Why a module of its own: the estimator lives in ``scaling`` (shared with ``plan``'s expected
interval width and ``bench/ladder_calibration.py``, so all three use one estimator); what is left
for the report is turning measured pairs into its inputs and its outputs into a verdict the report,
gate.json, the cards, the board and the notebook frames read like any other gate's. Each run's
loss is the value the quality gate reads for one run (the gate metric averaged over its last
``last_n`` eval points, :func:`.noise.run_level_values`), so a ladder and a quality gate of the
same results agree on what a run scored.

A seed enters a rung only as a complete, valid pair (both arms): the paired seed effect is what
makes the multiplier's interval narrow, and a lone arm would enter the fit unpaired. Pairs left
out are named; a rung with none left is dropped, with its reason. A ladder with runs not yet
finished is inconclusive, as a quality gate with an incomplete pair is: the fit is shown as an
interim view, but the pre-registered design is decided once, on every run it planned.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from olmoablate import scaling
from olmoablate.plan import metrics as names
from olmoablate.plan.names import INCONCLUSIVE, PROCEED, STOP
from olmoablate.report.compare import PairResult
from olmoablate.report.noise import run_level_values
from olmoablate.report.track import ProjectionCheck, projection_check
from olmoablate.report.verdict import QualityCheck, VariantVerdict, combine, stability_stops

#: The gate rule this module decides.
MULTIPLIER = "multiplier"
#: The quality gate's cost limits, which a multiplier gate does not apply (said in its notes).
_COST_LIMITS = (
    "max_step_time_overhead", "max_peak_memory_overhead", "max_decode_latency_overhead",
)  # fmt: skip
#: The estimator's outcome -> (the verdict word, the check's outcome).
_VERDICT = {
    scaling.CLEARS: (PROCEED, "pass"),
    scaling.FALLS_SHORT: (STOP, STOP),
    scaling.UNDECIDED: (INCONCLUSIVE, INCONCLUSIVE),
}


def run_value(pair: PairResult, arm: str, metric: str, last_n: int) -> float | None:
    """One run's gate value: ``metric`` averaged over its last ``last_n`` eval points (a per-step
    metric over eval-interval windows first), as the quality gate and the A/A noise read a run."""
    run = pair.baseline if arm == "baseline" else pair.variant
    c = run.curve(metric)
    if not len(c):
        return None
    window = 0 if names.is_eval(metric) else run.entry.evaluation.interval
    v = run_level_values([(c.x, c.y)], last_n, window)[0]
    return v if math.isfinite(v) else None


@dataclass
class RungReading:
    """What the results folder gave for a ladder: the rungs, and what was left out and why."""

    rungs: list[scaling.Rung] = field(default_factory=list)
    #: pairs left out of a rung (invalid, unfinished, no points), one line each
    left_out: list[str] = field(default_factory=list)
    #: rungs with no complete pair, one line each
    dropped: list[str] = field(default_factory=list)
    #: unfinished pairs: the verdict waits for them (blockers)
    unfinished: list[str] = field(default_factory=list)
    #: invalid pairs (pair id -> reasons): excluded, as the quality gate excludes them
    invalid: dict[str, list[str]] = field(default_factory=dict)
    #: the pairs that entered the fit
    used: list[PairResult] = field(default_factory=list)


def read_rungs(
    pairs: Sequence[PairResult], variant: str, sizes: Sequence[str], metric: str, last_n: int
) -> RungReading:
    """One :class:`scaling.Rung` per size in ``sizes`` with a complete valid pair of ``variant``:
    each seed's value of both arms, the arms' training FLOPs, tokens and (unique) parameters from
    the plan (the variant's ``unique_params``: a shared layer is one parameter)."""
    out = RungReading()
    for size in sizes:
        mine = sorted(
            (p for p in pairs if p.size == size and p.variant_name == variant), key=lambda p: p.seed
        )
        if not mine:
            out.dropped.append(f"rung {size}: no pair of {variant!r} in the plan")
            continue
        loss_b: dict[int, float] = {}
        loss_v: dict[int, float] = {}
        used: list[PairResult] = []
        for p in mine:
            if not p.valid:
                out.invalid[p.pair_id] = list(p.invalid_reasons)
                out.left_out.append(f"pair {p.pair_id}: INVALID ({'; '.join(p.invalid_reasons)})")
                continue
            if not p.complete:
                out.unfinished.append(f"pair {p.pair_id}: not complete ({p.incomplete_reason})")
                out.left_out.append(f"pair {p.pair_id}: not complete ({p.incomplete_reason})")
                continue
            vb, vv = (run_value(p, arm, metric, last_n) for arm in ("baseline", "variant"))
            if vb is None or vv is None:
                out.left_out.append(f"pair {p.pair_id}: no points of {metric}")
                continue
            loss_b[p.seed], loss_v[p.seed] = vb, vv
            used.append(p)
        if not used:
            out.dropped.append(
                f"rung {size}: no complete valid pair ({len(mine)} planned; see the pairs left out)"
            )
            continue
        b, v = used[0].baseline.entry, used[0].variant.entry
        out.rungs.append(
            scaling.Rung(
                size, float(b.total_train_flops), float(v.total_train_flops), float(b.tokens),
                float(v.tokens), float(b.params), float(v.unique_params), loss_b, loss_v,
            )
        )  # fmt: skip
        out.used.extend(used)
    out.rungs.sort(key=lambda r: r.flops_b)
    return out


def targets_of(ladder: Any) -> list[scaling.Target]:
    """The plan's targets (``GateEntry.ladder.targets``: each promoted size at its planned budget)
    as the estimator's, the variant's numbers."""
    return [
        scaling.Target(str(t.size), float(t.flops_v), float(t.tokens_v), float(t.params_v))
        for t in getattr(ladder, "targets", None) or []
    ]


@dataclass
class LadderResult:
    """One variant's ladder: the rungs it was fitted on, the fit in every unit (the gate's
    first), the verdict word and the estimator's line, and the projections checked where
    results exist."""

    variant: str
    unit: str
    min_multiplier: float
    confidence: float
    rungs: list[scaling.Rung]
    targets: list[scaling.Target]
    fits: dict[str, scaling.LadderFit]
    decision: str
    line: str
    #: the verdict's check outcome: pass | stop | inconclusive
    outcome: str = INCONCLUSIVE
    left_out: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    checks: list[ProjectionCheck] = field(default_factory=list)

    @property
    def fit(self) -> scaling.LadderFit:
        return self.fits[self.unit]

    @property
    def refused(self) -> str:
        """Why the gate's unit has no projection ("" when it has one)."""
        return self.fit.refused

    def as_dict(self) -> dict[str, Any]:
        """gate.json's ``ladder`` record of one variant (non-finite numbers as null)."""
        return _json(
            {
                "variant": self.variant, "unit": self.unit,
                "unit_word": scaling.unit_word(self.unit),
                "min_multiplier": self.min_multiplier, "confidence": self.confidence,
                "decision": self.decision, "reason": self.line, "refused": self.refused,
                "rungs": [_rung_dict(r) for r in self.rungs],
                "targets": [vars(t).copy() for t in self.targets],
                "fits": {u: fit_dict(f) for u, f in self.fits.items()},
                "left_out": self.left_out, "dropped": self.dropped,
                "track": [vars(c).copy() for c in self.checks],
            }
        )  # fmt: skip


def _rung_dict(r: scaling.Rung) -> dict[str, Any]:
    d = dict(vars(r))
    d["loss_b"] = {str(k): v for k, v in r.loss_b.items()}
    d["loss_v"] = {str(k): v for k, v in r.loss_v.items()}
    return d


def interval_dict(iv: scaling.Interval | None) -> dict[str, Any] | None:
    return None if iv is None else dict(vars(iv))


def fit_dict(f: scaling.LadderFit) -> dict[str, Any]:
    """One unit's fit as plain data (gate.json; the board reads its projections)."""
    law = f.law
    return {
        "unit": f.unit,
        "level": f.level,
        "law": None if law is None else {"E": law.E, "A": law.A, "alpha": law.alpha},
        "rungs": [
            {
                "size": r.size,
                "flops_v": r.flops_v,
                "multiplier": interval_dict(r.multiplier),
                "why_undefined": r.why_undefined,
            }
            for r in f.rungs
        ],  # fmt: skip
        "gamma": interval_dict(f.gamma),
        "projections": [
            {"size": p.size, "flops_v": p.flops_v, "multiplier": interval_dict(p.multiplier)}
            for p in f.projections
        ],
        "lack_of_fit": [{**vars(t), "rejects": t.rejects} for t in f.lack_of_fit],
        "trend": None if f.trend is None else vars(f.trend).copy(),
        "sd_delta": f.sd_delta,
        "sd_mean": f.sd_mean,
        "noise_source": f.noise_source,
        "refused": f.refused,
    }


def _json(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Mapping):
        return {str(k): _json(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json(x) for x in v]
    return v


def decide_ladder(
    variant: str,
    rungs: Sequence[scaling.Rung],
    targets: Sequence[scaling.Target],
    *,
    unit: str,
    min_multiplier: float,
    confidence: float,
    declared: scaling.DeclaredNoise | None = None,
) -> LadderResult:
    """Fit one variant's ladder in the gate's ``unit`` (decided) and the other units (shown),
    at the two-sided level 2 * confidence - 1, so each bound is a one-sided ``confidence`` bound
    (the gate's own convention), and decide it. Pure: numbers in, a result out."""
    if unit not in scaling.UNITS:
        raise ValueError(f"unit {unit!r}: allowed values are {', '.join(scaling.UNITS)}")
    level = 2.0 * confidence - 1.0
    fits = {
        u: scaling.fit_ladder(rungs, targets, unit=u, level=level, declared=declared)
        for u in (unit, *(x for x in scaling.UNITS if x != unit))
    }
    outcome, line = scaling.decide(fits[unit], min_multiplier)
    decision, check = _VERDICT[outcome]
    return LadderResult(
        variant, unit, float(min_multiplier), float(confidence), list(rungs), list(targets), fits,
        decision, line, check,
    )  # fmt: skip


def declared_noise(gate: Any) -> scaling.DeclaredNoise | None:
    """``gate.noise.floor`` as the estimator's declared noise (sd, pairs - 1 or inf)."""
    sd = gate.noise.floor_sd
    return None if sd is None else scaling.DeclaredNoise(float(sd), float(gate.noise.floor_dof))


def check_projections(
    res: LadderResult, pairs: Sequence[PairResult], metric: str, last_n: int
) -> None:
    """The track record at the targets: where complete valid pairs exist at a target size, the
    realized multiplier from the fitted law against the projection's interval (FLOPs)."""
    fit = res.fits.get("flops")
    if fit is None or fit.law is None:
        return
    proj = {p.size: p.multiplier for p in fit.projections}
    for t in res.targets:
        mine = [
            p for p in pairs
            if p.size == t.size and p.variant_name == res.variant and p.valid and p.complete
        ]  # fmt: skip
        vals = [
            (vb, vv) for p in mine
            if (vb := run_value(p, "baseline", metric, last_n)) is not None
            and (vv := run_value(p, "variant", metric, last_n)) is not None
        ]  # fmt: skip
        if not vals:
            continue
        b, v = mine[0].baseline.entry, mine[0].variant.entry
        iv = proj.get(t.size)
        res.checks.append(
            projection_check(
                t.size, fit.law, [x[0] for x in vals], [x[1] for x in vals],
                float(b.total_train_flops), float(v.total_train_flops),
                None if iv is None else (iv.estimate, iv.lower, iv.upper),
            )
        )  # fmt: skip


def ladder_verdict(
    res: LadderResult, reading: RungReading, gate: Any, blockers: Sequence[str] = ()
) -> VariantVerdict:
    """The ladder as a :class:`VariantVerdict`: an unstable variant arm stops it, an unstable
    baseline, unfinished runs or a metric where higher is better block it, else the estimator's
    decision. The step-time and memory limits are not applied: in FLOPs the multiplier already
    charges the variant its extra compute."""
    preamble = [
        f"pair {pid} INVALID, excluded: {'; '.join(r)}" for pid, r in reading.invalid.items()
    ]
    stops: list[str] = []
    blockers = list(blockers)
    for p in reading.used:
        st = p.stability
        if "variant" in st:
            stops.extend(
                f"pair {p.pair_id}: {r}"
                for r in stability_stops(st["variant"].health, gate, "variant")
            )
        base = stability_stops(st["baseline"].health, gate, "baseline") if "baseline" in st else []
        if base:
            blockers.append(
                f"pair {p.pair_id}: baseline unstable ({'; '.join(base)}); comparison unreliable"
            )
    if gate.direction != "lower":
        blockers.append(
            f"rule multiplier needs a metric where lower is better (a loss); {gate.metric} is "
            f"{gate.direction}-is-better"
        )
    if reading.unfinished:
        blockers.append(
            f"{len(reading.unfinished)} pair(s) of the ladder not finished; the verdict waits for "
            f"the pre-registered design (the fit shown is interim): {'; '.join(reading.unfinished)}"
        )
    check = QualityCheck(f"multiplier ({res.unit})", res.outcome, res.line, None)
    notes = [*reading.left_out, *reading.dropped, *(c.line for c in res.checks)]
    limits = [f"{k} {getattr(gate, k):g}" for k in _COST_LIMITS if getattr(gate, k, None)]
    if limits:
        notes.append(
            f"not applied to a multiplier gate: {', '.join(limits)} (the multiplier in FLOPs "
            "charges the variant its extra compute; step times are in the pairs' cost rows)"
        )
    src = res.fit.noise_source
    noise = f"noise source: {src}" if src else ""
    return VariantVerdict(
        res.variant, combine(stops, blockers, [check]), [*preamble, *stops, *blockers, res.line],
        [check], [p.pair_id for p in reading.used], list(reading.invalid), noise=noise,
        notes=notes, preamble=preamble, stops=stops, blockers=blockers,
    )  # fmt: skip


def resolve_chances(res: LadderResult, declared: scaling.DeclaredNoise | None = None) -> list[str]:
    """What would resolve an undecided (not refused) ladder, as chances
    (``scaling.chance_to_resolve``: the runs made are kept, the new ones drawn from the fit taken
    as the truth, refitted and decided as the gate does): one more seed pair at every rung, or
    one more rung at 4x the largest rung's compute. Plug-in: a chance, not a promise."""
    if res.decision != INCONCLUSIVE or res.refused:
        return []
    chances = scaling.chance_to_resolve(
        res.fit, res.rungs, res.targets, res.min_multiplier, declared=declared
    )
    seeds = max((len(r.loss_v) for r in res.rungs), default=0)
    what = {
        "one more seed": f"one more seed pair at every rung (+{len(res.rungs)} pairs)",
        "one more rung": f"one more rung at 4x the largest rung's compute ({seeds} seed pair(s))",
    }
    return [
        f"{what.get(k, k)}: the gate resolves in {p:.0%} of simulated futures (the runs made "
        "kept, the new ones drawn from the fit taken as the truth: a chance, not a promise)"
        for k, p in chances.items()
    ]


@dataclass
class LadderOutcome:
    """A multiplier gate decided: the headline verdict, its reasons, each variant's verdict
    and ladder."""

    verdict: str
    reasons: list[str]
    verdicts: list[VariantVerdict]
    ladders: dict[str, LadderResult]
    #: an undecided ladder: what would resolve it (:func:`resolve_chances`)
    next_steps: list[str] = field(default_factory=list)


def evaluate_ladder_gate(
    gate: Any, entry: Any, pairs: Sequence[PairResult], variants: Sequence[str]
) -> LadderOutcome:
    """Decide a ``rule: multiplier`` gate over ``pairs`` (measured, under this gate): one ladder
    per gated variant (``gate.variant``, else each variant at the rungs: shown, with the headline
    inconclusive unless there is exactly one, as no multiplicity correction is made for ladders)."""
    ladder = getattr(entry, "ladder", None)
    missing = (
        ["plan.json records no ladder (rungs, targets) for this gate: re-run `olmoablate plan`"]
        if ladder is None
        else []
    )
    sizes = list(getattr(ladder, "rungs", None) or gate.rungs)
    targets = targets_of(ladder)
    verdicts: list[VariantVerdict] = []
    ladders: dict[str, LadderResult] = {}
    for v in variants:
        reading = read_rungs(pairs, v, sizes, gate.metric, gate.last_n)
        res = decide_ladder(
            v, reading.rungs, targets, unit=gate.unit, min_multiplier=gate.min_multiplier,
            confidence=gate.confidence, declared=declared_noise(gate),
        )  # fmt: skip
        res.left_out, res.dropped = list(reading.left_out), list(reading.dropped)
        check_projections(res, pairs, gate.metric, gate.last_n)
        ladders[v] = res
        verdicts.append(ladder_verdict(res, reading, gate, missing))
    if not verdicts:
        return LadderOutcome(
            INCONCLUSIVE, [f"no variant with pairs at the rungs {', '.join(sizes)}"], [], {}
        )
    if len(verdicts) > 1:
        why = "several variants and no gate.variant: each ladder is shown, none is promoted"
        return LadderOutcome(
            INCONCLUSIVE,
            [why, *(f"[{v.variant}] {r}" for v in verdicts for r in v.reasons)],
            verdicts,
            ladders,
        )
    v = verdicts[0]
    steps = [] if v.blockers else resolve_chances(ladders[v.variant], declared=declared_noise(gate))
    return LadderOutcome(
        v.verdict, [f"[{v.variant}] {r}" for r in v.reasons], verdicts, ladders, steps
    )
