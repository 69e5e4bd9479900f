"""One verdict per proposal: measure every pair once, then decide each pre-registered gate.

Why per gate with the single-gate code: each gate (``gates:`` in the spec) has its own rule,
variant, reference, metric and hash; deciding each with exactly the code a one-gate spec uses
(pre-registration check, noise source, statistics) means two gates can never influence each
other's verdict, and a spec with ``gate:`` is the one-gate case of the same path. The pairs'
comparisons (alignment at matched tokens, stability, cost) do not depend on the gate: they are
computed once (:func:`~olmoablate.report.compare.pair.measure_all`) and handed to every gate.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from olmoablate.contract.plan import Plan
from olmoablate.report.build import Report, build, write_next_plan
from olmoablate.report.compare.pair import measure_all
from olmoablate.report.read.collect import UNGATED, Results
from olmoablate.report.read.prereg import check_gate_unchanged, resolve_gate


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
    """The report of the first gate, with ``gates`` holding every gate's report (itself first)."""
    views = results.plan.gate_views()
    measured = measure_all(results)
    if len(views) <= 1:
        report = build(results, measured)
        report.gate_name = views[0][0] if views else "gate"
        report.gates = [report]
        return report
    reports = []
    # the variants (and references) of each gate: decided there, so not exploratory elsewhere
    gated = [
        [x for x in (v.gate.variant, v.gate.reference) if x] if v.gate else [] for _, v in views
    ]
    for i, (name, view) in enumerate(views):
        res = results if i == 0 else results_for_gate(results, view)
        res.other_gated = [x for j, g in enumerate(gated) if j != i for x in g]
        r = build(res, measured)
        r.gate_name = name
        reports.append(r)
    reports[0].gates = reports
    return reports[0]


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
