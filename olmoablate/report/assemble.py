"""Assemble the report: compare every pair, run the gate at the stage size, plan the next sizes.

Why separate from rendering: ``build`` returns plain data (also what ``gate.json`` holds), so the
verdict logic is testable without matplotlib, and the renderers only format what is here.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olmoablate.io import write_json_atomic
from olmoablate.plan.names import INCONCLUSIVE, NEXT_PLAN_FILE, PROCEED
from olmoablate.plan.planfile import Plan
from olmoablate.report.collect import UNGATED, Results
from olmoablate.report.compare import PairResult, for_gate, measure_all
from olmoablate.report.depth import ArmProfile, arm_profiles, depth_records
from olmoablate.report.evidence import (
    SizeRow,
    consistency,
    evidence_for,
    noise_source,
    pair_timing,
    way_out,
)
from olmoablate.report.factorial import COMPLEMENTARY, FactorialResult, evaluate_factorial_gate
from olmoablate.report.ladder import MULTIPLIER, LadderResult, evaluate_ladder_gate
from olmoablate.report.noise import (
    AA,
    FLOOR,
    FloorUncertainty,
    NoiseSource,
    floor_key,
    floor_uncertainty,
)
from olmoablate.report.pairing import coverage_lines
from olmoablate.report.prereg import check_gate_unchanged, resolve_gate
from olmoablate.report.sequential import FUTILITY, GateOutcome, SequentialResult, evaluate_gate
from olmoablate.report.verdict import PairEvidence, VariantVerdict


@dataclass
class Report:
    results: Results
    pairs: list[PairResult]
    stage: str
    verdict: str
    reasons: list[str]
    variant_verdicts: list[VariantVerdict]
    evidence: dict[str, list[PairEvidence]]
    primary: str | None
    size_rows: list[SizeRow]
    consistent: dict[str, bool | None]
    sizes: list[str]
    next_steps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: eval coverage / unigram-entropy lines (`olmoablate.report.pairing`)
    eval_lines: list[str] = field(default_factory=list)
    family_note: str = ""
    noise_notes: list[str] = field(default_factory=list)
    noise: NoiseSource | None = None  # the one-seed noise source (floor or A/A), if declared
    #: what that source, measured from a few pairs, can be off by; the other gates sharing it
    floor: FloorUncertainty | None = None
    floor_shared_with: list[str] = field(default_factory=list)
    #: this gate's name (``gates:`` key, or the variant of a ``gate:`` spec)
    gate_name: str = "gate"
    #: every gate's report, this one first, when the spec declares several (`report.gates`)
    gates: list[Report] = field(default_factory=list)
    #: per gated variant: the sequential design's looks, decision and GPU-hours saved
    sequential: dict[str, SequentialResult] = field(default_factory=dict)
    #: a ``rule: multiplier`` gate: per gated variant, its ladder (rungs, fits, decision)
    ladders: dict[str, LadderResult] = field(default_factory=dict)
    #: a ``rule: complementary`` gate: the factorial estimate and its verdict
    factorial: FactorialResult | None = None
    #: the effective-depth diagnostic per arm (`report.depth`; set by `build_all`, not a gate
    #: input): one profile per size, eval set and arm
    depth: list[ArmProfile] = field(default_factory=list)
    #: a gate changed by ``plan --replan`` after a look: what changed ("" when it was not)
    unplanned: str = ""
    #: the verdict as said (``inconclusive (unplanned)``); "" means ``verdict``
    label: str = ""

    @property
    def verdict_label(self) -> str:
        return self.label or self.verdict

    @property
    def invalid_pairs(self) -> list[PairResult]:
        return [p for p in self.pairs if not p.valid]

    def gate_json(self) -> dict[str, Any]:
        """gate.json: this gate's verdict; with several gates also ``gates`` (one entry per
        gate, each the full record of that gate) and ``verdicts`` (name -> verdict)."""
        out = self._gate_record()
        if len(self.gates) > 1:
            out["gates"] = [r._gate_record() for r in self.gates]
            out["verdicts"] = {r.gate_name: r.verdict for r in self.gates}
        return out

    def _gate_record(self) -> dict[str, Any]:
        rec = self._fixed_record()
        if self.sequential:  # only with a design: older gates' records stay byte-identical
            rec["sequential"] = {v: r.as_dict() for v, r in self.sequential.items()}
            # the campaign board's field (olmoablate.report.board): stopped, and what it saved
            rec["futility"] = {
                "stopped": any(r.decision == FUTILITY for r in self.sequential.values()),
                "gpu_hours_saved": sum(r.gpu_hours_saved for r in self.sequential.values()),
            }
        if self.ladders:  # only for a multiplier gate, likewise
            rec["ladder"] = {v: r.as_dict() for v, r in self.ladders.items()}
        if self.floor is not None:  # only for a gate decided by a measured one-seed floor
            rec["floor_uncertainty"] = self.floor.as_dict()
            rec["floor_shared_with"] = self.floor_shared_with
        if self.factorial is not None:  # only for a complementary gate, likewise
            rec["factorial"] = self.factorial.as_dict()
        if self.unplanned:  # only for a gate changed after a look, likewise
            rec["unplanned"] = {"verdict": self.verdict_label, "reason": self.unplanned}
        return rec

    def _fixed_record(self) -> dict[str, Any]:
        g = self.results.gate
        return {
            "name": self.gate_name,
            "variant": g.variant,
            "spec": self.results.spec_name,
            "stage": self.stage,
            "rule": g.rule,
            "metric": g.metric,
            "direction": g.direction,
            "verdict": self.verdict,
            "primary_variant": self.primary,
            "reasons": self.reasons,
            "family": self.family_note,
            "noise_notes": self.noise_notes,
            "noise_source": self.noise.as_dict() if self.noise else None,
            "preregistration_broken": self.results.prereg_broken,
            "warnings": self.results.warnings,
            "variants": [v.as_dict() for v in self.variant_verdicts],
            "pairs": [
                {"pair_id": e.pair_id, "seed": e.seed, "valid": e.valid,
                 "invalid_reasons": e.invalid_reasons, "complete": e.complete,
                 "improvement_last_n": e.improvement,
                 "reference_improvement_last_n": e.reference_improvement,
                 "variant_spikes": e.variant.spikes, "overhead": e.overhead}
                for ev in self.evidence.values() for e in ev
            ],  # fmt: skip
            "invalid_pairs": [
                {"pair_id": p.pair_id, "reasons": p.invalid_reasons} for p in self.invalid_pairs
            ],
            "consistency": {
                "rows": [
                    {"variant": r.variant, "size": r.size,
                     "estimate": r.estimate.as_dict() if r.estimate else None,
                     "outside_noise": r.outside_noise}
                    for r in self.size_rows
                ],  # fmt: skip
                "consistent": self.consistent,
            },
            "next_steps": self.next_steps,
            "notes": self.notes,
            "eval_coverage": self.eval_lines,
            "gate_sha256": self.results.plan.gate_sha256,
        }


def _ordered_unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def build(results: Results, measured: list[PairResult] | None = None) -> Report:
    """Decide the gate at ``gate.stage`` on the pairs' comparisons (``measured``: shared by all
    gates of a spec; measured here without it)."""
    g = results.gate
    stage = g.stage
    reference = g.reference
    sizes = _ordered_unique([r.size for r in results.plan.runs])
    if measured is None:
        measured = measure_all(results)
    allow_partial = bool(getattr(g, "allow_partial_pairs", False))
    pair_results = [for_gate(r, allow_partial) for r in measured]
    at_stage = [r for r in pair_results if r.size == stage]
    variants = _ordered_unique([r.variant_name for r in at_stage])
    non_ref = [v for v in variants if v != reference]
    if g.variant:
        primary: str | None = g.variant
        family = [primary]
        exploratory = [v for v in non_ref if v != primary and v not in results.other_gated]
    else:
        family, exploratory = non_ref, []
        primary = non_ref[0] if len(non_ref) == 1 else None
    evidence: dict[str, list[PairEvidence]] = {}
    # a ladder reads every rung's runs itself (ladder.read_rungs), not the stage's paired deltas
    for v in family + exploratory if g.rule not in (MULTIPLIER, COMPLEMENTARY) else []:
        mine = [r for r in at_stage if r.variant_name == v]
        ev: list[PairEvidence] = []
        for r in mine:
            ref_pair = None
            if g.rule == "quality_per_param":  # the reference's pair of the same baseline run
                same = (x for x in at_stage if x.variant_name == reference and x.seed == r.seed)
                ref_pair = next((x for x in same if x.baseline.run_id == r.baseline.run_id), None)
            e = evidence_for(r, results, ref_pair)
            # arms that ran different executions: their cost is kept out of the gate
            e.timing = None if r.execution_mismatch else pair_timing(r)
            e.execution_mismatch = list(r.execution_mismatch)
            if g.rule == "quality_per_param" and ref_pair is None:
                e.valid = False
                e.invalid_reasons.append(
                    f"no pair of reference variant {reference!r} for seed {r.seed} at {stage}"
                )
            ev.append(e)
        evidence[v] = ev
    noise, noise_notes = noise_source(results, g)
    entry = results.plan.gate_entry()
    legacy = entry is None or entry.seeds is None  # a plan from before the design record
    ladders: dict[str, LadderResult] = {}
    factorial: FactorialResult | None = None
    steps: list[str] = []
    if g.rule == COMPLEMENTARY:
        fac = evaluate_factorial_gate(g, pair_results, stage)
        verdict, reasons, verdicts, factorial = fac.verdict, fac.reasons, fac.verdicts, fac.result
        outcome = GateOutcome(verdict, reasons, verdicts)
    elif g.rule == MULTIPLIER:
        lad = evaluate_ladder_gate(g, entry, pair_results, _ladder_variants(g, pair_results))
        verdict, reasons, verdicts, ladders = lad.verdict, lad.reasons, lad.verdicts, lad.ladders
        outcome, steps = GateOutcome(verdict, reasons, verdicts), lad.next_steps
    else:
        outcome = evaluate_gate(
            g, evidence, family, exploratory, noise, way_out(results, g, family), legacy, entry
        )
        verdict, reasons, verdicts = outcome.verdict, outcome.reasons, outcome.verdicts
    if not at_stage and g.rule != MULTIPLIER:  # a ladder's stage is its rungs
        verdict = INCONCLUSIVE
        reasons = [f"no pairs at the stage size {stage!r} (sizes in the plan: {', '.join(sizes)})"]
    if results.prereg_broken:
        verdict = INCONCLUSIVE
        reasons = [results.prereg_broken, *reasons]
    size_rows, consistent = consistency(
        pair_results, results, sizes, {stage: noise} if noise is not None else None
    )
    notes = _tradeoff_notes(at_stage, family, reference) if g.rule == "quality_per_param" else []
    report = Report(
        results, pair_results, stage, verdict, reasons, verdicts, evidence, primary, size_rows,
        consistent, sizes, notes=notes, eval_lines=coverage_lines(results),
        family_note=outcome.family_note, noise_notes=noise_notes, noise=noise,
        sequential=outcome.sequential, ladders=ladders, next_steps=steps, factorial=factorial,
        unplanned=outcome.unplanned, label=outcome.label if verdict == outcome.verdict else "",
    )  # fmt: skip
    results.save_cache()
    return report


def _ladder_variants(g: Any, pairs: list[PairResult]) -> list[str]:
    """The variants a multiplier gate decides: ``gate.variant``, else every variant with pairs
    (a reference variant is not a proposal)."""
    if g.variant:
        return [g.variant]
    return [v for v in _ordered_unique([p.variant_name for p in pairs]) if v != g.reference]


def _num_txt(a: Any) -> str:
    return f"{a:.3g}" if isinstance(a, int | float) else "n/a"


def _ratio_txt(a: Any, b: Any) -> str:
    try:
        return f"{float(a) / float(b):.2f}x"
    except (TypeError, ValueError, ZeroDivisionError):
        return "n/a"


_NOT_SAVED = "of the baseline (compute is not saved by sharing parameters)"
_TRADEOFFS = (
    ("unique parameters", "unique_params", "of the depth-matched baseline"),
    ("training FLOPs", "total_train_flops", _NOT_SAVED),
)


def _tradeoff_notes(at_stage: list[PairResult], gated: list[str], reference: Any) -> list[str]:
    """quality_per_param: unique parameters and training FLOPs, stated separately, so that a
    parameter saving is never read as a compute saving."""
    notes: list[str] = []
    ref = next((p for p in at_stage if p.variant_name == reference), None)
    for v in gated:
        pair = next((p for p in at_stage if p.variant_name == v), None)
        if pair is None:
            continue
        for label, attr, tail in _TRADEOFFS:
            mine, base = (getattr(a.entry, attr) for a in (pair.variant, pair.baseline))
            of_ref = getattr(ref.variant.entry, attr) if ref is not None else None
            notes.append(
                f"{v}: {label} {_num_txt(mine)} = {_ratio_txt(mine, of_ref)} of reference "
                f"{reference!r}, {_ratio_txt(mine, base)} {tail}"
            )
    return notes


def promoted_plan(
    plan: Any, runs: list[Any], pairs: list[Any], report: Report, keep: set[str], where: str
) -> dict[str, Any]:
    """next_plan.json: the plan restricted to the promoted runs, a real plan that ``submit`` reads
    (checked here), with what promoted them in its ``description``."""
    ids = {r.run_id for r in runs}
    ident = plan.identity
    if ident is not None:
        ident = ident.model_copy(
            update={
                "runs": {k: v for k, v in ident.runs.items() if k in ids},
                "reused": {k: v for k, v in ident.reused.items() if k in ids},
            }
        )
    name = report.gate_name or plan.gate_name
    gate = f"gate {name}" if name else "gate"
    variants = ", ".join(sorted(keep - {"baseline"})) or "none"
    why = f"promoted at {report.stage} by its {gate} ({variants}: {report.verdict})"
    part = plan.model_copy(
        update={
            "runs": runs,
            "pairs": pairs,
            "identity": ident,
            "aa_runs": [r for r in plan.aa_runs if r in ids],
            "description": f"{plan.description} [{why}]" if plan.description else why,
        }
    )
    doc = part.as_json()
    Plan.from_json(doc, where=where)  # what submit reads: never a file it would refuse
    return doc


def write_next_plan(report: Report, out_dir: Path) -> None:
    """On ``proceed``: the plan restricted to the promoted sizes, and the submit commands."""
    if report.verdict != PROCEED:
        return
    results = report.results
    g = results.gate
    promote = list(g.targets if g.rule == MULTIPLIER else g.promote_to)
    if not promote:
        report.next_steps.append("gate.promote_to is empty: no next size to plan")
        return
    keep_arms = {"baseline"}
    keep_arms.update(
        v.variant
        for v in report.variant_verdicts
        if v.verdict == PROCEED and v.role != "exploratory"
    )
    if g.reference:
        keep_arms.add(g.reference)
    plan = results.plan
    runs = [r for r in plan.runs if r.size in promote and r.arm in keep_arms]
    pairs = [p for p in plan.pairs if p.size in promote and p.variant in keep_arms]
    present = _ordered_unique([r.size for r in runs])
    missing = [s for s in promote if s not in present]
    path = out_dir / NEXT_PLAN_FILE
    write_json_atomic(path, promoted_plan(plan, runs, pairs, report, keep_arms, str(path)))
    spec = plan.spec_path or results.spec_name
    for s in present:
        report.next_steps.append(f"olmoablate submit {shlex.quote(spec)} --size {shlex.quote(s)}")
    if missing:
        report.next_steps.append(
            f"sizes {', '.join(missing)} are not in the plan: add them to the spec's `sizes` "
            f"(same gate, same settings), then `olmoablate plan {shlex.quote(spec)}`"
        )


def results_for_gate(results: Results, view: Plan) -> Results:
    """``results`` deciding with the gate of ``view`` (a plan with that gate in ``gate``)."""
    prereg = resolve_gate(view)
    out = dataclasses.replace(
        results,
        plan=view,
        gate=prereg.gate or UNGATED,
        warnings=check_gate_unchanged(view) + prereg.warnings,
    )
    out.prereg_broken = prereg.broken
    return out


def build_all(results: Results) -> Report:
    """The report of the first gate, with ``gates`` holding every gate's report (itself first).
    The pairs are measured once, then each gate is decided by exactly the one-gate code, so two
    gates can never influence each other's verdict."""
    views = results.plan.gate_views()
    measured = measure_all(results)
    depth = arm_profiles(depth_records(results))
    if len(views) <= 1:
        report = build(results, measured)
        report.gate_name = views[0][0] if views else "gate"
        report.gates = [report]
        report.depth = depth
        floor_notes([report])
        return report
    reports = []
    # the variants (and references) of each gate: decided there, so not exploratory elsewhere
    gated = [
        [x for x in (v.gate.variant, v.gate.reference, *(v.gate.of or []), v.gate.combined) if x]
        if v.gate
        else []
        for _, v in views
    ]
    for i, (name, view) in enumerate(views):
        res = results if i == 0 else results_for_gate(results, view)
        res.other_gated = [x for j, g in enumerate(gated) if j != i for x in g]
        r = build(res, measured)
        r.gate_name = name
        reports.append(r)
    reports[0].gates = reports
    reports[0].depth = depth
    floor_notes(reports)
    return reports[0]


