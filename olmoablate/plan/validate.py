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
from olmoablate.plan.accounting import budget_limits, totals
from olmoablate.plan.layout import RootOpt, complete_spec
from olmoablate.plan.names import PLAN_FILE, RESULTS_ROOT
from olmoablate.plan.planfile import Plan
from olmoablate.plan.schema import Evaluation

# What `plan` prints: compact by default (one row per size and arm, totals, budget: what a reader
# decides on; the full tables ran to ~290 columns), ``--wide`` the full tables, ``--format json`` all.

def human(n: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.3g}"


def params_cell(plan: Plan, run: Any) -> str:
    """The compact table's params: rounded, plus the exact difference to the arm's baseline when
    the rounding hides it ("919K +44"): a block that adds a few scalars must not look free."""
    shown = human(run.params)
    pair = next((p for p in plan.pairs if p.variant_run == run.run_id), None)
    if pair is None:
        return shown
    base = plan.runs_by_id[pair.baseline_run]
    diff = run.params - base.params
    if diff and human(base.params) == shown:  # "+44" exact; "+166K" (the table stays narrow)
        return f"{shown} {diff:+,}" if abs(diff) < 1000 else f"{shown} {'+' if diff > 0 else ''}{human(diff)}"
    return shown


def _table(title: str, cols: tuple[str, ...], left: int) -> Any:
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(cols):
        table.add_column(col, justify="left" if i < left else "right")
    return table


def render_compact(plan: Plan, plan_path: Path) -> None:
    """The default view: arms, totals and budget, then the evaluation protocol and the gates."""
    from olmoablate.io import make_console, print_whole
    from olmoablate.plan.feasibility import wall_hours

    console = make_console()
    t = totals(plan)
    cols = ("size", "arm", "runs", "params", "tokens", "steps", "GPU-h/run", "train h/run",
            "mem GB/dev")  # fmt: skip
    table = _table(f"plan: {plan.spec_name}  ({plan_path})", cols, left=2)
    reused = plan.identity.reused if plan.identity is not None else {}
    rows: dict[tuple[str, str], list[Any]] = {}
    for r in plan.runs:
        arm = r.arm + (" (A/A)" if r.is_aa else "") + (" (reused)" if r.run_id in reused else "")
        rows.setdefault((r.size, arm), []).append(r)
    for (size, arm), runs in rows.items():
        r = runs[0]
        hours = wall_hours(r)
        table.add_row(
            size, arm, str(len(runs)), params_cell(plan, r), human(r.tokens), str(r.steps),
            "0 (reused)" if r.run_id in reused else f"{r.gpu_hours:,.4g}",
            "-" if hours is None else f"{hours:,.3g}",
            f"{r.peak_memory_gb:.3g}",
        )  # fmt: skip
    print_whole(console, table)
    limits = budget_limits(plan)
    tot = _table("totals", ("", "stage", "runs", "GPU-hours", "tokens", "budget"), left=2)
    rows_of = [
        (size, t.stage_of[size], v, _cap(v.gpu_hours, limits.get(size)))
        for size, v in t.by_size.items()
    ]
    if len(t.by_stage) > 1:
        rows_of += [(f"({stage})", "", v, "") for stage, v in t.by_stage.items()]
    rows_of.append(("spec", "", t.total, _cap(t.total.gpu_hours, limits.get("total"))))
    for label, stage, v, cap in rows_of:
        tot.add_row(label, stage, str(v.runs), f"{v.gpu_hours:,.1f}", human(v.tokens), cap)
    print_whole(console, tot)
    console.print(
        f"{len(plan.pairs)} pairs, each certified to differ only in architecture"
        + (" (and FLOPs-matched tokens)" if any(p.budget_match == "flops" for p in plan.pairs) else "")
        + "; `plan --wide` lists every run and pair, `--format json` every number",
        markup=False, highlight=False,
    )  # fmt: skip
    _render_protocol(plan, console)


def _cap(hours: float, cap: float | None) -> str:
    if cap is None:
        return "-"
    return f"{cap:,.0f} ({'ok' if hours <= cap else 'OVER'})"


