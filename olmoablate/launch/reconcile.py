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
from typing import Any

from olmoablate.contract.layout import ResultsDir
from olmoablate.contract.runfiles import RunStatus
from olmoablate.contract.runstates import RunState
from olmoablate.errors import UserError
from olmoablate.launch import slurm as sl
from olmoablate.launch.ledger import JobRecord, Ledger
from olmoablate.launch.procid import is_same_process
from olmoablate.launch.reasons import reason_for, requeued_reason
from olmoablate.launch.runstate import own_status
from olmoablate.store.owner import owner_problem


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


def local_job_alive(job: JobRecord) -> bool:
    """Whether the local job still runs: same host, and its pid is still the process the
    launcher started (start time, boot and command line, launch/procid.py), not a reused pid."""
    if job.host and job.host != socket.gethostname():
        return False  # another machine's job: we cannot see it; treat as ended
    try:
        return is_same_process(int(job.job_id), job.identity)
    except ValueError:
        return False


def _eta(own: RunStatus, total_tokens: int) -> float | None:
    if not own.tokens_per_s or own.tokens is None or not total_tokens:
        return None
    return max(0.0, (total_tokens - own.tokens) / own.tokens_per_s)


def reconcile(
    results: ResultsDir,
    ledger: Ledger,
    *,
    sacct_max_age_s: float = 10.0,
    require_scheduler: bool = False,
    follow_reuse: bool = True,
) -> dict[str, RunView]:
    """Current state of every run of the plan (see the module docstring for the rules).

    A run this spec reuses from another spec of the store (``ResultsDir.run``) has that run's
    state, with the reason saying where it is (``follow_reuse``: one level, never a loop), while
    that run is still the identity this plan expects; otherwise it is ``missing`` (trained here
    by the next `submit`) and the reason says what moved (`olmoablate.store.owner`)."""
    runs = results.plan.runs_by_id
    records = {rid: ledger.record(rid) for rid in runs}
    slurm_jobs = {
        rid: rec.last_job
        for rid, rec in records.items()
        if rec is not None and rec.last_job is not None and rec.last_job.executor == "slurm"
    }
    slurm_ids = [job.job_id for job in slurm_jobs.values()]
    live = sl.squeue_states(slurm_ids) if slurm_ids else {}
    if live is None and require_scheduler:
        raise UserError("cannot reach the Slurm controller (squeue failed); is the cluster up?")
    acct = sl.sacct_states(results, slurm_ids, max_age_s=sacct_max_age_s) if slurm_ids else {}
    views: dict[str, RunView] = {}
    for rid, run in runs.items():
        status = own_status(results.run(rid))
        rec = records[rid]
        job = rec.last_job if rec is not None else None
        view = RunView(
            run_id=rid,
            group_id=run.group_id,
            state=RunState.MISSING,
            executor=rec.executor if rec is not None else None,
            job_id=job.job_id if job is not None else None,
            attempts=rec.attempts if rec is not None else 0,
            step=status.step,
            total_steps=status.total_steps or run.steps,
            tokens=status.tokens,
            total_tokens=run.tokens,
            last_loss=status.last_loss,
            tokens_per_s=status.tokens_per_s,
            eta_s=_eta(status, run.tokens),
        )
        views[rid] = view
        own = status.state
        step, total = status.step, view.total_steps
        reached_end = step is not None and isinstance(total, int) and total > 0 and step >= total
        ledger_state = rec.state if rec is not None else None
        cancelled = ledger_state == RunState.CANCELLED

        # Is a job for this run alive right now?
        sched: str | None = None
        if job is not None and job.executor == "slurm":
            jid = job.job_id
            if live and jid in live:
                view.scheduler_state = live[jid]
                sched = sl.map_slurm_state(live[jid])
            elif acct and jid in acct:
                view.scheduler_state = acct[jid].get("State")
                sched = sl.map_slurm_state(view.scheduler_state)
            elif live is not None:
                sched = "ended"  # the controller no longer has it and accounting forgot it
            # else: nobody to ask; fall back to status.json below
        elif job is not None and job.executor == "local":
            sched = RunState.RUNNING if local_job_alive(job) else "ended"
            view.scheduler_state = "alive" if sched == RunState.RUNNING else "exited"
        elif rec is not None and ledger_state == RunState.QUEUED:
            owner = rec.owner_pid
            alive = owner and (
                is_same_process(owner, rec.owner_identity)
                if rec.owner_identity
                else pid_alive(owner)
            )
            sched = RunState.QUEUED if alive else "ended"

        live_now = sched in (RunState.PENDING, RunState.RUNNING, RunState.QUEUED)
        if own == RunState.COMPLETED or (
            reached_end and not live_now and own not in (RunState.DIVERGED, RunState.FAILED)
        ):
            # The step count decides completion, but only once the job has let go of the run:
            # the last step is logged before metrics are flushed and the final status written.
            view.state = RunState.COMPLETED
        elif own == RunState.DIVERGED:
            view.state = RunState.DIVERGED
        elif live_now:
            view.state = RunState.CANCELLING if cancelled else sched
            if sched == RunState.RUNNING and own == RunState.PENDING:
                view.state = RunState.RUNNING
        elif cancelled or own == RunState.CANCELLED or sched == RunState.CANCELLED:
            view.state = RunState.CANCELLED
        elif own == RunState.FAILED or sched == RunState.FAILED or ledger_state == RunState.FAILED:
            view.state = RunState.FAILED
        elif rec is not None:
            # The job ended (or nobody can tell us about it) before the run reached its last step:
            # it was interrupted and can resume from its checkpoint.
            view.state = RunState.INTERRUPTED if sched is not None or own else RunState.UNKNOWN
        elif status.present:
            view.state = RunState.INTERRUPTED  # trained before, without a ledger (e.g. ledger moved)
        sacct = acct.get(slurm_jobs[rid].job_id) if acct and rid in slurm_jobs else None
        reason = rec.reason if rec is not None else None
        view.reason = reason_for(results, rid, view.state, status, sacct, reason)
        if view.reason is None and view.state == RunState.PENDING:
            view.reason = requeued_reason(results, rid, status)
        if view.reason is None and status.recovery:
            view.reason = status.recovery  # e.g. a completed run that skipped a broken checkpoint
    if follow_reuse:
        _reused_views(results, views, sacct_max_age_s)
    return views


