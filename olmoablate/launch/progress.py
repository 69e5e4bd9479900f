"""Progress of `submit --executor local`: a live table in a terminal, plain lines anywhere else.

Why two forms: a live table redraws in place, which is right for a person at a terminal and
wrong for a Slurm log, CI or ``| tee`` (rich then prints one 80-column frame with cut cells, or
escape codes). When stdout is not a terminal, every update becomes one plain ``key=value`` line
per run whose state changed, or whose step moved and that has not been reported for
``interval_s`` seconds — a bounded rate however long the runs train — with every value whole.
The last table is printed whole in both cases.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from olmoablate.console import is_terminal, make_console, print_whole
from olmoablate.contract.runstates import ACTIVE_STATES, STOPPED_STATES
from olmoablate.launch.view import fmt_eta, fmt_tokens

#: Seconds between two plain progress lines of the same run while only its step moves.
PLAIN_INTERVAL_S = 30.0


def _num(v: Any, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, int | float) and not isinstance(v, bool) else "-"


def plain_line(view: Any) -> str:
    """One run as a single ``key=value`` line: whole values, no colour, no padding."""
    step = f"{view.step if view.step is not None else '-'}/{view.total_steps or '-'}"
    eta = fmt_eta(view.eta_s) if view.state in ACTIVE_STATES else "-"
    fields = [
        ("run", view.run_id),
        ("state", view.state),
        ("step", step),
        ("tokens", fmt_tokens(view.tokens)),
        ("loss", _num(view.last_loss, ".4f")),
        ("tok/s", _num(view.tokens_per_s, ",.0f")),
        ("ETA", eta),
        ("job", view.job_id or "-"),
        ("executor", view.executor or "-"),
    ]
    reason = getattr(view, "reason", None)
    if reason and view.state in STOPPED_STATES:
        fields.append(("reason", " ".join(str(reason).split())))
    return time.strftime("%Y-%m-%dT%H:%M:%S") + " " + " ".join(f"{k}={v}" for k, v in fields)


class Progress:
    """Shows ``views()`` (a list of ``launch.reconcile.RunView``) while a local pool trains.

    ``table(views)`` renders the table (the same one `status` prints). ``live`` forces the
    form (tests); by default it is a live table iff stdout is a terminal.
    """

    def __init__(
        self,
        views: Callable[[], Sequence[Any]],
        table: Callable[[Sequence[Any]], Any],
        *,
        live: bool | None = None,
        interval_s: float = PLAIN_INTERVAL_S,
        console: Any = None,
    ) -> None:
        self.views = views
        self.table = table
        self.console = console or make_console()
        self.is_live = is_terminal(self.console.file) if live is None else live
        self.interval_s = interval_s
        self._live: Any = None
        self._last: dict[str, tuple[str, Any, float]] = {}  # run -> (state, step, time printed)

    def start(self) -> None:
        if self.is_live:
            from rich.live import Live

            self._live = Live(
                self.table(self.views()),
                console=self.console,
                refresh_per_second=2,
                transient=True,  # the final table is printed whole by stop()
            )
            self._live.start()
        else:
            self.update()

    def update(self) -> None:
        views = self.views()
        if self._live is not None:
            self._live.update(self.table(views))
            return
        now = time.monotonic()
        out = self.console.file
        for v in views:
            before = self._last.get(v.run_id)
            changed = before is None or before[0] != v.state
            moved = before is not None and before[1] != v.step
            if changed or (moved and now - before[2] >= self.interval_s):
                out.write(plain_line(v) + "\n")
                self._last[v.run_id] = (v.state, v.step, now)
        out.flush()

    def stop(self, final: bool = True) -> None:
        """End the live display (if any) and, when ``final``, print the last table whole."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        elif final:
            self.update()  # the last state changes as lines, before the summary table
        if final:
            print_whole(self.console, self.table(self.views()))