def render_plan(plan: Plan, plan_path: Path) -> None:
    from olmoablate.io import make_console, print_whole

    console = make_console()
    reused = plan.identity.reused if plan.identity is not None else {}
    cols = ("run_id", "pair", "arm", "params", "non-emb", "FLOPs/tok", "tokens", "steps",
            "GPU-h", "mem GB", "certificate")  # fmt: skip
    table = _table(f"plan: {plan.spec_name}  ({plan_path})", cols, left=3)
    for r in plan.runs:
        table.add_row(
            r.run_id,
            r.pair_id if not r.is_aa else "A/A (gate noise)",
            r.arm + (" (role aa)" if r.is_aa else ""),
            f"{r.params:,}",  # exact (the README's promise); the compact view rounds
            f"{r.non_embedding_params:,}",
            human(r.train_flops_per_token),
            human(r.tokens),
            str(r.steps),
            "0 (reused)" if r.run_id in reused else f"{r.gpu_hours:.4g}",
            f"{r.peak_memory_gb:.3g}",
            r.certificate[:12],
        )
    print_whole(console, table)
    cols = ("pair_id", "baseline", "variant", "budget", "differs", "certificate")
    pairs = _table("pairs (what differs between the arms)", cols, left=len(cols))
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
            else f"tokens: {human(base.tokens)} -> {human(var.tokens)} (FLOPs-matched)"
            for d in p.differs
        )
        pairs.add_row(
            p.pair_id, p.baseline_run, p.variant_run, p.budget_match, differs, p.certificate[:12]
        )
    print_whole(console, pairs)
    _render_protocol(plan, console)


def _render_protocol(plan: Plan, console: Any) -> None:
    """Below either view: the evaluation protocol, then each gate with its noise and MDE lines."""
    from olmoablate.plan.feasibility import gate_lines

    render_evaluation(plan, console)
    views = plan.gate_views()
    for name, view in views:
        g = view.gate
        assert g is not None  # a view always holds its gate
        label = "gate" if len(views) == 1 else f"gate {name!r}"
        console.print(
            f"{label} (pre-registered, sha256 {str(view.gate_sha256)[:12]}): " + gate_summary(view),
            markup=False,
        )
        # warnings: printed with the others (_check)
        info, _warnings = gate_lines(view, simulate=True)
        for line in info:
            console.print(f"  {line}", markup=False, highlight=False)


def gate_summary(view: Plan) -> str:
    """What the viewed gate decides, in one line (after its name and hash)."""
    g = view.gate
    assert g is not None
    if g.rule == "complementary":
        a, b = [*g.of, "?", "?"][:2]
        return (
            f"rule complementary (factorial): {a}, {b} and {g.combined} (both) at stage "
            f"{g.stage}, each over the seed's shared baseline; complementary when the "
            f"interaction's lower bound > -{g.tolerance:g} and {g.combined} beats both single "
            f"arms, else redundant / interfering (Holm) / inconclusive; metric '{g.metric}' "
            f"({g.direction} is better), confidence {g.confidence}"
        )
    if g.rule != "multiplier":
        return (
            f"variant {g.variant or '(all)'}; stage {g.stage} -> "
            f"{', '.join(g.promote_to) or '-'}; rule {g.rule}; metric '{g.metric}' "
            f"({g.direction} is better), min effect {g.min_effect}, confidence {g.confidence}"
        )
    entry = view.gate_entry()
    rungs = entry.ladder.rungs if entry is not None and entry.ladder is not None else g.rungs
    return (
        f"variant {g.variant}; rule multiplier: proceed when the projected compute multiplier "
        f"in {g.unit} (the report gives flops, tokens and params) has its lower bound >= "
        f"{g.min_multiplier:g} at every target ({', '.join(g.targets)}), stop when an upper "
        f"bound is below it; confidence {g.confidence}; rungs {', '.join(rungs) or '-'} "
        f"(stage {g.stage}); metric '{g.metric}' ({g.direction} is better)"
        + (f"; promote_to {', '.join(g.promote_to)}" if g.at and g.promote_to else "")
    )


