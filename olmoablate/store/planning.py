"""What `plan` adds for the store: the plan's identities, the runs it reuses, and how to say so.

Why apart from spec/expand.py: expanding a spec is pure (validate runs it in CI, with no data);
identifying the runs reads the data files (fingerprints) and the other specs of the store.
"""

from __future__ import annotations

from pathlib import Path

from olmoablate.contract.identity import short
from olmoablate.contract.layout import ResultsDir
from olmoablate.contract.plan import Plan
from olmoablate.store.identify import identify
from olmoablate.store.index import find_reuse, with_reuse


def attach_identity(plan: Plan, store: str | Path, workdir: str | Path | None = None) -> Plan:
    """``plan`` with its ``identity`` section: every run's identity, and the runs of other specs
    under ``store`` (completed, running or queued) it reuses instead of training its own."""
    ident = identify(plan, workdir if workdir is not None else plan.workdir)
    reuse = find_reuse(store, plan.spec_name, ident)
    own = ResultsDir.for_spec(plan.spec_name, store)
    # a run this spec already trains (or trained) itself stays its own when it is re-planned
    reuse = {rid: r for rid, r in reuse.items() if not own.own_run(rid).status.exists()}
    return plan.model_copy(update={"identity": with_reuse(ident, reuse)})


def gpu_hours(plan: Plan) -> tuple[float, float]:
    """(GPU-hours to train, GPU-hours saved by reused runs) of the plan's runs."""
    reused = plan.identity.reused if plan.identity is not None else {}
    spent = sum(r.gpu_hours for r in plan.runs if r.run_id not in reused)
    saved = sum(r.gpu_hours for r in plan.runs if r.run_id in reused)
    return spent, saved


def reuse_lines(plan: Plan, store: str | Path) -> list[str]:
    """One line per reused run and the GPU-hours total, as `plan` prints them."""
    if plan.identity is None:
        return []
    lines = [
        f"{rid}: reused from {Path(store) / where} (0 GPU-hours; identity "
        f"{short(plan.identity.runs[rid])})"
        for rid, where in plan.identity.reused.items()
    ]
    spent, saved = gpu_hours(plan)
    lines.append(
        f"GPU-hours: {spent:.4g} to train"
        + (
            f", {saved:.4g} saved by {len(plan.identity.reused)} reused run(s)"
            if plan.identity.reused
            else ""
        )
    )
    return lines