def floor_notes(reports: list[Report]) -> None:
    """Each gate's measured noise source with its own uncertainty (a note; from fewer than
    MIN_FLOOR_PAIRS pairs also a warning of the report), and the gates that share one source
    named on each. Why: one floor serves every gate that declares it, so when it came out small
    they all over-proceed together -- the 5% holds only on average over floor measurements."""
    groups: dict[tuple[Any, ...], list[Report]] = {}
    for r in reports:
        used = {
            c.estimate.source for v in r.variant_verdicts for c in v.checks[:1] if c.estimate
        }
        if used and not used & {FLOOR, AA}:
            continue  # paired seeds decided: the declared source plays no part
        if r.noise is not None and r.noise.kind in (FLOOR, AA):
            groups.setdefault(floor_key(r.noise), []).append(r)
    warnings = reports[0].results.warnings
    for members in groups.values():
        names = [r.gate_name for r in members]
        for r in members:
            assert r.noise is not None
            r.floor = floor_uncertainty(r.noise, 1.0 - r.results.gate.confidence)
            if r.floor is not None:
                r.noise_notes.append(r.floor.line)
                tag = f"gate {r.gate_name}: " if len(reports) > 1 else ""
                if r.floor.warning and tag + r.floor.warning not in warnings:
                    warnings.append(tag + r.floor.warning)
            if len(members) > 1:
                r.floor_shared_with = [n for n in names if n != r.gate_name]
        if len(members) > 1 and members[0].floor is not None:
            shared = (
                f"noise floor shared by gates {', '.join(names)} (the same "
                f"{members[0].noise.kind}, sd_d {members[0].noise.sd:.4g}): their errors are "
                "not independent -- if this one measurement came out small, every one of them "
                "over-proceeds at once"
            )
            warnings.append(shared)
            for r in members:
                r.noise_notes.append(shared)


def write_next_plans(report: Report, out_dir: Path) -> None:
    """next_plan.json per proceeding gate: ``out_dir`` for one gate, ``out_dir/gates/<name>/``
    for several (each promotes only its own proposal)."""
    if len(report.gates) <= 1:
        write_next_plan(report, out_dir)
        return
    steps: list[str] = []
    for r in report.gates:
        write_next_plan(r, out_dir / "gates" / r.gate_name)
        steps.extend(f"[{r.gate_name}] {s}" for s in r.next_steps)
    report.next_steps = steps
