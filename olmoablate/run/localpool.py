"""`submit --executor local`: the process pool that trains runs on this machine.

At most ``parallel`` submitit local jobs run at a time, each in its own session and with its own
GPUs (:mod:`olmoablate.run.slurm`), while a progress table shows them. Ctrl-C is turned into a checkpoint
of every run (SIGTERM, which the training job answers at a step boundary), never a kill, so every
run stays resumable. Which runs to start is decided before, in :mod:`olmoablate.run.resume`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from olmoablate.io import is_terminal, make_console, print_whole
from olmoablate.plan.layout import ResultsDir
from olmoablate.plan.names import (
    ACTIVE_STATES,
    DONE_STATES,
    ENDED_STATES,
    STOPPED_STATES,
    TERMINAL_STATES,
    RunState,
)
from olmoablate.plan.planfile import RunEntry
from olmoablate.run import slurm as sl
from olmoablate.run.files import RunStatus
from olmoablate.run.slurm import local_slot_devices, visible_gpus
from olmoablate.run.state import (
    Ledger,
    RunView,
    identity,
    own_status,
    reconcile,
    trainer_holder,
    wait_for_trainer,
)
from olmoablate.run.task import JobTarget, TrainRun

# -- How runs look to a person: the `status` table, its JSON form and the number formats the
# progress lines share with it.


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


def _num(v: Any, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, int | float) and not isinstance(v, bool) else "-"


def _cells(view: RunView) -> dict[str, str]:
    """One run's columns, as the `status` table and the plain progress lines show them."""
    return {
        "run": view.run_id,
        "state": view.state,
        "step": f"{view.step if view.step is not None else '-'}/{view.total_steps or '-'}",
        "tokens": fmt_tokens(view.tokens),
        "loss": _num(view.last_loss, ".4f"),
        "tok/s": _num(view.tokens_per_s, ",.0f"),
        "ETA": fmt_eta(view.eta_s) if view.state in ACTIVE_STATES else "-",
        "job": view.job_id or "-",
        "executor": view.executor or "-",
    }


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
        cells = _cells(v)
        if style := STATE_STYLE.get(v.state):
            cells["state"] = f"[{style}]{v.state}[/]"
        table.add_row(*cells.values())
    return table


def views_json(views: list[RunView]) -> str:
    """`status --json`: one object per run, every RunView field."""
    return json.dumps([v.as_dict() for v in views], indent=2)


# -- Progress of `submit --executor local`: a live table in a terminal; anywhere else (a Slurm log,
# CI, ``| tee``, where a live table prints cut frames or escape codes) one plain ``key=value`` line
# per run whose state changed or whose step moved, at most every ``interval_s``; the last table
# whole in both cases.


#: Seconds between two plain progress lines of the same run while only its step moves.
PLAIN_INTERVAL_S = 30.0


def plain_line(view: RunView) -> str:
    """One run as a single ``key=value`` line: whole values, no colour, no padding."""
    fields = _cells(view)
    if view.reason and view.state in STOPPED_STATES:
        fields["reason"] = " ".join(view.reason.split())
    line = " ".join(f"{k}={v}" for k, v in fields.items())
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}"


