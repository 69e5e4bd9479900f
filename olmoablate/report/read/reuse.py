"""The report's checks of run identities: reused runs are what the plan says, pairs pair.

Why the report checks again: a run reused from another spec is read from that spec's folder
(`olmoablate.contract.layout.ResultsDir.run`); the report takes its numbers as its own only if
that run's recorded identity equals the identity this plan expects (a re-planned or edited other
spec fails here, loudly, instead of lending a different run). And a pair is valid only if its
arms' identities are equal except the architecture (`olmoablate.contract.identity.pair_key`),
recomputed from plan.json, so a hand-edited arm is caught in identity terms as well as by the
pairing certificate. Plans from before identities get neither check (the certificate still runs).
"""

from __future__ import annotations

from olmoablate.contract import identity as ident
from olmoablate.contract.layout import ResultsDir
from olmoablate.contract.plan import Pair, Plan
from olmoablate.errors import UserError
from olmoablate.store.owner import recorded_identity


def reuse_problems(layout: ResultsDir, plan: Plan) -> dict[str, list[str]]:
    """run_id -> why its reused run cannot be taken as this plan's run (reused runs only)."""
    out: dict[str, list[str]] = {}
    if plan.identity is None:
        return out
    owners: dict[str, Plan | str] = {}
    for run in plan.runs:
        rid = run.run_id
        where = layout.run(rid).reused_from
        if where is None:
            continue
        mine = plan.identity.runs.get(rid)
        spec, _, owner_rid = where.partition("/runs/")
        if spec not in owners:
            try:
                owners[spec] = Plan.load(layout.store / spec)
            except UserError as err:
                owners[spec] = str(err)
        owner = owners[spec]
        if isinstance(owner, str):
            out[rid] = [f"reused run {where}: its plan cannot be read ({owner})"]
            continue
        theirs = owner.identity.runs.get(owner_rid) if owner.identity is not None else None
        recorded = recorded_identity(layout.store / where)
        problems = []
        if theirs != mine:
            problems.append(
                f"reused run {where} has identity {ident.short(str(theirs))} in its plan, this "
                f"plan expects {ident.short(str(mine))} (`olmoablate explain` shows why)"
            )
        if recorded is not None and recorded != mine:
            problems.append(
                f"reused run {where} trained identity {ident.short(recorded)} (identity.json), "
                f"this plan expects {ident.short(str(mine))}"
            )
        if problems:
            out[rid] = problems
    return out


def pair_identity_problems(plan: Plan, pair: Pair, budget_match: str) -> list[str]:
    """Why the pair's arms are not "equal identities except the architecture" (empty: they are)."""
    if plan.identity is None:
        return []
    base, var = plan.runs_by_id.get(pair.baseline_run), plan.runs_by_id.get(pair.variant_run)
    if base is None or var is None:
        return []
    pb, pv = plan.identity.payload_of(base.as_json()), plan.identity.payload_of(var.as_json())
    depth = base.architecture.layers is not None or var.architecture.layers is not None
    if ident.pair_key(pb, budget_match, depth) == ident.pair_key(pv, budget_match, depth):
        return []
    skip = set(ident.ARCH_KEYS)
    fields = [f for f, _, _ in ident.diff(pb, pv) if f.split(".")[0].split("[")[0] not in skip]
    return [f"identities differ beyond the architecture: {', '.join(fields[:8])}"]
