"""Find, across the specs of a store, a run with the same identity as one of a new plan's.

Why only runs that exist (completed, running, queued): a run another spec merely planned may
never be trained; reusing it would leave this spec waiting on nothing. Two specs planned before
either is submitted each plan their own run; their `submit`s then share it through the store's
lease (:mod:`olmoablate.launch.lease`). A run that is itself reused points at its owner, which is
what is recorded (never a chain). A run whose identity.json names another identity than its
plan now does (the spec was re-planned, or its data rewritten in place) is not that identity's
run (:mod:`.owner`). Reads only plan.json, status.json and identity.json files under the store.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from olmoablate.contract.identity import PlanIdentity
from olmoablate.contract.layout import PLAN_FILE, ResultsDir, RunDir
from olmoablate.contract.plan import Plan
from olmoablate.contract.runstates import REUSABLE_STATES, RunState
from olmoablate.errors import UserError
from olmoablate.store.owner import recorded_identity

#: Own states (status.json) of a run another spec may reuse: it exists and is not abandoned.


@dataclasses.dataclass(frozen=True)
class StoredRun:
    """A run of the store that trains (or trained) in its own spec's folder."""

    spec: str
    run_id: str
    identity: str
    state: str | None

    @property
    def where(self) -> str:
        """``<spec>/runs/<run_id>``, relative to the store (what plan.json records)."""
        return f"{self.spec}/runs/{self.run_id}"


def spec_dirs(store: str | Path) -> list[ResultsDir]:
    """Every results folder (holding a plan.json) directly under the store, by name."""
    root = Path(store)
    if not root.is_dir():
        return []
    return [ResultsDir(p) for p in sorted(root.iterdir()) if (p / PLAN_FILE).is_file()]


def stored_runs(store: str | Path, skip: str | None = None) -> dict[str, list[StoredRun]]:
    """identity -> the runs trained under the store with it (other specs' plans that do not load
    or have no identities are skipped: they cannot be shared)."""
    out: dict[str, list[StoredRun]] = {}
    for rd in spec_dirs(store):
        if rd.root.name == skip:
            continue
        try:
            plan = Plan.load(rd.plan_path)
        except UserError:
            continue
        if plan.identity is None:
            continue
        for rid, h in plan.identity.runs.items():
            if rid in plan.identity.reused:
                continue
            own = RunDir(rd.runs_dir / rid, rid)
            if own.reused.exists():
                continue  # submit found it trained by another spec: that one is the run
            recorded = recorded_identity(own.path)
            if recorded is not None and recorded != h:
                continue  # trained as another identity (re-planned, or its data rewritten)
            try:
                status = own.read_status()
            except UserError:
                status = None  # another spec's broken file: not a run to reuse
            state = status.state if status else None
            out.setdefault(h, []).append(StoredRun(rd.root.name, rid, h, state))
    return out


def find_reuse(store: str | Path, spec_name: str, identity: PlanIdentity) -> dict[str, StoredRun]:
    """run_id of the new plan -> the run of another spec it reuses (completed ones first)."""
    found = stored_runs(store, skip=spec_name)
    out: dict[str, StoredRun] = {}
    for rid, h in identity.runs.items():
        usable = [r for r in found.get(h, []) if r.state in REUSABLE_STATES]
        if usable:
            usable.sort(key=lambda r: (r.state != RunState.COMPLETED, r.spec, r.run_id))
            out[rid] = usable[0]
    return out


def with_reuse(identity: PlanIdentity, reuse: dict[str, StoredRun]) -> PlanIdentity:
    return identity.model_copy(update={"reused": {rid: r.where for rid, r in reuse.items()}})
