"""How runs look to a person: the `olmoablate status` table, its JSON form, and the number
formats the progress lines share with it (launch/progress.py), so both read the same."""

from __future__ import annotations

import json
from typing import Any

from olmoablate.contract.runstates import ACTIVE_STATES, RunState
from olmoablate.launch.reconcile import RunView

#: Colour of each state in the table (states not listed stay plain).
STATE_STYLE = {
    RunState.COMPLETED: "green",
    RunState.RUNNING: "cyan",
    RunState.PENDING: "blue",
    RunState.QUEUED: "blue",
    RunState.FAILED: "red",
    RunState.DIVERGED: "magenta",
    RunState.CANCELLED: "yellow",
    RunState.CANCELLING: "yellow",
    RunState.INTERRUPTED: "yellow",
}


def fmt_eta(seconds: float | None) -> str:
    """``1h05m`` / ``4m09s``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def fmt_tokens(n: float | None) -> str:
    """``1.2B`` / ``3.4M`` / ``5.6k``; ``-`` when unknown."""
    if n is None:
        return "-"
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.1f}{unit}"
    return str(int(n))


def status_table(views: list[RunView], title: str | None = None) -> Any:
    """The rich Table of `status` (and of the live progress of `submit --executor local`)."""
    from rich.table import Table

    table = Table(title=title, header_style="bold")
    for col in ("run", "state", "step", "tokens", "loss", "tok/s", "ETA", "job", "executor"):
        table.add_column(
            col,
            justify="right" if col in ("step", "tokens", "loss", "tok/s") else "left",
            no_wrap=col in ("run", "state", "step"),
        )
    for v in views:
        step = f"{v.step if v.step is not None else '-'}/{v.total_steps or '-'}"
        style = STATE_STYLE.get(v.state, "")
        table.add_row(
            v.run_id,
            f"[{style}]{v.state}[/]" if style else v.state,
            step,
            fmt_tokens(v.tokens),
            f"{v.last_loss:.4f}" if isinstance(v.last_loss, (int, float)) else "-",
            f"{v.tokens_per_s:,.0f}" if isinstance(v.tokens_per_s, (int, float)) else "-",
            fmt_eta(v.eta_s) if v.state in ACTIVE_STATES else "-",
            v.job_id or "-",
            v.executor or "-",
        )
    return table


def views_json(views: list[RunView]) -> str:
    """`status --json`: one object per run, every RunView field."""
    return json.dumps([v.as_dict() for v in views], indent=2)
