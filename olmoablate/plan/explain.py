"""Why two runs are not the same run ("why is this baseline not reused?"): their identity
*payloads*, rebuilt from each plan's entry, data fingerprints and versions, compared leaf by leaf.
Fields the identity leaves out (:data:`olmoablate.plan.identity.EXCLUDED`) never show up.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from olmoablate.errors import UserError
from olmoablate.plan import identity as ident
from olmoablate.plan.layout import RootOpt
from olmoablate.plan.names import RESULTS_ROOT
from olmoablate.plan.planfile import Plan, RunEntry


@dataclasses.dataclass(frozen=True)
class RunRef:
    """One side of a comparison (``label``: where it came from)."""

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
    """Run by run: by run id, else the other side's run of the same size, seed and architecture."""
    (la, pa), (lb, pb) = a, b
    out: list[Comparison] = []
    for run in pa.runs:
        other = pb.runs_by_id.get(run.run_id)
        if other is None:
            key = (run.size, run.seed, run.architecture)
            other = next((r for r in pb.runs if (r.size, r.seed, r.architecture) == key), None)
        if other is not None:
            out.append(compare(RunRef(la, pa, run), RunRef(lb, pb, other)))
    if not out:
        raise UserError(f"{la} and {lb} have no runs of the same id, size, seed and architecture")
    return out


def ladder_lines(a: tuple[str, Plan], b: tuple[str, Plan]) -> list[str]:
    """Per multiplier gate of either plan: its decision in brief and, rung by rung, whether the
    other plan's baseline there is the same run. Why: the baseline ladder is meant to be trained
    once per recipe and shared by every proposal's ladder (docs/scaling.md); this says where two
    specs' ladders share it and where they do not (the comparisons above say why)."""
    out = []
    for (la, pa), (lb, pb) in ((a, b), (b, a)):
        for e in pa.gates:
            g, lad = e.gate, e.ladder
            if g.rule != "multiplier" or lad is None:
                continue
            shared, apart = [], []
            for size in lad.rungs:
                mine = {r.seed: r for r in pa.runs if r.size == size and r.is_baseline}
                theirs = {r.seed: r for r in pb.runs if r.size == size and r.is_baseline}
                same = [
                    s for s, r in mine.items() if s in theirs
                    and RunRef(la, pa, r).hash() == RunRef(lb, pb, theirs[s]).hash()
                ]  # fmt: skip
                (shared if same and len(same) == len(mine) else apart).append(size)
            out.append(
                f"{la}: gate {e.name!r} (multiplier >= {g.min_multiplier:g} in {g.unit} at "
                f"{', '.join(t.size for t in lad.targets)}; rungs {', '.join(lad.rungs)}): "
                + (f"baseline rungs shared with {lb} (same identity: trained once): {', '.join(shared)}"
                   if shared else f"no baseline rung shared with {lb}")
                + (f"; not shared: {', '.join(apart)}" if shared and apart else "")
            )  # fmt: skip
    return out


if TYPE_CHECKING:  # pydantic models and the store load when the command runs (fast --help)
    from olmoablate.plan.planfile import Plan


def _fresh(spec: Path) -> Plan:
    from olmoablate.plan.expand import build_plan
    from olmoablate.plan.load import load_spec
    from olmoablate.plan.store import identify

    plan = build_plan(load_spec(spec), spec_path=str(spec))
    return plan.model_copy(update={"identity": identify(plan, Path.cwd())})


def _recorded(arg: str, results_root: Path) -> Plan:
    from olmoablate.plan.layout import resolve_results
    from olmoablate.plan.planfile import Plan

    path = Path(arg)
    if path.is_file() and path.suffix == ".json":
        # that file itself: a plan.json kept aside before a re-plan (old.json) used to resolve
        # to its spec's current plan.json, so old vs new said "same identity" (issue 35, case 4)
        plan = Plan.load(path)
    else:
        plan = Plan.load(resolve_results(arg, results_root).plan_path)
    if plan.identity is None:
        from olmoablate.plan.store import identify

        # an older plan: identified now, from its workdir's files and this machine's versions
        plan = plan.model_copy(update={"identity": identify(plan, plan.workdir)})
    return plan


def resolve(arg: str, results_root: Path) -> tuple[str, Plan, str | None]:
    p = Path(arg)
    parts = p.parts
    if len(parts) >= 3 and parts[-2] == "runs" and not p.suffix:
        return str(p.parent.parent), _recorded(str(p.parent.parent), results_root), parts[-1]
    if p.is_file() and p.suffix in (".yaml", ".yml"):
        return f"{arg} (spec, now)", _fresh(p), None
    if ":" in arg and not p.exists():
        spec, _, rid = arg.partition(":")
        return spec, _recorded(spec, results_root), rid
    return arg, _recorded(arg, results_root), None


def explain_command(
    a: Annotated[
        str,
        typer.Argument(
            metavar="A",
            help="A run (results/<spec>/runs/<id>, SPEC:RUN_ID), a results folder, plan.json or spec file.",
        ),
    ],
    b: Annotated[
        str, typer.Argument(metavar="B", help="The other side, in any of the same forms.")
    ],
    results_root: RootOpt = RESULTS_ROOT,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Field-by-field difference of run identities: why a run is not reused, what differs.

    Exit 0 when every compared pair of runs has the same identity, 1 when some differ."""
    la, pa, ra = resolve(a, results_root)
    lb, pb, rb = resolve(b, results_root)
    if (ra is None) != (rb is None):
        raise UserError("explain: give two runs, or two plans/specs (not a run and a plan)")
    comparisons: list[Comparison]
    if ra is not None and rb is not None:
        comparisons = [compare(RunRef(la, pa, pa.run(ra)), RunRef(lb, pb, pb.run(rb)))]
    else:
        comparisons = compare_plans((la, pa), (lb, pb))
    if as_json:
        typer.echo(json.dumps([c.as_dict() for c in comparisons], indent=2, default=str))
    else:
        for c in comparisons:
            for line in c.lines():
                typer.echo(line)
        if ra is None:
            for line in ladder_lines((la, pa), (lb, pb)):
                typer.echo(line)
    if not all(c.same for c in comparisons):
        raise typer.Exit(1)
