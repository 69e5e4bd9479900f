"""`olmoablate explain A B`: what makes two runs, or the runs of two plans, different runs.

A and B are each a run (``results/<spec>/runs/<id>`` or ``SPEC:RUN_ID``), a results folder or
plan.json (the plan as recorded), or a spec file (expanded and identified now, as `plan` would:
so ``explain spec.yaml results/<spec>`` shows what changed since the plan was made). Login-node
command: no torch, no pandas.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from olmoablate.contract.roots import RESULTS_ROOT
from olmoablate.errors import UserError
from olmoablate.options import RootOpt

if TYPE_CHECKING:  # pydantic models and the store load when the command runs (fast --help)
    from olmoablate.contract.plan import Plan
    from olmoablate.store.explain import Comparison


def _fresh(spec: Path) -> Plan:
    from olmoablate.spec.expand import build_plan
    from olmoablate.spec.load import load_spec
    from olmoablate.store.identify import identify

    plan = build_plan(load_spec(spec), spec_path=str(spec))
    return plan.model_copy(update={"identity": identify(plan, Path.cwd())})


def _recorded(arg: str, results_root: Path) -> Plan:
    from olmoablate.contract.layout import resolve_results
    from olmoablate.contract.plan import Plan

    layout = resolve_results(arg, results_root)
    plan = Plan.load(layout.plan_path)
    if plan.identity is None:
        from olmoablate.store.identify import identify

        # an older plan: identified now, from its workdir's files and this machine's versions
        plan = plan.model_copy(update={"identity": identify(plan, plan.workdir)})
    return plan


def resolve(arg: str, results_root: Path) -> tuple[str, Plan, str | None]:
    """(label, plan, run id or None) of one operand."""
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
    from olmoablate.store.explain import RunRef, compare, compare_plans

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
    if not all(c.same for c in comparisons):
        raise typer.Exit(1)
