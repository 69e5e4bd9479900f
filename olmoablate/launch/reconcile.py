"""The state of every run: what the scheduler says, reconciled with what the run itself wrote.

State of a run = what the scheduler says (squeue for live jobs, sacct for ended ones, the pid for
local jobs) reconciled with the run's own status.json. The run's own word wins for
`completed`/`diverged` (completion is decided by the step count, not by an exit code); the
scheduler wins for liveness. `submit`, `cancel` and `status` all decide from these views, so the
rules live here once. No torch, no submitit: `status` must be fast on a login node.
"""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path
from typing import Any

from olmoablate.errors import UserError
from olmoablate.launch import slurm as sl
from olmoablate.launch.ledger import Ledger
from olmoablate.launch.reasons import reason_for
from olmoablate.launch.resolve import read_status, runs_by_id

#: A job for the run is queued (local queue), pending or running, or a cancel is under way.
LIVE_STATES = frozenset({"queued", "pending", "running", "cancelling"})
#: Final good-or-bad-but-final states: never resubmitted without --redo.
DONE_STATES = frozenset({"completed", "diverged"})


@dataclasses.dataclass
class RunView:
    """One line of `olmoablate status`."""

    run_id: str
    group_id: str
    state: str
    executor: str | None = None
    job_id: str | None = None
    attempts: int = 0
    step: int | None = None
    total_steps: int | None = None
    tokens: int | None = None
    total_tokens: int | None = None
    last_loss: float | None = None
    tokens_per_s: float | None = None
    eta_s: float | None = None
    scheduler_state: str | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def pid_alive(pid: int) -> bool:
    """True if pid runs and is not a zombie (PID 1 may reap late)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _local_job_alive(job: dict[str, Any]) -> bool:
    if job.get("host") and job["host"] != socket.gethostname():
        return False  # another machine's job: we cannot see it; treat as ended
    try:
        return pid_alive(int(job["job_id"]))
    except (TypeError, ValueError):
        return False


def _eta(status: dict[str, Any], total_tokens: int | None) -> float | None:
    tps = status.get("tokens_per_s")
    tokens = status.get("tokens")
    if not tps or tokens is None or not total_tokens:
        return None
    return max(0.0, (total_tokens - float(tokens)) / float(tps))


def reconcile(
    results_dir: Path,
    plan: dict[str, Any],
    ledger: Ledger,
    *,
    sacct_max_age_s: float = 10.0,
    require_scheduler: bool = False,
) -> dict[str, RunView]:
    """Current state of every run of the plan (see the module docstring for the rules)."""
    runs = runs_by_id(plan)
    slurm_ids = [
        j["job_id"]
        for rid in runs
        if (j := ledger.last_job(rid)) is not None and j.get("executor") == "slurm"
    ]
    live = sl.squeue_states(slurm_ids) if slurm_ids else {}
    if live is None and require_scheduler:
        raise UserError("cannot reach the Slurm controller (squeue failed); is the cluster up?")
    acct = sl.sacct_states(results_dir, slurm_ids, max_age_s=sacct_max_age_s) if slurm_ids else {}
    views: dict[str, RunView] = {}
    for rid, run in runs.items():
        training = run.get("training") or {}
        total_steps = run.get("steps") or training.get("steps")
        total_tokens = run.get("tokens") or training.get("tokens")
        status = read_status(results_dir, rid) or {}
        entry = ledger.entry(rid) or {}
        job = ledger.last_job(rid)
        view = RunView(
            run_id=rid,
            group_id=str(run.get("group_id", "")),
            state="missing",
            executor=entry.get("executor"),
            job_id=job["job_id"] if job else None,
            attempts=int(entry.get("attempts", 0)),
            step=status.get("step"),
            total_steps=status.get("total_steps") or total_steps,
            tokens=status.get("tokens"),
            total_tokens=total_tokens,
            last_loss=status.get("last_loss"),
            tokens_per_s=status.get("tokens_per_s"),
            eta_s=_eta(status, total_tokens),
        )
        views[rid] = view
        own = status.get("state")
        step, total = status.get("step"), view.total_steps
        reached_end = (
            isinstance(step, int) and isinstance(total, int) and total > 0 and step >= total
        )
        ledger_state = entry.get("state")
        cancelled = ledger_state == "cancelled"

        # Is a job for this run alive right now?
        sched: str | None = None
        if job is not None and job.get("executor") == "slurm":
            jid = job["job_id"]
            if live and jid in live:
                view.scheduler_state = live[jid]
                sched = sl.map_slurm_state(live[jid])
            elif acct and jid in acct:
                view.scheduler_state = acct[jid].get("State")
                sched = sl.map_slurm_state(view.scheduler_state)
            elif live is not None:
                sched = "ended"  # the controller no longer has it and accounting forgot it
            # else: nobody to ask; fall back to status.json below
        elif job is not None and job.get("executor") == "local":
            sched = "running" if _local_job_alive(job) else "ended"
            view.scheduler_state = "alive" if sched == "running" else "exited"
        elif ledger_state == "queued":
            owner = entry.get("owner_pid")
            sched = "queued" if owner and pid_alive(int(owner)) else "ended"

        live_now = sched in ("pending", "running", "queued")
        if own == "completed" or (
            reached_end and not live_now and own not in ("diverged", "failed")
        ):
            # The step count decides completion, but only once the job has let go of the run:
            # the last step is logged before metrics are flushed and the final status written.
            view.state = "completed"
        elif own == "diverged":
            view.state = "diverged"
        elif live_now:
            view.state = "cancelling" if cancelled else sched
            if sched == "running" and own == "pending":
                view.state = "running"
        elif cancelled or own == "cancelled" or sched == "cancelled":
            view.state = "cancelled"
        elif own == "failed" or sched == "failed" or ledger_state == "failed":
            view.state = "failed"
        elif entry:
            # The job ended (or nobody can tell us about it) before the run reached its last step:
            # it was interrupted and can resume from its checkpoint.
            view.state = "interrupted" if sched is not None or own else "unknown"
        elif status:
            view.state = "interrupted"  # trained before, without a ledger (e.g. ledger moved)
        record = (
            acct.get(job["job_id"]) if acct and job and job.get("executor") == "slurm" else None
        )
        view.reason = reason_for(results_dir, rid, view.state, status, record, entry.get("reason"))
    return views
