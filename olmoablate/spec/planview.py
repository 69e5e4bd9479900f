"""What `plan` prints: the compact default view (one row per size and arm, the totals, the
budget), the wide tables (``--wide``), the evaluation protocol and the pre-registered gates.

Why compact by default: the full table (one row per run with its certificate, one per pair naming what
differs) ran to ~290 columns for the shipped 1B/3B/7B spec; what a reader decides on before
spending is the cost of each arm, the totals per size and stage and whether they fit the budget.
``plan --wide`` prints the full tables and ``--format json`` every number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from olmoablate.contract.plan import Plan
from olmoablate.contract.schema import Evaluation
from olmoablate.contract.totals import budget_limits, totals


def human(n: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.3g}"


def render_compact(plan: Plan, plan_path: Path) -> None:
    """The default view: arms, totals and budget, then the evaluation protocol and the gates."""
    from rich.table import Table

    from olmoablate.console import make_console, print_whole

    console = make_console()

    t = totals(plan)
    table = Table(title=f"plan: {plan.spec_name}  ({plan_path})")
    from olmoablate.spec.feasibility import wall_hours

    cols = ("size", "arm", "runs", "params", "tokens", "steps", "GPU-h/run", "train h/run",
            "mem GB/dev")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="left" if col in {"size", "arm"} else "right")
    reused = plan.identity.reused if plan.identity is not None else {}
    rows: dict[tuple[str, str], list[Any]] = {}
    for r in plan.runs:
        arm = r.arm + (" (A/A)" if r.is_aa else "") + (" (reused)" if r.run_id in reused else "")
        rows.setdefault((r.size, arm), []).append(r)
    for (size, arm), runs in rows.items():
        r = runs[0]
        hours = wall_hours(r)
        table.add_row(
            size, arm, str(len(runs)), human(r.params), human(r.tokens), str(r.steps),
            "0 (reused)" if r.run_id in reused else f"{r.gpu_hours:,.4g}",
            "-" if hours is None else f"{hours:,.3g}",
            f"{r.peak_memory_gb:.3g}",
        )  # fmt: skip
    print_whole(console, table)
    limits = budget_limits(plan)
    tot = Table(title="totals")
    for col in ("", "stage", "runs", "GPU-hours", "tokens", "budget"):
        tot.add_column(col, justify="left" if col in {"", "stage"} else "right")
    for size, v in t.by_size.items():
        cap = limits.get(size)
        tot.add_row(size, t.stage_of[size], str(v.runs), f"{v.gpu_hours:,.1f}", human(v.tokens),
                    _cap(v.gpu_hours, cap))  # fmt: skip
    if len(t.by_stage) > 1:
        for stage, v in t.by_stage.items():
            tot.add_row(f"({stage})", "", str(v.runs), f"{v.gpu_hours:,.1f}", human(v.tokens), "")
    tot.add_row("spec", "", str(t.total.runs), f"{t.total.gpu_hours:,.1f}", human(t.total.tokens),
                _cap(t.total.gpu_hours, limits.get("total")))  # fmt: skip
    print_whole(console, tot)
    console.print(
        f"{len(plan.pairs)} pairs, each certified to differ only in architecture"
        + (" (and FLOPs-matched tokens)" if any(p.budget_match == "flops" for p in plan.pairs) else "")
        + "; `plan --wide` lists every run and pair, `--format json` every number",
        markup=False, highlight=False,
    )  # fmt: skip
    render_evaluation(plan, console)
    _render_gates(plan, console)


def _cap(hours: float, cap: float | None) -> str:
    if cap is None:
        return "-"
    return f"{cap:,.0f} ({'ok' if hours <= cap else 'OVER'})"


def render_plan(plan: Plan, plan_path: Path) -> None:
    from rich.table import Table

    from olmoablate.console import make_console, print_whole

    console = make_console()
    reused = plan.identity.reused if plan.identity is not None else {}
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
            human(r.params),
            human(r.non_embedding_params),
            human(r.train_flops_per_token),
            human(r.tokens),
            str(r.steps),
            "0 (reused)" if r.run_id in reused else f"{r.gpu_hours:.4g}",
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
            else f"tokens: {human(base.tokens)} -> {human(var.tokens)} (FLOPs-matched)"
            for d in p.differs
        )
        pairs.add_row(
            p.pair_id, p.baseline_run, p.variant_run, p.budget_match, differs, p.certificate[:12]
        )
    print_whole(console, pairs)
    render_evaluation(plan, console)
    _render_gates(plan, console)


def _render_gates(plan: Plan, console: Any) -> None:
    """Each pre-registered gate, its noise source and minimum detectable effect lines."""
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
        info, _warnings = gate_lines(view)  # warnings: printed with the others (_check)
        for line in info:
            console.print(f"  {line}", markup=False, highlight=False)


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
