"""Each planned run's identity: its payload's hash, with the data fingerprinted at plan time.

Why at plan time: the identity is what `plan` compares across specs to reuse a run, and what the
job and the report compare later; it must be recorded once, in plan.json, from the files as they
are when the plan is made (a file replaced later is caught by the fingerprints of the data each
step trained on, which the report compares across the arms of every pair).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from olmoablate.contract import identity as ident
from olmoablate.contract.plan import Plan
from olmoablate.errors import UserError
from olmoablate.store.fingerprint import name_of


def data_paths(run: dict[str, Any]) -> list[str]:
    """Every data path of one run entry (token files, then eval files), as written."""
    out = list(run["training"]["data"].get("paths") or [])
    for files in (run.get("evaluation", {}).get("lm_sets") or {}).values():
        out.extend(files)
    return out


def identify(
    plan: Plan, workdir: str | Path, versions: dict[str, str | None] | None = None
) -> ident.PlanIdentity:
    """The plan's ``identity`` section (no reuse yet: :func:`olmoablate.store.index.find_reuse`).

    Also checks the pairing rule in identity terms: both arms of every pair have the same
    :func:`~olmoablate.contract.identity.pair_key` (a one-line error naming the pair otherwise).
    """
    versions = dict(versions if versions is not None else ident.installed_versions())
    entries = [r.as_json() for r in plan.runs]
    data: dict[str, str | None] = {}
    for run in entries:
        for p in data_paths(run):
            if p not in data:
                data[p] = name_of(p, workdir)
    fps = {p: f for p, f in data.items() if f is not None}
    payloads = {r["run_id"]: ident.payload(r, fps, versions) for r in entries}
    for pair in plan.pairs:
        base, var = plan.run(pair.baseline_run), plan.run(pair.variant_run)
        depth = base.architecture.layers is not None or var.architecture.layers is not None
        keys = [
            ident.pair_key(payloads[r], pair.budget_match, depth)
            for r in (pair.baseline_run, pair.variant_run)
        ]
        if keys[0] != keys[1]:
            diff = ident.diff(payloads[pair.baseline_run], payloads[pair.variant_run])
            allowed = set(ident.ARCH_KEYS)
            where = [d[0] for d in diff if d[0].split(".")[0].split("[")[0] not in allowed]
            raise UserError(
                f"pair {pair.pair_id}: arms' identities differ beyond the architecture: "
                f"{', '.join(where[:8])}"
            )
    return ident.PlanIdentity(
        identity_schema=ident.IDENTITY_SCHEMA,
        versions=versions,
        data=data,
        runs={rid: ident.identity_of(p) for rid, p in payloads.items()},
    )
