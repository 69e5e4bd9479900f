"""`plan`'s compact default view: one row per size and arm, the totals, the budget.

Why compact: the full table (one row per run with its certificate, one per pair naming what
differs) ran to ~290 columns for the shipped 1B/3B/7B spec; what a reader decides on before
spending is the cost of each arm, the totals per size and stage and whether they fit the budget.
``plan --wide`` prints the full tables and ``--format json`` every number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from olmoablate.contract.plan import Plan
from olmoablate.contract.totals import budget_limits, totals


def human(n: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.3g}"


def render_compact(plan: Plan, plan_path: Path, console: Any) -> None:
    from rich.table import Table

    from olmoablate.console import print_whole

    t = totals(plan)
    table = Table(title=f"plan: {plan.spec_name}  ({plan_path})")
    for col in ("size", "arm", "runs", "params", "tokens", "steps", "GPU-h/run", "mem GB/dev"):
        table.add_column(col, justify="left" if col in {"size", "arm"} else "right")
    rows: dict[tuple[str, str], list[Any]] = {}
    for r in plan.runs:
        arm = r.arm + (" (A/A)" if r.is_aa else "")
        rows.setdefault((r.size, arm), []).append(r)
    for (size, arm), runs in rows.items():
        r = runs[0]
        table.add_row(
            size, arm, str(len(runs)), human(r.params), human(r.tokens), str(r.steps),
            f"{r.gpu_hours:,.4g}", f"{r.peak_memory_gb:.3g}",
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


def _cap(hours: float, cap: float | None) -> str:
    if cap is None:
        return "-"
    return f"{cap:,.0f} ({'ok' if hours <= cap else 'OVER'})"
