"""`submit --executor local`: the process pool that trains runs on this machine.

At most ``parallel`` submitit local jobs run at a time, each in its own session and with its own
GPUs (launch/devices.py), while a progress table shows them. Ctrl-C is turned into a checkpoint
of every run (SIGTERM, which the training job answers at a step boundary), never a kill, so every
run stays resumable. Which runs to start is decided before, in launch/submit.py.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from olmoablate.contract.layout import ResultsDir
from olmoablate.contract.plan import RunEntry
from olmoablate.contract.runstates import DONE_STATES, TERMINAL_STATES, RunState
from olmoablate.launch import slurm as sl
from olmoablate.launch.devices import local_slot_devices, visible_gpus
from olmoablate.launch.ledger import Ledger
from olmoablate.launch.procid import identity
from olmoablate.launch.reconcile import RunView, reconcile
from olmoablate.launch.runstate import JobTarget, mark_status, own_status
from olmoablate.launch.view import status_table

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
        #: The job's GPUs (`olmoablate.launch.devices.local_slot_devices`); "" = none.
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
    """The submitit local executor for one plan run, parameters from the plan only."""
    ex = _local_executor_class()(folder=folder, max_num_timeout=run.slurm.max_num_timeout)
    ex.update_parameters(
        timeout_min=LOCAL_TIMEOUT_MIN,
        tasks_per_node=sl.tasks_per_node(run.topology),
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
    """Runs at most `parallel` local submitit jobs at a time, with a live progress table."""

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
        # GPU slots: each concurrent job trains on its own GPUs (launch/devices.py).
        self.gpus = visible_gpus()
        self.slots: dict[str, int] = {}

    def _start(self, rid: str) -> None:
        from olmoablate.launch.job import TrainRun

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
        reason = None
        try:
            job.result()
        except Exception as err:  # the job raised: keep the exception line as the reason
            reason = exception_line(str(err)) or type(err).__name__
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
                    mark_status(path, state=RunState.FAILED, reason=reason)
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
                mark_status(
                    self.results.run(rid).status,
                    state=RunState.CANCELLED,
                    reason="interrupted by Ctrl-C",
                )

    def run(self, progress: bool = True) -> list[tuple[str, str]]:
        """Train every run of the pool; returns (run_id, job_id) of each job started."""
        shown = None
        if progress:  # live table in a terminal, plain lines in a log (launch/progress.py)
            from olmoablate.launch.progress import Progress

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
