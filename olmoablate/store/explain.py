"""Why two runs are not the same run: the field-by-field difference of their identities.

The question users of content-addressed pipelines ask most ("why is this baseline not reused?",
"what exactly differs between these arms?") is answered from the identity *payloads*, not the
hashes: the payload of each run is rebuilt from its plan's entry and the plan's recorded data
fingerprints and versions (:class:`olmoablate.contract.identity.PlanIdentity`), and compared
leaf by leaf. Fields the identity leaves out (:data:`olmoablate.contract.identity.EXCLUDED`)
never show up: they do not make two runs different.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from olmoablate.contract import identity as ident
from olmoablate.contract.plan import Plan, RunEntry
from olmoablate.errors import UserError


@dataclasses.dataclass(frozen=True)
class RunRef:
    """One side of a comparison: a run of a plan (``label`` says where it came from)."""

    label: str
    plan: Plan
    run: RunEntry

    @property
    def identity(self) -> ident.PlanIdentity:
        if self.plan.identity is None:
            raise UserError(f"{self.label}: the plan has no run identities (re-plan it)")
        return self.plan.identity

    def payload(self) -> dict[str, Any]:
        return self.identity.payload_of(self.run.as_json())

    def hash(self) -> str:
        return ident.identity_of(self.payload())


@dataclasses.dataclass(frozen=True)
class Comparison:
    a: RunRef
    b: RunRef
    differences: list[tuple[str, Any, Any]]

    @property
    def same(self) -> bool:
        return not self.differences

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": {"from": self.a.label, "run_id": self.a.run.run_id, "identity": self.a.hash()},
            "b": {"from": self.b.label, "run_id": self.b.run.run_id, "identity": self.b.hash()},
            "same_identity": self.same,
            "differences": [{"field": f, "a": x, "b": y} for f, x, y in self.differences],
        }

    def lines(self) -> list[str]:
        head = (
            f"{self.a.label}:{self.a.run.run_id} ({ident.short(self.a.hash())}) vs "
            f"{self.b.label}:{self.b.run.run_id} ({ident.short(self.b.hash())}): "
        )
        if self.same:
            return [head + "same identity (one run; a spec planning either reuses the other)"]
        out = [head + f"{len(self.differences)} field(s) differ"]
        out.extend(f"  {f}: {_txt(x)} -> {_txt(y)}" for f, x, y in self.differences)
        return out


def _txt(v: Any) -> str:
    s = repr(v) if not isinstance(v, str) else v
    return s if len(s) <= 120 else s[:117] + "..."


def compare(a: RunRef, b: RunRef) -> Comparison:
    return Comparison(a, b, ident.diff(a.payload(), b.payload()))


def compare_plans(a: tuple[str, Plan], b: tuple[str, Plan]) -> list[Comparison]:
    """Run by run: runs with the same run id; a run id of only one side is compared with the
    run of the other side of the same size, seed and architecture, if there is one."""
    (la, pa), (lb, pb) = a, b
    out: list[Comparison] = []
    for run in pa.runs:
        other = pb.runs_by_id.get(run.run_id)
        if other is None:
            other = next(
                (
                    r
                    for r in pb.runs
                    if (r.size, r.seed, r.architecture) == (run.size, run.seed, run.architecture)
                ),
                None,
            )
        if other is not None:
            out.append(compare(RunRef(la, pa, run), RunRef(lb, pb, other)))
    if not out:
        raise UserError(f"{la} and {lb} have no runs of the same id, size, seed and architecture")
    return out
