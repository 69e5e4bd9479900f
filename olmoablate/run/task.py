"""The callable submitit runs on the compute node (local or Slurm): one training run.

Why a class: submitit installs, before calling us, a SIGUSR2 handler that checkpoints, requeues
(``scontrol requeue`` / local exit code 144) and exits; SIGTERM it only logs. The training job
installs its *own* SIGTERM/SIGUSR2 handlers while it trains (the model state must be saved by
OLMo-core at a step boundary, not in a signal handler) and returns ``interrupted`` with the
signals seen. :class:`TrainRun` then acts on what the stop meant
(:func:`olmoablate.run.resume.decide_stop`, table in docs/slurm.md): a requeue is handed to
submitit's own handler (captured before the job replaced it: the ``max_num_timeout`` countdown,
the new pickle); Slurm's own requeue is left to Slurm; a user's stop ends ``cancelled``. A run that
ends ``completed``, ``diverged`` or ``failed`` is never requeued.

On the local executor the training process is a child of submitit's controller (the job pid
`status` shows). It asks the kernel for SIGTERM when that controller dies
(:func:`die_with_controller`), so a `kill -9` of the controller stops training at a checkpoint
instead of leaving an orphan trainer; the run then ends ``interrupted`` and `submit` resumes it.
Rank 0 holds the run's trainer lock (:func:`olmoablate.run.state.trainer_lock`) for the whole
job, so no second trainer starts in the folder until this one has said how it ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import submitit

import olmoablate
from olmoablate.plan.layout import ResultsDir, RunDir
from olmoablate.plan.names import TERMINAL_STATES, RunState
from olmoablate.plan.planfile import Plan, RunEntry
from olmoablate.run import slurm as sl
from olmoablate.run.faults import ERROR_LOG, classify, redo_advice, write_traceback
from olmoablate.run.files import RunStatus
from olmoablate.run.resume import MAX_REQUEUES_WITHOUT_PROGRESS, USR2_GRACE_S, decide_stop
from olmoablate.run.slurm import task_device
from olmoablate.run.state import RunBusyError, own_status, trainer_lock

log = logging.getLogger(__name__)

DEFAULT_TARGET = "olmoablate.run.job:run_job"
#: What a job runs: ``"package.module:function"`` (imported on the compute node) or, in tests, a
#: callable; either is called as ``target(plan_path, run_id)`` and returns the run's final status.
JobTarget = str | Callable[[str, str], dict[str, Any]]
#: Set (in the job process) by the training job's InterruptCallback once ``fit`` has taken over
#: SIGTERM/SIGUSR2: a SIGTERM seen by the job wrapper before that came before training started.
FIT_STARTED_ENV = "OLMOABLATE_FIT_STARTED"


#: prctl(2)'s option that makes the kernel signal a process when its parent ends.
PR_SET_PDEATHSIG = 1


def die_with_controller() -> int | None:
    """On the local executor (Linux): have the kernel send this training process SIGTERM when
    its controller (submitit's ``_local`` process, the job pid `status` shows) dies, so a
    ``kill -9`` of the job stops training at a checkpoint instead of leaving a trainer nobody
    tracks. Returns the controller's pid (None: not armed, e.g. not the controller's child)."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "local" or not sys.platform.startswith("linux"):
        return None
    try:
        controller = int(os.environ.get("SUBMITIT_LOCAL_JOB_ID") or 0)
    except ValueError:
        return None
    if not controller or os.getppid() != controller:
        return None  # not started by that controller (e.g. called in-process by a test)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return controller


def resolve_target(target: JobTarget) -> Any:
    if callable(target):
        return target
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr or "run_job")


def setup_distributed_env(on_gpu: bool) -> dict[str, str]:
    """Export torch.distributed env:// variables for one task per GPU (or per CPU process).

    submitit's TorchDistributedEnvironment gives RANK/WORLD_SIZE/LOCAL_RANK/MASTER_*; OLMo-core's
    ``init_distributed`` additionally validates LOCAL_WORLD_SIZE or NUM_NODES and wants to know the
    checkpoint folder is on a shared filesystem (OLMO_SHARED_FS=1). Single-task jobs get nothing:
    OLMo-core bootstraps a one-process environment itself. ``CUDA_VISIBLE_DEVICES`` is left as
    the scheduler set it (the GPU rule of `olmoablate.run.slurm`).
    """
    env = submitit.JobEnvironment()
    if env.num_tasks <= 1:
        return {}
    dist = submitit.helpers.TorchDistributedEnvironment().export(
        set_cuda_visible_devices=False, overwrite=True
    )
    if on_gpu:
        task_device(dist.local_rank, dist.local_world_size, os.environ)
    extra = {
        "LOCAL_WORLD_SIZE": str(dist.local_world_size),
        "NUM_NODES": str(env.num_nodes),
        "OLMO_SHARED_FS": "1",
    }
    if env.num_nodes == 1:
        # A single node talks to itself; the node's name may not resolve (dev clusters, containers).
        extra["MASTER_ADDR"] = "127.0.0.1"
    os.environ.update(extra)
    return {
        "RANK": str(dist.rank),
        "WORLD_SIZE": str(dist.world_size),
        "MASTER_ADDR": os.environ["MASTER_ADDR"],
        "MASTER_PORT": str(dist.master_port),
        **extra,
    }


