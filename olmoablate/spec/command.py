"""`olmoablate validate` and `olmoablate plan`.

Both are login-node commands: they import neither torch nor olmo_core (a test runs
`python -X importtime` to keep it that way) and finish in a fraction of a second.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from olmoablate.errors import UserError

if TYPE_CHECKING:
    from olmoablate.contract.layout import ResultsDir
    from olmoablate.contract.plan import Plan
    from olmoablate.contract.schema import Evaluation

SPEC_SUFFIXES = (".yaml", ".yml")


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


def find_spec_files(paths: list[Path]) -> list[Path]:
    """Expand folders into the spec files they hold (recursively, sorted)."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(
                sorted(f for f in p.rglob("*") if f.suffix in SPEC_SUFFIXES and f.is_file())
            )
        elif p.exists():
            files.append(p)
        else:
            raise UserError(f"{p}: no such file or folder")
    return files


def validate_command(
    paths: Annotated[
        list[Path], typer.Argument(help="Spec files or folders of specs (*.yaml, *.yml).")
    ],
) -> None:
    """Check spec files without submitting anything (for CI).

    Exit 0 when every spec is valid. Otherwise exit 2 and print one line per problem:
    FILE:LINE: field.path: what is wrong (allowed: ...). Also expands each spec into its pairs,
    so a spec whose arms would differ in more than architecture fails here too.
    """
    from olmoablate.spec.expand import build_plan
    from olmoablate.spec.gateplan import gate_lines
    from olmoablate.spec.load import SpecError, load_spec

    files = find_spec_files(paths)
    if not files:
        raise UserError(f"no spec files (*.yaml, *.yml) found in {', '.join(map(str, paths))}")
    failed = 0
    for f in files:
        try:
            ls = load_spec(f)
            plan = build_plan(ls)
        except SpecError as err:
            failed += 1
            typer.echo(str(err), err=True)
            continue
        except UserError as err:
            failed += 1
            typer.echo(f"{f}:1: <pairs>: {err}", err=True)
            continue
        for w in ls.warnings:
            typer.echo(str(w), err=True)
        typer.echo(
            f"ok  {f}  ({len(plan.runs)} runs, {len(plan.pairs)} pairs, "
            f"sizes {', '.join(ls.spec.sizes)})"
        )
        for name, view in plan.gate_views():
            where = "gate" if len(plan.gates) < 2 else f"gates.{name}"
            for w in gate_lines(view)[1]:
                typer.echo(f"warning: {f}: {where}: {w}", err=True)
    if failed:
        raise typer.Exit(2)


def plan_command(
    spec: Annotated[Path, typer.Argument(help="The spec file (YAML).")],
    size: Annotated[
        list[str] | None,
        typer.Option("--size", "-s", help="Only show these sizes (plan.json always holds all)."),
    ] = None,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", "-f", help="table (default) or json.")
    ] = OutputFormat.table,
    results_root: Annotated[
        Path, typer.Option(help="Folder that holds one results folder per spec.")
    ] = Path("results"),
    replan: Annotated[
        bool,
        typer.Option(help="Overwrite a plan whose runs have started although the spec changed."),
    ] = False,
) -> None:
    """Expand a spec into matched runs with exact costs; write results/<name>/plan.json.

    One line per run (params, FLOPs/token, tokens, steps, GPU-hours, memory estimate) and one per
    pair naming exactly what differs between its arms. plan.json pre-registers the gate.
    """
    from olmoablate.spec.expand import build_plan, results_dir
    from olmoablate.spec.load import load_spec

    if results_root.exists() and not results_root.is_dir():
        raise UserError(f"--results-root {results_root}: is a file; give a folder")
    ls = load_spec(spec)
    plan = build_plan(ls, spec_path=str(spec))
    unknown = [s for s in (size or []) if s not in ls.spec.sizes]
    if unknown:
        raise UserError(
            f"{spec}: --size {', '.join(unknown)} is not in the spec (allowed: {', '.join(ls.spec.sizes)})"
        )
    out = results_dir(ls.spec.name, results_root)
    _guard_replan(out, plan, replan)
    plan.write(out.plan_path)

    shown = _filter(plan, size)
    if fmt is OutputFormat.json:
        typer.echo(json.dumps(shown.as_json(), indent=2))
        return
    render_plan(shown, out.plan_path)