def _eval_lines(ev: Evaluation, loop_counts: list[str]) -> list[str]:
    """What a run of this evaluation block scores, as text (wrapped, never cut)."""
    sets = ", ".join(ev.lm_sets) or "none"
    cap = ev.max_eval_tokens
    lines = [
        f"every {ev.interval} steps and at the end; LM sets: {sets}"
        + (f" (first {human(cap)} tokens each)" if cap else "")
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
    """The evaluation protocol per size (identical ones share a block; part of the certificate)."""
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


if TYPE_CHECKING:
    from olmoablate.plan.layout import ResultsDir

SPEC_SUFFIXES = (".yaml", ".yml")


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


def find_spec_files(
    paths: list[Path], results_root: Path = RESULTS_ROOT
) -> list[tuple[Path, list[str]]]:
    """Folders expanded into their spec files (recursively, sorted); a spec name or results
    folder stands for its plan's spec file, with that plan's ``--set`` overrides."""
    files: list[tuple[Path, list[str]]] = []
    for p in paths:
        if p.is_dir() and (p / PLAN_FILE).is_file():
            files.append(spec_file_of(str(p), results_root))
        elif p.is_dir():
            files.extend(
                (f, []) for f in sorted(p.rglob("*")) if f.suffix in SPEC_SUFFIXES and f.is_file()
            )
        elif p.exists():
            files.append((p, []))
        elif "/" not in str(p) and p.suffix not in SPEC_SUFFIXES and (
            Path(results_root) / str(p) / PLAN_FILE
        ).is_file():
            files.append(spec_file_of(str(p), results_root))
        else:
            raise UserError(f"{p}: no such file or folder")
    return files


SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="FIELD.PATH=VALUE",
        help="Override one spec field, e.g. --set training.optimizer.lr.1B=3e-4 (repeatable; "
        "the value is YAML; recorded in plan.json and hashed into spec_sha256).",
    ),
]
StrictOpt = Annotated[
    bool,
    typer.Option(
        "--strict", help="Treat every warning (feasibility, budget, paths) as an error (for CI)."
    ),
]
SkipPathsOpt = Annotated[
    bool,
    typer.Option(
        "--skip-paths",
        help="Do not check data/eval paths (CI without the data); listed as not checked.",
    ),
]


def _check(ls: Any, plan: Plan, skip_paths: bool) -> tuple[list[str], list[str]]:
    """(warning lines, notes): the loader's warnings, feasibility, gate noise and the budget.
    A SpecError for what no flag lets through (feasibility's errors: a plan that cannot run)."""
    from olmoablate.plan.accounting import over_budget
    from olmoablate.plan.feasibility import check, gate_lines
    from olmoablate.plan.load import SpecError

    found = check(ls, plan, check_paths=not skip_paths)
    if found.errors:
        raise SpecError(found.errors)
    lines = [str(w) for w in [*ls.warnings, *found.warnings]]
    for name, view in plan.gate_views():
        where = "gate" if len(plan.gates) < 2 else f"gates.{name}"
        lines.extend(f"{ls.path}: {where}: warning: {w}" for w in gate_lines(view, info=False)[1])
    budget_line = ls.problem(("budget", "max_gpu_hours"), "")
    for msg in over_budget(plan):
        lines.append(f"{budget_line.file}:{budget_line.line}: budget.max_gpu_hours: warning: {msg}")
    return lines, found.notes


def _emit(lines: list[str], strict: bool) -> None:
    for line in lines:
        if strict:
            line = line.replace(": warning: ", ": error (--strict): ", 1)
        typer.echo(line, err=True)