def _reused_views(results: ResultsDir, views: dict[str, RunView], sacct_max_age_s: float) -> None:
    owners: dict[str, dict[str, RunView]] = {}
    plans: dict[str, Any] = {}  # the owners' plans, loaded once per view
    for rid, view in views.items():
        where = results.run(rid).reused_from
        if where is None:
            continue
        spec, _, owner_rid = where.partition("/runs/")
        if spec not in owners:
            owner = ResultsDir(results.store / spec)
            try:
                owners[spec] = reconcile(
                    owner, Ledger.read(owner), sacct_max_age_s=sacct_max_age_s, follow_reuse=False
                )
            except UserError:
                owners[spec] = {}
        got = owners[spec].get(owner_rid)
        note = f"reused from {results.store / where}"
        if got is None:
            view.state, view.reason = RunState.MISSING, f"{note}: that run is not in its plan"
            continue
        mine = results.plan.identity.runs.get(rid) if results.plan.identity is not None else None
        moved = owner_problem(results.store, where, mine, plans) if mine is not None else None
        if moved is not None:  # not this run any more: `submit` trains it here
            views[rid] = RunView(
                run_id=rid,
                group_id=view.group_id,
                state=RunState.MISSING,
                total_steps=results.plan.run(rid).steps,
                total_tokens=view.total_tokens,
                reason=f"{note}, but {moved}",
            )
            continue
        views[rid] = dataclasses.replace(
            got,
            run_id=rid,
            group_id=view.group_id,
            reason=f"{note}" + (f"; {got.reason}" if got.reason else ""),
        )