def _guard_replan(out: ResultsDir, plan: Plan, replan: bool) -> None:
    """Keep the pre-registered plan once runs exist, unless the user explicitly re-plans.

    The old plan is compared by its spec hash only (read without validating it, so even a plan
    this version cannot load is protected rather than overwritten).
    """
    if not out.plan_path.exists() or replan:
        return
    try:
        old = json.loads(out.plan_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(old, dict) and old.get("spec_sha256") == plan.spec_sha256:
        return
    started = out.runs_dir.is_dir() and any(out.runs_dir.iterdir())
    if started:
        raise UserError(
            f"{out.plan_path}: the spec changed since this plan was made and runs have started; "
            "the old plan (and its pre-registered gate) is kept. Re-plan deliberately with "
            "--replan, or give the changed spec a new name"
        )


def _filter(plan: Plan, sizes: list[str] | None) -> Plan:
    """The plan as shown: only ``sizes`` (plan.json itself always holds every size)."""
    if not sizes:
        return plan
    return plan.model_copy(
        update={
            "runs": [r for r in plan.runs if r.size in sizes],
            "pairs": [p for p in plan.pairs if p.size in sizes],
        }
    )


def _human(n: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.3g}"


def render_plan(plan: Plan, plan_path: Path) -> None:
    from rich.table import Table

    from olmoablate.console import make_console, print_whole

    console = make_console()
    table = Table(title=f"plan: {plan.spec_name}  ({plan_path})", show_lines=False)
    for col in (
        "run_id",
        "pair",
        "arm",
        "params",
        "non-emb",
        "FLOPs/tok",
        "tokens",
        "steps",
        "GPU-h",
        "mem GB",
        "certificate",
    ):
        table.add_column(col, justify="right" if col not in {"run_id", "pair", "arm"} else "left")
    for r in plan.runs:
        table.add_row(
            r.run_id,
            r.pair_id if not r.is_aa else "A/A (gate noise)",
            r.arm + (" (role aa)" if r.is_aa else ""),
            _human(r.params),
            _human(r.non_embedding_params),
            _human(r.train_flops_per_token),
            _human(r.tokens),
            str(r.steps),
            f"{r.gpu_hours:.4g}",
            f"{r.peak_memory_gb:.3g}",
            r.certificate[:12],
        )
    print_whole(console, table)
    pairs = Table(title="pairs (what differs between the arms)")
    for col in ("pair_id", "baseline", "variant", "budget", "differs", "certificate"):
        pairs.add_column(col)
    runs = plan.runs_by_id
    for p in plan.pairs:
        var, base = runs[p.variant_run], runs[p.baseline_run]
        arch = " + ".join(
            f"{k}({', '.join(f'{a}={b}' for a, b in v.items())})"
            for k, v in var.architecture.as_mapping().items()
        )
        differs = "; ".join(
            f"architecture: {arch}"
            if d == "architecture"
            else f"tokens: {_human(base.tokens)} -> {_human(var.tokens)} (FLOPs-matched)"
            for d in p.differs
        )
        pairs.add_row(
            p.pair_id, p.baseline_run, p.variant_run, p.budget_match, differs, p.certificate[:12]
        )
    print_whole(console, pairs)
    render_evaluation(plan, console)
    from olmoablate.spec.gateplan import gate_lines

    views = plan.gate_views()
    for name, view in views:
        g = view.gate
        assert g is not None  # a view always holds its gate
        label = "gate" if len(views) == 1 else f"gate {name!r}"
        console.print(
            f"{label} (pre-registered, sha256 {str(view.gate_sha256)[:12]}): "
            f"variant {g.variant or '(all)'}; stage {g.stage} -> "
            f"{', '.join(g.promote_to) or '-'}; rule {g.rule}; metric '{g.metric}' "
            f"({g.direction} is better), min effect {g.min_effect}, confidence {g.confidence}",
            markup=False,
        )
        info, warnings = gate_lines(view)
        for line in info:
            console.print(f"  {line}", markup=False, highlight=False)
        for w in warnings:
            console.print(f"[bold red]WARNING: {label}: {w}[/]")


def _eval_lines(ev: Evaluation, loop_counts: list[str]) -> list[str]:
    """What a run of this evaluation block scores, as text (wrapped, never cut)."""
    sets = ", ".join(ev.lm_sets) or "none"
    cap = ev.max_eval_tokens
    lines = [
        f"every {ev.interval} steps and at the end; LM sets: {sets}"
        + (f" (first {_human(cap)} tokens each)" if cap else "")
    ]
    tasks = list(ev.downstream)
    if tasks:
        capped = ev.max_downstream_batches
        lines.append(
            f"downstream ({len(tasks)} task{'s' if len(tasks) != 1 else ''}, ai2-olmo-eval"
            + (f", first {capped} batches each" if capped else "")
            + f"): {', '.join(tasks)}"
        )
    else:
        lines.append("downstream: none")
    if loop_counts:
        lines.append(
            "looped arms: LM sets"
            + (" and downstream tasks" if tasks else "")
            + f" also at loop counts {'; '.join(loop_counts)}"
        )
    return lines


def render_evaluation(plan: Plan, console: Any) -> None:
    """The evaluation protocol per size (sizes with the same protocol share one block): it is part
    of every pair's certificate, so both arms are scored on exactly these sets and tasks."""
    by_size: dict[str, tuple[Evaluation, list[str]]] = {}
    for r in plan.runs:
        ev, loops = by_size.setdefault(r.size, (r.evaluation, []))
        if r.loop_counts:
            counts = f"{r.arm}: {', '.join(str(n) for n in r.loop_counts)}"
            if counts not in loops:
                loops.append(counts)
    groups: dict[str, tuple[Evaluation, list[str], list[str]]] = {}
    for size, (ev, loops) in by_size.items():
        key = json.dumps([ev.model_dump(), loops], sort_keys=True)
        groups.setdefault(key, (ev, loops, []))[2].append(size)
    console.print("evaluation (identical on both arms of every pair):")
    for ev, loops, sizes in groups.values():
        for line in _eval_lines(ev, loops):
            console.print(
                f"  {', '.join(sizes)}: {line}", markup=False, highlight=False, soft_wrap=True
            )