def validate_command(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Spec files or folders of specs (*.yaml, *.yml), or a spec name / results "
            "folder of an earlier plan.",
            metavar="SPEC...",
            shell_complete=complete_spec,
        ),
    ],
    set_: SetOpt = None,
    strict: StrictOpt = False,
    skip_paths: SkipPathsOpt = False,
    results_root: RootOpt = RESULTS_ROOT,
) -> None:
    """Check spec files without submitting anything (for CI).

    Exit 0 when every spec is valid. Otherwise exit 2 and print one line per problem:
    FILE:LINE: field.path: what is wrong (allowed: ...). Also expands each spec into its pairs,
    so a spec whose arms would differ in more than architecture fails here too, and checks that
    the plan is feasible: per-device memory against the GPU's, wall time against the Slurm time
    limit and requeues, eval points against the gate, every data/eval path, downstream metric
    names and budget.max_gpu_hours. Those are warnings; --strict makes them errors.
    """
    from olmoablate.plan.expand import build_plan
    from olmoablate.plan.load import SpecError, load_spec

    files = find_spec_files(paths, results_root)
    if not files:
        raise UserError(f"no spec files (*.yaml, *.yml) found in {', '.join(map(str, paths))}")
    failed = 0
    for f, earlier in files:
        try:
            ls = load_spec(f, [*earlier, *(set_ or [])])
            plan = build_plan(ls)
        except SpecError as err:
            failed += 1
            typer.echo(str(err), err=True)
            continue
        except UserError as err:
            failed += 1
            typer.echo(f"{f}:1: <pairs>: {err}", err=True)
            continue
        try:
            lines, notes = _check(ls, plan, skip_paths)
        except SpecError as err:
            failed += 1
            typer.echo(str(err), err=True)
            continue
        _emit(lines, strict)
        if strict and lines:
            failed += 1
            typer.echo(f"FAILED  {f}  ({len(lines)} warning(s) under --strict)")
            continue
        typer.echo(
            f"ok  {f}  ({len(plan.runs)} runs, {len(plan.pairs)} pairs, "
            f"sizes {', '.join(ls.spec.sizes)}"
            + (f"; not checked here: {'; '.join(notes)}" if notes else "")
            + ")"
        )
    if failed:
        raise typer.Exit(2)


def is_stream(path: Path) -> bool:
    """A pipe or FIFO (``plan <(cat spec)``): read as a spec, whatever its name."""
    import stat

    try:
        return stat.S_ISFIFO(path.stat().st_mode)
    except OSError:
        return False


def spec_file_of(spec: str, results_root: Path) -> tuple[Path, list[str]]:
    """SPEC (a spec file, name or results folder) -> its spec file and its plan's overrides."""
    path = Path(spec)
    if (path.is_file() and path.suffix in SPEC_SUFFIXES) or is_stream(path):
        return path, []
    from olmoablate.plan.layout import resolve_results

    layout = resolve_results(spec, results_root)
    if not layout.plan_path.is_file():
        raise UserError(
            f"{spec}: not a spec file, and {layout.plan_path} does not exist to name one "
            f"(give the spec's YAML path)"
        )
    old = layout.plan
    for cand in (Path(old.workdir) / old.spec_path, Path(old.spec_path)):
        if cand.is_file():
            return cand, list(old.overrides)
    raise UserError(
        f"{layout.plan_path}: its spec {old.spec_path} (from {old.workdir}) is not found; "
        "give the spec's YAML path"
    )


