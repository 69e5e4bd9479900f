"""`cancel`: stop live runs so that each stays resumable.

Every cancel first writes the run's cancel marker (``runs/<id>/.cancel-requested``), so the job
can tell a user's stop (end ``cancelled``, never requeued) from a preemption (requeue); then
running jobs get SIGTERM (checkpoint at the next step boundary, then exit) and pending ones leave
the queue. The table of signals and outcomes is in docs/slurm.md.
"""

from __future__ import annotations

import os
import signal

from olmoablate.contract.layout import ResultsDir
from olmoablate.contract.runstates import LIVE_STATES, RunState
from olmoablate.launch import slurm as sl
from olmoablate.launch.ledger import Ledger
from olmoablate.launch.reconcile import local_job_alive, reconcile
from olmoablate.launch.runstate import mark_status


def cancel(
    results: ResultsDir,
    run_ids: list[str] | None = None,
    force: bool = False,
    reason: str = "cancelled by user",
) -> list[tuple[str, str]]:
    """Stop runs of ``results.plan``, leaving each resumable: running jobs get SIGTERM
    (checkpoint, then exit); pending ones are removed from the queue. Returns (run_id, what was
    done)."""
    actions: list[tuple[str, str]] = []
    with Ledger.locked(results) as ledger:
        views = reconcile(results, ledger, sacct_max_age_s=0)
        for rid, view in views.items():
            if run_ids and rid not in run_ids:
                continue
            if view.state not in LIVE_STATES or view.state == RunState.CANCELLING and not force:
                if run_ids:
                    actions.append((rid, f"nothing to cancel ({view.state})"))
                continue
            rdir = results.run(rid)
            if rdir.reused_from is not None:  # another spec's run: never stopped from here
                if run_ids:
                    actions.append((rid, f"reused from {rdir.reused_from}: cancel it there"))
                continue
            rdir.path.mkdir(parents=True, exist_ok=True)
            rdir.cancel_marker.touch()
            rec = ledger.record(rid)
            job = rec.last_job if rec is not None else None
            if view.state == RunState.QUEUED or job is None:
                actions.append((rid, "removed from the local queue"))
                mark_status(rdir.status, state=RunState.CANCELLED, reason=reason)
            elif job.executor == "slurm":
                started = view.state in (RunState.RUNNING, RunState.CANCELLING)
                sl.scancel(job.job_id, graceful=started and not force)
                if started and not force:
                    actions.append((rid, f"SIGTERM to job {job.job_id} (checkpoint, then exit)"))
                else:
                    actions.append((rid, f"scancel {job.job_id}"))
                    if not started:
                        mark_status(rdir.status, state=RunState.CANCELLED, reason=reason)
            else:
                pid = int(job.job_id)
                try:
                    # Checked again right before the signal: the pid must still be our job.
                    if not local_job_alive(job):
                        raise ProcessLookupError(pid)
                    os.kill(pid, signal.SIGKILL if force else signal.SIGTERM)
                    actions.append((rid, f"SIGTERM to local job {pid} (checkpoint, then exit)"))
                except ProcessLookupError:
                    actions.append((rid, f"local job {pid} already gone"))
            ledger.set_state(rid, RunState.CANCELLED, reason)
        sl.invalidate_sacct_cache(results)
    return actions