class TrainRun(submitit.helpers.Checkpointable):
    """One run of the plan, as a requeueable submitit job.

    Holds only paths and counters, so the pickle submitit re-dumps at each requeue stays tiny;
    all training state lives in the OLMo-core checkpoint folder. The plan entry is read on the
    compute node at every start.
    """

    def __init__(
        self, plan_path: str, run_id: str, results_dir: str, target: JobTarget = DEFAULT_TARGET
    ) -> None:
        self.plan_path = str(plan_path)
        self.run_id = run_id
        self.results_dir = str(results_dir)
        self.target = target
        self.attempt = 0
        self.requeues = 0
        self.stalled_requeues = 0
        self.last_step = -1
        self.restarts_at_start = 0
        self._signals: list[str] = []  # signals that reached this class's own handlers
        self._controller: int | None = None  # a local job's controller pid (die_with_controller)

    @property
    def run_dir(self) -> RunDir:
        return ResultsDir(self.results_dir).run(self.run_id)

    def entry(self) -> RunEntry:
        return Plan.load(self.plan_path).run(self.run_id)

    def cancel_requested(self) -> bool:
        return self.run_dir.cancel_marker.exists()

    def controller_gone(self) -> int | None:
        """The pid of this local job's controller when it has ended under us, else None."""
        if self._controller is not None and os.getppid() != self._controller:
            return self._controller
        return None

    def __call__(self) -> dict[str, Any]:
        self._controller = die_with_controller()
        env = submitit.JobEnvironment()
        rank0 = env.global_rank == 0
        busy = False
        with contextlib.ExitStack() as held:
            if rank0:
                try:
                    held.enter_context(trainer_lock(self.run_dir))
                except RunBusyError:
                    if env.num_tasks <= 1:
                        raise  # another trainer has the folder: touch nothing
                    busy = True  # several ranks: the training job refuses on every rank at once
            return self._call(rank0, busy)

    def _call(self, rank0: bool, busy: bool = False) -> dict[str, Any]:
        # Slurm's own requeues rerun the same pickle: count them from SLURM_RESTART_COUNT.
        self.restarts_at_start = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        self.attempt = max(self.attempt + 1, self.restarts_at_start + 1)
        self._signals = []
        os.environ["OLMOABLATE_ATTEMPT"] = str(self.attempt)
        os.environ.pop(FIT_STARTED_ENV, None)
        if rank0:
            # Which code a job really imports (PYTHONPATH reaches Slurm jobs through sbatch's
            # environment export); print: logging is configured only later, by the training job.
            print(f"olmoablate {self.run_id} attempt {self.attempt} from {olmoablate.__file__}")
        if busy:
            pass  # another trainer's folder: nothing is written before the job refuses
        elif self.controller_gone() is not None:  # ended before we asked to die with it
            if rank0:
                self._mark(RunState.INTERRUPTED, self._orphan_reason())
            return {"state": RunState.INTERRUPTED, "run_id": self.run_id}
        elif self.cancel_requested():
            return self._cancelled(
                {"state": RunState.CANCELLED, "run_id": self.run_id}, rank0, "cancelled by user"
            )
        # Until the training job installs its own handlers (imports take seconds) and after it
        # restored ours, a SIGTERM lands here (submitit's own handler would only log it).
        signal.signal(signal.SIGTERM, self._outside_training)
        submitit_usr2 = signal.getsignal(signal.SIGUSR2)
        try:
            setup_distributed_env(self.entry().topology.on_gpu)
            result = resolve_target(self.target)(self.plan_path, self.run_id)
        except RunBusyError:
            raise  # another process trains the run: its status is not ours to write
        except Exception as err:
            # Errors before the training job could write its own status (bad plan entry, import
            # error, missing data) must still show up in `status` with their one-line reason.
            if rank0:
                own = own_status(self.run_dir)
                if own.state != RunState.FAILED or not own.reason:  # the job's own line wins
                    started = bool(os.environ.get(FIT_STARTED_ENV))
                    log_path = self.run_dir.path / ERROR_LOG
                    kept = write_traceback(log_path, err, f"{self.run_id} attempt {self.attempt}")
                    # before training an unrecognised error (the plan entry, the seed, the
                    # blocks) repeats on --retry-failed: re-plan and redo instead
                    why = classify(
                        err,
                        resume=f"olmoablate submit {self.results_dir} --retry-failed",
                        where=str(self.run_dir.path),
                        log=str(log_path) if kept else None,
                        redo=None if started else redo_advice(self.results_dir, self.run_id),
                    )
                    if not started:
                        why = f"failed before training started: {why}"
                    self._mark(RunState.FAILED, why)
            raise
        if not isinstance(result, dict):
            result = {"state": RunState.FAILED, "reason": f"job returned {type(result).__name__}"}
        if _said(result).state in TERMINAL_STATES:
            return result
        return self._interrupted(result, submitit_usr2)

    def _interrupted(self, result: dict[str, Any], submitit_usr2: Any) -> dict[str, Any]:
        """Decide what the stop meant (module docstring) and act on it; the decision is final."""
        rank = int(os.environ.get("RANK", "0"))
        signals = [*(_said(result).signals or []), *self._signals]
        signal.signal(signal.SIGTERM, self._record)
        signal.signal(signal.SIGUSR2, self._record)
        slurm_job = _slurm_job()
        decision = decide_stop(
            signals,
            self.cancel_requested(),
            slurm_job,
            self.restarts_at_start,
            self.controller_gone(),
        )
        if decision.action == "cancel" and slurm_job is not None:
            deadline = time.monotonic() + USR2_GRACE_S
            while slurm_job.get("JobState") == "RUNNING" and time.monotonic() < deadline:
                if "SIGUSR2" in self._signals:  # a preemption: SIGTERM, then USR2
                    break
                time.sleep(0.1)
            signals = [*(_said(result).signals or []), *self._signals]
            decision = decide_stop(
                signals, self.cancel_requested(), slurm_job, self.restarts_at_start
            )
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        log.info(f"{self.run_id} stopped after signals {signals}: {decision}")
        if decision.action == "cancel":
            return self._cancelled(result, rank == 0, decision.reason)
        if decision.action in ("slurm", "stop"):
            if rank == 0:
                self._mark(RunState.INTERRUPTED, decision.reason)
            return result
        step = _said(result).step or 0
        if step <= self.last_step:
            self.stalled_requeues += 1
        else:
            self.stalled_requeues = 0
        self.last_step = step
        if self.stalled_requeues >= MAX_REQUEUES_WITHOUT_PROGRESS:
            if rank == 0:
                why = f"interrupted {self.stalled_requeues} times without progress"
                self._mark(RunState.FAILED, why)
            return {**result, "state": RunState.FAILED}
        if callable(submitit_usr2) and rank == 0:
            self.requeues += 1
            # submitit's own handler: checkpoint() -> dump -> requeue -> sys.exit. It raises
            # UncompletedJobError instead when the timeout budget (max_num_timeout) is spent.
            try:
                submitit_usr2(signal.SIGUSR2, None)
            except submitit.core.utils.UncompletedJobError as err:
                why = f"timed out, requeue budget spent (slurm.max_num_timeout): {err}"
                self._mark(RunState.FAILED, why[:500])
                raise
        return result

    def _orphan_reason(self) -> str:
        return decide_stop([], False, None, 0, self.controller_gone()).reason

    def _record(self, signum: int, frame: Any) -> None:
        del frame
        self._signals.append(signal.Signals(signum).name)

    def _mark(self, state: RunState, reason: str) -> None:
        """Set the run's state and reason in its status.json (rank 0 only, the callers check)."""
        RunStatus.update(self.run_dir.status, state=state, reason=reason)

    def _cancelled(self, result: dict[str, Any], rank0: bool, reason: str) -> dict[str, Any]:
        if rank0:
            self._mark(RunState.CANCELLED, reason)
        return {**result, "state": RunState.CANCELLED}

    def _outside_training(self, signum: int, frame: Any) -> None:
        """SIGTERM while the training job's handlers are not installed.

        After training (``fit`` returned, status not written yet): only recorded, the decision
        follows in ``_interrupted``. Before training started there is nothing to save: decide now
        and stop at once (Slurm's own requeue or a cancel), except that a preemption's SIGUSR2
        may follow within ``USR2_GRACE_S`` (submitit's handler then requeues the job).
        """
        self._record(signum, frame)
        if os.environ.get(FIT_STARTED_ENV):
            return
        slurm_job = _slurm_job()
        if slurm_job is not None and slurm_job.get("JobState") == "RUNNING":
            time.sleep(USR2_GRACE_S)  # a USR2 arriving now runs submitit's requeue handler
        decision = decide_stop(
            self._signals,
            self.cancel_requested(),
            slurm_job,
            self.restarts_at_start,
            self.controller_gone(),
        )
        if os.environ.get("RANK", "0") == "0":
            state = RunState.CANCELLED if decision.action == "cancel" else RunState.INTERRUPTED
            self._mark(state, decision.reason)
        raise SystemExit(0)

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Requeue this same callable (the training job resumes from its checkpoint)."""
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def _said(result: dict[str, Any]) -> RunStatus:
    """What the training job returned (its final status.json), typed."""
    return RunStatus.of(result, "the training job's result") or RunStatus()


def _slurm_job() -> dict[str, str] | None:
    """The controller's record of this job (:func:`olmoablate.run.slurm.scontrol_job`), None off
    Slurm."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm" or not os.environ.get("SLURM_JOB_ID"):
        return None
    return sl.scontrol_job(os.environ["SLURM_JOB_ID"])