def plan_command(
    spec: Annotated[
        str,
        typer.Argument(
            help="Spec file (YAML), or the spec name / results folder of an earlier plan.",
            metavar="SPEC",
            shell_complete=complete_spec,
        ),
    ],
    size: Annotated[
        list[str] | None,
        typer.Option(
            "--size", "-s", metavar="SIZE", help="Only show these sizes (plan.json always holds all)."
        ),
    ] = None,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", "-f", help="table (default) or json (every number).")
    ] = OutputFormat.table,
    wide: Annotated[
        bool, typer.Option("--wide", help="Every run and pair with its certificate (wide tables).")
    ] = False,
    results_root: RootOpt = RESULTS_ROOT,
    replan: Annotated[
        bool,
        typer.Option(
            help="Overwrite a plan whose runs have started although the spec changed. The gate's "
            "registration is kept: a gate changed after its runs started is decided by it "
            "(docs/gate-statistics.md, 'What an unplanned look costs')."
        ),
    ] = False,
    set_: SetOpt = None,
    strict: StrictOpt = False,
    skip_paths: SkipPathsOpt = False,
) -> None:
    """Expand a spec into matched runs with exact costs; write results/<name>/plan.json.

    By default one row per size and arm (runs, params, tokens, steps, GPU-hours, training wall
    time at the stated peak x MFU, memory estimate per device) and the totals per size, stage and spec against budget.max_gpu_hours; --wide
    lists every run and pair (what differs between its arms, certificates). Feasibility
    warnings as in `validate` (--strict: errors, nothing written). plan.json pre-registers
    the gate.
    """
    from olmoablate.io import file_in_the_way
    from olmoablate.plan.expand import build_plan, results_dir
    from olmoablate.plan.load import load_spec

    blocker = file_in_the_way(results_root)
    if blocker is not None:
        what = "is a file" if blocker == results_root else f"is under a file ({blocker})"
        raise UserError(f"--results-root {results_root}: {what}; give a folder")
    spec_path, earlier = spec_file_of(spec, results_root)
    ls = load_spec(spec_path, [*earlier, *(set_ or [])])
    plan = build_plan(ls, spec_path=str(spec_path))
    unknown = [s for s in (size or []) if s not in ls.spec.sizes]
    if unknown:
        raise UserError(
            f"{spec_path}: --size {', '.join(unknown)} is not in the spec (allowed: {', '.join(ls.spec.sizes)})"
        )
    lines, notes = _check(ls, plan, skip_paths)
    if strict and lines:
        _emit(lines, strict)
        raise UserError(f"{spec_path}: {len(lines)} warning(s) under --strict; no plan written")
    from olmoablate.plan.store import attach_identity, reuse_lines

    plan = attach_identity(plan, results_root)
    out = results_dir(ls.spec.name, results_root)
    _guard_replan(out, plan, replan, spec)
    plan = _keep_registrations(out, plan)
    plan.write(out.plan_path)

    shown = _filter(plan, size)
    if fmt is OutputFormat.json:
        doc = shown.as_json()
        doc["totals"] = totals(plan).as_json()
        doc["warnings"] = lines
        doc["not_checked"] = notes
        typer.echo(json.dumps(doc, indent=2))
        _emit(lines, False)
        return

    if wide:
        render_plan(shown, out.plan_path)
    else:
        render_compact(shown, out.plan_path)
    for line in reuse_lines(shown, results_root):
        typer.echo(line)
    for note in notes:
        typer.echo(f"not checked here: {note}")
    _emit(lines, False)


def _old_plan(out: ResultsDir) -> dict[str, Any] | None:
    """The plan.json being replaced, unvalidated, so even one this version cannot load is
    protected (None when absent or not JSON; ``{}`` when not an object)."""
    try:
        old = json.loads(out.plan_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return old if isinstance(old, dict) else {}


def _keep_registrations(out: ResultsDir, plan: Plan) -> Plan:
    from olmoablate.plan.feasibility import carry_registrations

    old = _old_plan(out)
    return plan if old is None else carry_registrations(old, plan, _runs_started(out))


def _runs_started(out: ResultsDir) -> bool:
    """Whether any run of the plan has started (its results could have been looked at)."""
    return out.runs_dir.is_dir() and any(out.runs_dir.iterdir())


def _guard_replan(out: ResultsDir, plan: Plan, replan: bool, spec: str) -> None:
    """Keep the pre-registered plan once runs exist, unless ``--replan``: when the spec changed
    (its hash), and when the spec is the same but a started run's identity is not (its block's
    code edited, a token file rewritten, other software): a plain `plan` must not file the old
    run folders' numbers under the new identities (issue 35, case 4)."""
    if replan:
        return
    old = _old_plan(out)
    if old is None:
        return
    if old.get("spec_sha256") == plan.spec_sha256:
        from olmoablate.plan.identity import short
        from olmoablate.plan.store import started_as_other

        changed = started_as_other(out, plan)
        if changed:
            rid, was, now, what = changed[0]
            others = f" (and {len(changed) - 1} more run(s))" if len(changed) > 1 else ""
            redo = " ".join(f"--redo {r[0]}" for r in changed)
            raise UserError(
                f"{out.plan_path}: run {rid} was started as identity {short(was)}, this plan "
                f"makes it {short(now)}{others}: {what}; the old plan is kept. To train the "
                f"change: `olmoablate plan {spec} --replan`, then `olmoablate submit {spec} "
                f"{redo}` (or undo the change)"
            )
        return
    if _runs_started(out):
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