class Progress:
    """Shows ``views()`` while a local pool trains, through ``table(views)`` (the table `status`
    prints). ``live`` forces the form (tests); by default it is live iff stdout is a terminal."""

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
        """End the live display and, when ``final``, print the last table whole."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        elif final:
            self.update()  # the last state changes as lines, before the summary table
        if final:
            print_whole(self.console, self.table(self.views()))


#: Wall-clock limit of a local job: none in practice (submitit's own default is 2 min).
LOCAL_TIMEOUT_MIN = 7 * 24 * 60


def _local_executor_class() -> type:
    """submitit's LocalExecutor, starting each job in its own session.

    Why: a terminal Ctrl-C goes to the whole foreground process group. submitit's local
    controller would take it as KeyboardInterrupt and SIGKILL the training a second later, before
    OLMo-core can checkpoint. In its own session only our `submit` process sees Ctrl-C; it then
    sends SIGTERM, which the controller forwards and the training job turns into a checkpoint.
    """
    from submitit.local import local

    class SessionLocalExecutor(local.LocalExecutor):
        #: The job's GPUs (`olmoablate.run.slurm.local_slot_devices`); "" = none.
        cuda_devices: str = ""

        def _submit_command(self, command: str) -> local.LocalJob[Any]:
            # Every parameter below is set by `local_executor` from the plan: no fallbacks here.
            ntasks = int(self.parameters["tasks_per_node"])
            env = dict(os.environ)
            env.update(
                SUBMITIT_LOCAL_NTASKS=str(ntasks),
                SUBMITIT_LOCAL_COMMAND=command,
                SUBMITIT_LOCAL_TIMEOUT_S=str(int(60 * self.parameters["timeout_min"])),
                SUBMITIT_LOCAL_SIGNAL_DELAY_S=str(int(self.parameters["signal_delay_s"])),
                SUBMITIT_LOCAL_NODEID="0",
                SUBMITIT_LOCAL_JOB_NUM_NODES="1",
                SUBMITIT_STDERR_TO_STDOUT="",
                SUBMITIT_EXECUTOR="local",
                CUDA_VISIBLE_DEVICES=self.cuda_devices,
                SUBMITIT_LOCAL_WITH_SHELL="",
            )
            process = subprocess.Popen(
                [sys.executable, "-m", "submitit.local._local", str(self.folder)],
                env=env,
                start_new_session=True,
            )
            return local.LocalJob(
                folder=self.folder,
                job_id=str(process.pid),
                process=process,
                tasks=list(range(ntasks)),
            )

    return SessionLocalExecutor


def local_executor(folder: Path, run: RunEntry) -> Any:
    """The submitit local executor of one plan run, every parameter from the plan."""
    ex = _local_executor_class()(folder=folder, max_num_timeout=run.slurm.max_num_timeout)
    ex.update_parameters(
        timeout_min=LOCAL_TIMEOUT_MIN,
        tasks_per_node=run.topology.ranks_per_node,
        signal_delay_s=run.slurm.signal_delay_s,
    )
    return ex


def exception_line(text: str) -> str | None:
    """The last ``SomeError: message`` line of a traceback (submitit appends log paths after it)."""
    found = None
    for line in text.splitlines():
        m = re.match(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Interrupt)):?\s*(.*)$", line)
        if m:
            found = f"{m.group(1)}: {m.group(2)}".strip().rstrip(":")[:300]
    return found


class LocalPool:
    """Runs at most `parallel` local submitit jobs at a time."""

    def __init__(
        self, results: ResultsDir, run_ids: list[str], parallel: int, target: JobTarget
    ) -> None:
        self.results = results
        self.queue = list(run_ids)
        self.all = list(run_ids)
        self.parallel = parallel
        self.target = target
        self.active: dict[str, Any] = {}
        self.submitted: list[tuple[str, str]] = []
        self.runs = results.plan.runs_by_id
        self.gpus = visible_gpus()
        self.slots: dict[str, int] = {}  # each concurrent job's GPU slot

    def _start(self, rid: str) -> None:
        run = self.runs[rid]
        with Ledger.locked(self.results) as ledger:
            rec = ledger.record(rid)
            if rec is None or rec.state != RunState.QUEUED:
                return  # cancelled while waiting in our queue
            ex = local_executor(self.results.submitit.resolve(), run)
            gpus = run.topology.gpus_per_node
            slot = min(set(range(self.parallel)) - set(self.slots.values()))
            ex.cuda_devices = local_slot_devices(self.gpus, gpus, slot)
            # submitit's local jobs inherit this process's environment at start-up
            for key, value in sl.job_env(run).items():
                os.environ.setdefault(key, value)
            fn = TrainRun(
                str(self.results.plan_path.resolve()),
                rid,
                str(self.results.root.resolve()),
                self.target,
            )
            job = ex.submit(fn)
            ledger.record_submission(
                rid,
                job.job_id,
                "local",
                RunState.RUNNING,
                host=socket.gethostname(),
                identity=identity(int(job.job_id)),
            )
        self.active[rid] = job
        self.slots[rid] = slot
        self.submitted.append((rid, job.job_id))

    def _finish(self, rid: str, job: Any) -> None:
        rdir = self.results.run(rid)
        code = job._process.returncode if job._process is not None else None
        if code is not None and code < 0:
            # The job's controller was killed: its trainer stops at a checkpoint by itself
            # (task.die_with_controller) and says how it ended; wait for that word.
            wait_for_trainer(rdir)
        reason = None
        # submitit waits up to 15 s for a result that a slow shared filesystem may not show yet;
        # here the job's processes have exited on this machine: a missing result (a killed job)
        # stays missing, and `submit` would hang that long per killed run.
        job._results_timeout_s = 1
        try:
            job.result()
        except Exception as err:  # the job raised: keep the exception line as the reason
            reason = exception_line(str(err)) or type(err).__name__
        if trainer_holder(rdir) is not None:
            # Another process trains this run (this job was refused: RunBusyError); its state is
            # not this job's to write.
            print(f"{rid}: not trained here: {reason}", file=sys.stderr)
            return
        own = own_status(rdir)
        killed = code is not None and code < 0
        if killed and own.state in ENDED_STATES:
            reason = None  # the trainer's own word (die_with_controller), not the dead controller
        elif reason and own.state not in ENDED_STATES:
            # The training process ended without a final word (kill -9, the OOM killer): say
            # so, not submitit's wrapper of the missing result.
            at = f"at step {own.step}" if own.step else "before training started"
            if killed:
                why = f"was killed ({signal.Signals(-code).name})"
            else:
                why = "lost its training process (killed?)"
            reason = f"its job process {job.job_id} {why} {at}"
        with Ledger.locked(self.results) as ledger:
            view = reconcile(self.results, ledger)[rid]
            state = view.state
            if reason and state not in DONE_STATES and state != RunState.CANCELLED:
                state = RunState.FAILED
            rec = ledger.record(rid)
            if rec is None or rec.state != RunState.CANCELLED or state in DONE_STATES:
                ledger.set_state(rid, state, reason)
            own = own_status(self.results.run(rid))
            if own.state == RunState.FAILED and own.reason:
                reason = own.reason  # the job's own one-line reason beats submitit's wrapper
            elif state == RunState.FAILED and reason:
                path = self.results.run(rid).status
                try:
                    RunStatus.update(path, state=RunState.FAILED, reason=reason)
                except OSError as err:  # e.g. the full disk that failed the run: the ledger has it
                    print(
                        f"warning: {path}: could not record the failure ({err.strerror}); "
                        f"the ledger keeps it: {reason}",
                        file=sys.stderr,
                    )

    def _stop_all(self) -> None:
        """Ctrl-C: ask every active job to checkpoint and stop; leave every run resumable."""
        from rich.console import Console

        console = Console(stderr=True)
        with Ledger.locked(self.results) as ledger:
            for rid in self.all:
                rec = ledger.record(rid)
                if rid in self.active or (rec is not None and rec.state == RunState.QUEUED):
                    self.results.run(rid).cancel_marker.touch()
                    ledger.set_state(rid, RunState.CANCELLED, "interrupted by Ctrl-C")
        for job in self.active.values():
            if job._process is not None:
                job._process.send_signal(signal.SIGTERM)  # controller forwards it to the tasks
        console.print(
            f"[yellow]stopping {len(self.active)} run(s): saving checkpoints "
            "(Ctrl-C again to kill)...[/]"
        )
        try:
            deadline = time.time() + 600
            while time.time() < deadline and any(
                j._process.poll() is None for j in self.active.values()
            ):
                time.sleep(0.2)
        except KeyboardInterrupt:
            for job in self.active.values():
                if job._process is not None and job._process.poll() is None:
                    os.killpg(job._process.pid, signal.SIGKILL)
        for rid in self.all:
            if own_status(self.results.run(rid)).state not in TERMINAL_STATES:
                RunStatus.update(
                    self.results.run(rid).status,
                    state=RunState.CANCELLED,
                    reason="interrupted by Ctrl-C",
                )

    def run(self, progress: bool = True) -> list[tuple[str, str]]:
        """Train every run of the pool; returns (run_id, job_id) of each job started."""
        shown = None
        if progress:  # live table in a terminal, plain lines in a log (:class:`Progress`)
            shown = Progress(self._views, self._table)
            shown.start()
        try:
            while self.queue or self.active:
                while self.queue and len(self.active) < self.parallel:
                    self._start(self.queue.pop(0))
                for rid, job in list(self.active.items()):
                    if job._process is not None and job._process.poll() is not None:
                        self._finish(rid, job)
                        del self.active[rid]
                        self.slots.pop(rid, None)
                if shown is not None:
                    shown.update()
                time.sleep(0.5)
        except KeyboardInterrupt:
            if shown is not None:
                shown.stop(final=False)
                shown = None
            self._stop_all()
            raise
        finally:
            if shown is not None:
                shown.stop()
        return self.submitted

    def _views(self) -> list[RunView]:
        views = reconcile(self.results, Ledger.read(self.results))
        return [views[r] for r in self.all]

    def _table(self, views: list[RunView] | None = None) -> Any:
        return status_table(
            self._views() if views is None else views, title="olmoablate submit --executor local"
        )
