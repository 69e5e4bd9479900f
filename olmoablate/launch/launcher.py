"""Submit, reconcile, cancel: the launcher's library API (the Typer commands are thin wrappers).

State of a run = what the scheduler says (squeue for live jobs, sacct for ended ones, the pid for
local jobs) reconciled with what the run itself wrote (status.json). The run's own word wins for
`completed`/`diverged` (completion is decided by the step count, not by an exit code); the
scheduler wins for liveness. `submit` sends only runs that are missing, cancelled or interrupted
(and failed ones with `retry_failed`), all under the ledger lock, so concurrent `submit` calls
never send a run twice. No torch here: `status` must be fast on a login node.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from olmoablate.errors import UserError
from olmoablate.io import canonical_json
from olmoablate.launch import slurm as sl
from olmoablate.launch.devices import check_local_capacity, local_slot_devices, visible_gpus
from olmoablate.launch.ledger import Ledger, now_iso
from olmoablate.launch.resolve import PLAN_FILE, read_status, run_dir, runs_by_id
from olmoablate.launch.runstate import CANCEL_MARKER, DEFAULT_TARGET, mark_status

EXECUTORS = ("local", "slurm")
LIVE_STATES = frozenset({"queued", "pending", "running", "cancelling"})
DONE_STATES = frozenset({"completed", "diverged"})
JobTarget = str | Callable[[str, str], dict[str, Any]]


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


# ---------------------------------------------------------------------------------------------
# reconcile


def _pid_alive(pid: int) -> bool:
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
        return _pid_alive(int(job["job_id"]))
    except (TypeError, ValueError):
        return False


def squeue_states(job_ids: list[str]) -> dict[str, str] | None:
    """Live states of our jobs from the controller in one call; None if it cannot be asked."""
    if not job_ids or shutil.which("squeue") is None:
        return {} if job_ids == [] else None
    try:
        proc = subprocess.run(
            ["squeue", "-h", "-a", "-r", "-o", "%i|%T"],
            capture_output=True,
            text=True,
            timeout=sl.CMD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        return None
    wanted = set(job_ids)
    out: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        jid, _, state = line.strip().partition("|")
        for one in sl._expand_array_ids(jid):
            if one in wanted:
                out[one] = state
    return out


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
    live = squeue_states(slurm_ids) if slurm_ids else {}
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
            reason=status.get("reason") or entry.get("reason"),
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
            sched = "queued" if owner and _pid_alive(int(owner)) else "ended"

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
    return views


# ---------------------------------------------------------------------------------------------
# submit


@dataclasses.dataclass
class SubmitResult:
    submitted: list[tuple[str, str]]  # (run_id, job_id)
    skipped: list[tuple[str, str]]  # (run_id, reason)
    rendered: list[Path]
    test_only: list[tuple[str, bool, str]]  # (group_id, ok, slurm's message)


def decide(
    views: dict[str, RunView], *, retry_failed: bool, redo: list[str], only: list[str] | None
) -> tuple[list[str], list[tuple[str, str]]]:
    """Which runs to send now, and why the others are not sent."""
    send: list[str] = []
    skip: list[tuple[str, str]] = []
    for rid, view in views.items():
        if only is not None and rid not in only:
            continue
        if rid in redo:
            if view.state in LIVE_STATES:
                raise UserError(f"--redo {rid}: run is {view.state}; `olmoablate cancel` it first")
            send.append(rid)
        elif view.state in DONE_STATES or view.state in LIVE_STATES:
            skip.append((rid, view.state))
        elif view.state == "failed" and not retry_failed:
            skip.append((rid, "failed (use --retry-failed)"))
        else:
            send.append(rid)
    return send, skip


def _prepare_run_dir(results_dir: Path, run_id: str, fresh: bool) -> None:
    """Clear a stale cancel request; for --redo move the old run directory aside (never delete)."""
    rdir = run_dir(results_dir, run_id)
    if fresh and rdir.exists():
        dest = results_dir / "runs" / ".superseded" / f"{run_id}-{time.strftime('%Y%m%dT%H%M%S')}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        rdir.rename(dest)
    rdir.mkdir(parents=True, exist_ok=True)
    (rdir / CANCEL_MARKER).unlink(missing_ok=True)
    mark_status(rdir / "status.json", run_id=run_id, state="pending", reason=None)


def group_batches(
    plan: dict[str, Any], run_ids: list[str], spec_name: str
) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """Runs grouped by group_id (one job array per group), split further only if sbatch
    parameters differ inside a group (they should not: both arms share size and topology)."""
    runs = runs_by_id(plan)
    batches: dict[tuple[str, str], tuple[str, dict[str, Any], list[dict[str, Any]]]] = {}
    for rid in run_ids:
        run = runs[rid]
        gid = str(run.get("group_id") or rid)
        params = sl.sbatch_parameters(run, job_name=f"olmoablate-{spec_name}-{gid}")
        key = (gid, canonical_json(params))
        if key not in batches:
            batches[key] = (gid, params, [])
        batches[key][2].append(run)
    out = list(batches.values())
    seen: dict[str, int] = {}
    for i, (gid, params, runs_) in enumerate(out):
        seen[gid] = seen.get(gid, 0) + 1
        if seen[gid] > 1:
            out[i] = (f"{gid}.{seen[gid]}", params, runs_)
    return out


def render_all(results_dir: Path, plan: dict[str, Any], run_ids: list[str]) -> list[Path]:
    """Write results/<spec>/slurm/<group_id>.sbatch for every batch (no cluster needed)."""
    from olmoablate.io import write_text_atomic

    spec_name = str(plan.get("spec_name") or results_dir.name)
    folder = (results_dir / "submitit").resolve()
    paths = []
    for gid, params, runs in group_batches(plan, run_ids, spec_name):
        path = results_dir / "slurm" / f"{gid}.sbatch"
        write_text_atomic(path, sl.render_sbatch(params, folder, len(runs)))
        paths.append(path)
    return paths


def _check_spec(ledger: Ledger, plan: dict[str, Any], redo: list[str]) -> None:
    sha = plan.get("spec_sha256")
    old = ledger.data.get("spec_sha256")
    if old and sha and old != sha and ledger.runs:
        if not redo:
            raise UserError(
                f"plan.json spec_sha256 {sha[:12]} differs from the ledger's {old[:12]} (the spec "
                "changed since the last submit); name the runs to redo with --redo RUN_ID"
            )
    ledger.data["spec_sha256"] = sha or old
    ledger.data["spec_name"] = plan.get("spec_name")


def submit(
    results_dir: Path,
    plan: dict[str, Any],
    executor: str,
    *,
    retry_failed: bool = False,
    redo: list[str] | None = None,
    only: list[str] | None = None,
    dry_run: bool = False,
    test_only: bool = False,
    parallel: int = 1,
    target: JobTarget = DEFAULT_TARGET,
    progress: bool = True,
) -> SubmitResult:
    """Send the runs that need sending. Local: blocks until they finish (or Ctrl-C)."""
    if executor not in EXECUTORS:
        raise UserError(f"--executor {executor}: allowed values are {', '.join(EXECUTORS)}")
    redo = list(redo or [])
    if dry_run or test_only:
        ledger = Ledger.read(results_dir)
        ids = list(runs_by_id(plan))
        rendered = render_all(results_dir, plan, ids)
        tests: list[tuple[str, bool, str]] = []
        if test_only:
            if not sl.have_slurm():
                raise UserError("--test-only needs a reachable Slurm cluster (sbatch not found)")
            for path in rendered:
                ok, msg = sl.test_only(path)
                tests.append((path.stem, ok, msg))
        views = reconcile(results_dir, plan, ledger)
        send, skip = decide(views, retry_failed=retry_failed, redo=redo, only=only)
        return SubmitResult([(r, "(dry-run)") for r in send], skip, rendered, tests)
    if executor == "slurm":
        if not sl.have_slurm():
            raise UserError(
                "--executor slurm: sbatch/sacct not found; use --executor local or --dry-run"
            )
        return _submit_slurm(results_dir, plan, retry_failed, redo, only, target)
    return _submit_local(results_dir, plan, retry_failed, redo, only, parallel, target, progress)


def _submit_slurm(
    results_dir: Path,
    plan: dict[str, Any],
    retry_failed: bool,
    redo: list[str],
    only: list[str] | None,
    target: JobTarget,
) -> SubmitResult:
    import submitit

    from olmoablate.launch.job import TrainRun

    plan_path = str((results_dir / PLAN_FILE).resolve())
    folder = (results_dir / "submitit").resolve()
    spec_name = str(plan.get("spec_name") or results_dir.name)
    submitted: list[tuple[str, str]] = []
    with Ledger.locked(results_dir) as ledger:
        _check_spec(ledger, plan, redo)
        views = reconcile(results_dir, plan, ledger, sacct_max_age_s=0, require_scheduler=True)
        send, skip = decide(views, retry_failed=retry_failed, redo=redo, only=only)
        for rid in redo:
            ledger.forget(rid)
        rendered = render_all(results_dir, plan, send) if send else []
        for gid, params, runs in group_batches(plan, send, spec_name):
            max_timeout = int((runs[0].get("slurm") or {}).get("max_num_timeout") or 3)
            ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=max_timeout)
            ex.update_parameters(**params)
            for run in runs:
                _prepare_run_dir(results_dir, run["run_id"], fresh=run["run_id"] in redo)
            gpus = int((runs[0].get("topology") or {}).get("gpus_per_node") or 0)
            jobs = []
            try:
                with ex.batch():
                    for run in runs:
                        fn = TrainRun(
                            plan_path, run["run_id"], str(results_dir.resolve()), gpus, target
                        )
                        jobs.append(ex.submit(fn))
            except Exception as err:  # sbatch rejected the script: say so in one line
                ledger.save()
                first = str(err).strip().splitlines()
                raise UserError(
                    f"sbatch rejected group {gid}: {first[-1] if first else err}"
                ) from None
            for run, job in zip(runs, jobs, strict=True):
                ledger.record_submission(run["run_id"], job.job_id, "slurm", "pending")
                submitted.append((run["run_id"], job.job_id))
            # Persist after each array: a failure in the next group must not forget this one.
            ledger.save()
        sl.invalidate_sacct_cache(results_dir)
    return SubmitResult(submitted, skip, rendered, [])


# ---------------------------------------------------------------------------------------------
# local executor


def _local_executor_class() -> type:
    """submitit's LocalExecutor, starting each job in its own session.

    Why: a terminal Ctrl-C goes to the whole foreground process group. submitit's local
    controller would take it as KeyboardInterrupt and SIGKILL the training a second later, before
    OLMo-core can checkpoint. In its own session only our `submit` process sees Ctrl-C; it then
    sends SIGTERM, which the controller forwards and the training job turns into a checkpoint.
    """
    import sys

    from submitit.local import local

    class SessionLocalExecutor(local.LocalExecutor):
        #: The job's GPUs (`olmoablate.launch.devices.local_slot_devices`); "" = none.
        cuda_devices: str = ""

        def _submit_command(self, command: str) -> local.LocalJob[Any]:
            ntasks = self.parameters.get("tasks_per_node", 1)
            env = dict(os.environ)
            env.update(
                SUBMITIT_LOCAL_NTASKS=str(ntasks),
                SUBMITIT_LOCAL_COMMAND=command,
                SUBMITIT_LOCAL_TIMEOUT_S=str(int(60 * self.parameters.get("timeout_min", 2.0))),
                SUBMITIT_LOCAL_SIGNAL_DELAY_S=str(int(self.parameters.get("signal_delay_s", 30))),
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


def _submit_local(
    results_dir: Path,
    plan: dict[str, Any],
    retry_failed: bool,
    redo: list[str],
    only: list[str] | None,
    parallel: int,
    target: JobTarget,
    progress: bool,
) -> SubmitResult:
    if parallel < 1:
        raise UserError(f"--parallel {parallel}: must be at least 1")
    with Ledger.locked(results_dir) as ledger:
        _check_spec(ledger, plan, redo)
        views = reconcile(results_dir, plan, ledger, sacct_max_age_s=0)
        send, skip = decide(views, retry_failed=retry_failed, redo=redo, only=only)
        runs = runs_by_id(plan)
        gpus = visible_gpus()
        for rid in send:  # before anything is marked queued: a run that cannot get its GPUs
            check_local_capacity(gpus, _gpus_of(runs[rid]), parallel)
        for rid in send:
            if rid in redo:
                ledger.forget(rid)
            entry = ledger.runs.setdefault(
                rid, {"executor": "local", "attempts": 0, "job_ids": [], "jobs": []}
            )
            entry.update(
                executor="local",
                state="queued",
                owner_pid=os.getpid(),
                reason=None,
                updated=now_iso(),
            )
            entry["host"] = socket.gethostname()
            _prepare_run_dir(results_dir, rid, fresh=rid in redo)
    if not send:
        return SubmitResult([], skip, [], [])
    # Longest runs first (by planned training FLOPs): with `parallel` slots this keeps the
    # slowest arm from starting last and stretching the whole batch.
    cost = {r["run_id"]: r.get("total_train_flops") or 0 for r in plan["runs"]}
    send = sorted(send, key=lambda rid: -cost.get(rid, 0))
    pool = LocalPool(results_dir, plan, send, parallel, target)
    submitted = pool.run(progress=progress)
    return SubmitResult(submitted, skip, [], [])


def _gpus_of(run: dict[str, Any]) -> int:
    return int((run.get("topology") or {}).get("gpus_per_node") or 0)


class LocalPool:
    """Runs at most `parallel` local submitit jobs at a time, with a live progress table."""

    def __init__(
        self,
        results_dir: Path,
        plan: dict[str, Any],
        run_ids: list[str],
        parallel: int,
        target: JobTarget,
    ) -> None:
        self.results_dir = results_dir
        self.plan = plan
        self.queue = list(run_ids)
        self.all = list(run_ids)
        self.parallel = parallel
        self.target = target
        self.active: dict[str, Any] = {}
        self.submitted: list[tuple[str, str]] = []
        self.runs = runs_by_id(plan)
        # GPU slots: each concurrent job trains on its own GPUs (launch/devices.py).
        self.gpus = visible_gpus()
        self.slots: dict[str, int] = {}

    def _start(self, rid: str) -> None:
        from olmoablate.launch.job import TrainRun

        run = self.runs[rid]
        with Ledger.locked(self.results_dir) as ledger:
            entry = ledger.entry(rid) or {}
            if entry.get("state") != "queued":
                return  # cancelled while waiting in our queue
            ex = _local_executor_class()(
                folder=(self.results_dir / "submitit").resolve(),
                max_num_timeout=int((run.get("slurm") or {}).get("max_num_timeout") or 3),
            )
            ex.update_parameters(
                timeout_min=7
                * 24
                * 60,  # no wall-clock limit locally (submitit's default is 2 min)
                tasks_per_node=sl.tasks_per_node(run),
                signal_delay_s=int((run.get("slurm") or {}).get("signal_delay_s") or 90),
            )
            gpus = _gpus_of(run)
            slot = min(set(range(self.parallel)) - set(self.slots.values()))
            ex.cuda_devices = local_slot_devices(self.gpus, gpus, slot)
            # submitit's local jobs inherit this process's environment at start-up
            for key, value in sl.job_env(run).items():
                os.environ.setdefault(key, value)
            fn = TrainRun(
                str((self.results_dir / PLAN_FILE).resolve()),
                rid,
                str(self.results_dir.resolve()),
                gpus,
                self.target,
            )
            job = ex.submit(fn)
            ledger.record_submission(rid, job.job_id, "local", "running")
            ledger.runs[rid]["jobs"][-1]["host"] = socket.gethostname()
        self.active[rid] = job
        self.slots[rid] = slot
        self.submitted.append((rid, job.job_id))

    def _finish(self, rid: str, job: Any) -> None:
        reason = None
        try:
            job.result()
        except Exception as err:  # the job raised: keep the exception line as the reason
            reason = _exception_line(str(err)) or type(err).__name__
        with Ledger.locked(self.results_dir) as ledger:
            view = reconcile(self.results_dir, self.plan, ledger)[rid]
            state = view.state
            if reason and state not in DONE_STATES and state != "cancelled":
                state = "failed"
            if (ledger.entry(rid) or {}).get("state") != "cancelled" or state in DONE_STATES:
                ledger.set_state(rid, state, reason)
            own = read_status(self.results_dir, rid) or {}
            if own.get("state") == "failed" and own.get("reason"):
                reason = own["reason"]  # the job's own one-line reason beats submitit's wrapper
            if state == "failed" and reason:
                mark_status(
                    run_dir(self.results_dir, rid) / "status.json", state="failed", reason=reason
                )

    def _stop_all(self) -> None:
        """Ctrl-C: ask every active job to checkpoint and stop; leave every run resumable."""
        from rich.console import Console

        console = Console(stderr=True)
        with Ledger.locked(self.results_dir) as ledger:
            for rid in self.all:
                entry = ledger.entry(rid) or {}
                if rid in self.active or entry.get("state") == "queued":
                    (run_dir(self.results_dir, rid) / CANCEL_MARKER).touch()
                    ledger.set_state(rid, "cancelled", "interrupted by Ctrl-C")
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
            status = read_status(self.results_dir, rid) or {}
            if status.get("state") not in ("completed", "diverged", "failed"):
                mark_status(
                    run_dir(self.results_dir, rid) / "status.json",
                    state="cancelled",
                    reason="interrupted by Ctrl-C",
                )

    def run(self, progress: bool = True) -> list[tuple[str, str]]:
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
        views = reconcile(self.results_dir, self.plan, Ledger.read(self.results_dir))
        return [views[r] for r in self.all]

    def _table(self, views: list[RunView] | None = None) -> Any:
        return status_table(
            self._views() if views is None else views, title="olmoablate submit --executor local"
        )


# ---------------------------------------------------------------------------------------------
# cancel


def cancel(
    results_dir: Path, plan: dict[str, Any], run_ids: list[str] | None = None, force: bool = False
) -> list[tuple[str, str]]:
    """Stop runs, leaving each resumable: running jobs get SIGTERM (checkpoint, then exit);
    pending ones are removed from the queue. Returns (run_id, what was done)."""
    actions: list[tuple[str, str]] = []
    with Ledger.locked(results_dir) as ledger:
        views = reconcile(results_dir, plan, ledger, sacct_max_age_s=0)
        for rid, view in views.items():
            if run_ids and rid not in run_ids:
                continue
            if view.state not in LIVE_STATES or view.state == "cancelling" and not force:
                if run_ids:
                    actions.append((rid, f"nothing to cancel ({view.state})"))
                continue
            (run_dir(results_dir, rid) / CANCEL_MARKER).parent.mkdir(parents=True, exist_ok=True)
            (run_dir(results_dir, rid) / CANCEL_MARKER).touch()
            job = ledger.last_job(rid)
            entry = ledger.entry(rid) or {}
            if view.state == "queued" or job is None:
                actions.append((rid, "removed from the local queue"))
                mark_status(
                    run_dir(results_dir, rid) / "status.json",
                    state="cancelled",
                    reason="cancelled by user",
                )
            elif job.get("executor") == "slurm":
                started = view.state in ("running", "cancelling")
                sl.scancel(job["job_id"], graceful=started and not force)
                if started and not force:
                    actions.append((rid, f"SIGTERM to job {job['job_id']} (checkpoint, then exit)"))
                else:
                    actions.append((rid, f"scancel {job['job_id']}"))
                    if not started:
                        mark_status(
                            run_dir(results_dir, rid) / "status.json",
                            state="cancelled",
                            reason="cancelled by user",
                        )
            else:
                pid = int(job["job_id"])
                try:
                    os.kill(pid, signal.SIGKILL if force else signal.SIGTERM)
                    actions.append((rid, f"SIGTERM to local job {pid} (checkpoint, then exit)"))
                except ProcessLookupError:
                    actions.append((rid, f"local job {pid} already gone"))
            del entry  # the ledger entry is updated through set_state
            ledger.set_state(rid, "cancelled", "cancelled by user")
        sl.invalidate_sacct_cache(results_dir)
    return actions


# ---------------------------------------------------------------------------------------------
# rendering


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _fmt_tokens(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.1f}{unit}"
    return str(int(n))


STATE_STYLE = {
    "completed": "green",
    "running": "cyan",
    "pending": "blue",
    "queued": "blue",
    "failed": "red",
    "diverged": "magenta",
    "cancelled": "yellow",
    "cancelling": "yellow",
    "interrupted": "yellow",
}


def status_table(views: list[RunView], title: str | None = None) -> Any:
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
            _fmt_tokens(v.tokens),
            f"{v.last_loss:.4f}" if isinstance(v.last_loss, (int, float)) else "-",
            f"{v.tokens_per_s:,.0f}" if isinstance(v.tokens_per_s, (int, float)) else "-",
            _fmt_eta(v.eta_s) if v.state in ("running", "pending") else "-",
            v.job_id or "-",
            v.executor or "-",
        )
    return table


def views_json(views: list[RunView]) -> str:
    return json.dumps([v.as_dict() for v in views], indent=2)


def _exception_line(text: str) -> str | None:
    """The last ``SomeError: message`` line of a traceback (submitit appends log paths after it)."""
    import re

    found = None
    for line in text.splitlines():
        m = re.match(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Interrupt)):?\s*(.*)$", line)
        if m:
            found = f"{m.group(1)}: {m.group(2)}".strip().rstrip(":")[:300]
    return found
