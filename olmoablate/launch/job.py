"""The callable submitit runs on the compute node (local or Slurm): one training run.

Signal interplay (why this class exists). submitit installs, before calling us, a SIGUSR2 handler
that calls ``checkpoint()``, dumps the returned DelayedSubmission, requeues the job
(``scontrol requeue`` / local exit code 144) and exits; SIGTERM is only logged. The training job
``run_job`` then installs its *own* SIGTERM/SIGUSR2 handlers, because the model state must be
saved by OLMo-core at a step boundary, not from inside a signal handler. So a preemption
(SIGTERM then USR2) or a timeout warning (USR2) makes ``run_job`` save a checkpoint and return
``state="interrupted"``. Only then do we hand over to submitit's handler (captured before
``run_job`` replaced it) so submitit does the requeue bookkeeping exactly as it would have: the
timeout countdown, the new pickle, the requeue. The requeued job calls ``run_job`` again, which
resumes from the checkpoint.

A stop the *user* asked for (``olmoablate cancel`` or Ctrl-C on a local submit) also arrives as
SIGTERM; the launcher writes ``runs/<id>/.cancel-requested`` first, so we can tell the two apart
and leave the run cancelled (resumable by the next ``submit``) instead of requeueing it.
A run that ends ``completed``, ``diverged`` or ``failed`` is never requeued.
"""

from __future__ import annotations

import importlib
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import submitit

from olmoablate.launch.runstate import CANCEL_MARKER, DEFAULT_TARGET, mark_status

TERMINAL_STATES = frozenset({"completed", "diverged", "failed"})
MAX_REQUEUES_WITHOUT_PROGRESS = 3


def resolve_target(target: str | Callable[[str, str], dict[str, Any]]) -> Callable[..., Any]:
    """``"package.module:function"`` -> the function (imported on the compute node)."""
    if callable(target):
        return target
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr or "run_job")


def setup_distributed_env(gpus_per_node: int) -> dict[str, str]:
    """Export torch.distributed env:// variables for one task per GPU (or per CPU process).

    submitit's TorchDistributedEnvironment gives RANK/WORLD_SIZE/LOCAL_RANK/MASTER_*; OLMo-core's
    ``init_distributed`` additionally validates LOCAL_WORLD_SIZE or NUM_NODES and wants to know the
    checkpoint folder is on a shared filesystem (OLMO_SHARED_FS=1). The training job then picks
    NCCL on GPU and gloo on CPU. Single-task jobs get nothing: OLMo-core bootstraps a one-process
    environment itself.

    Device placement follows `olmoablate.launch.devices`: ``CUDA_VISIBLE_DEVICES`` is left as the
    scheduler/launcher set it (all of the node's GPUs of this job) and local rank r uses
    ``cuda:r``, which is what OLMo-core's ``init_distributed`` selects.
    """
    from olmoablate.launch.devices import task_device

    env = submitit.JobEnvironment()
    if env.num_tasks <= 1:
        return {}
    dist = submitit.helpers.TorchDistributedEnvironment().export(
        set_cuda_visible_devices=False, overwrite=True
    )
    if gpus_per_node > 0:
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
    all training state lives in the OLMo-core checkpoint folder.
    """

    def __init__(
        self,
        plan_path: str,
        run_id: str,
        results_dir: str,
        gpus_per_node: int = 0,
        target: str | Callable[[str, str], dict[str, Any]] = DEFAULT_TARGET,
    ) -> None:
        self.plan_path = str(plan_path)
        self.run_id = run_id
        self.results_dir = str(results_dir)
        self.gpus_per_node = gpus_per_node
        self.target = target
        self.attempt = 0
        self.requeues = 0
        self.stalled_requeues = 0
        self.last_step = -1

    @property
    def run_dir(self) -> Path:
        return Path(self.results_dir) / "runs" / self.run_id

    def cancel_requested(self) -> bool:
        return (self.run_dir / CANCEL_MARKER).exists()

    def __call__(self) -> dict[str, Any]:
        self.attempt += 1
        os.environ["OLMOABLATE_ATTEMPT"] = str(self.attempt)
        rank0 = submitit.JobEnvironment().global_rank == 0
        if self.cancel_requested():
            return self._cancelled({"state": "cancelled", "run_id": self.run_id}, rank0)
        # Until the training job installs its own handlers (imports take seconds), a user's
        # cancel (SIGTERM + marker) would be swallowed by submitit's log-only SIGTERM handler.
        signal.signal(signal.SIGTERM, self._early_sigterm)
        submitit_usr2 = signal.getsignal(signal.SIGUSR2)
        try:
            setup_distributed_env(self.gpus_per_node)
            result = resolve_target(self.target)(self.plan_path, self.run_id)
        except Exception as err:
            # Errors before the training job could write its own status (bad plan entry, import
            # error) must still show up in `status` with their one-line reason.
            if rank0:
                lines = [ln for ln in str(err).splitlines() if ln.strip()]
                mark_status(
                    self.run_dir / "status.json",
                    state="failed",
                    reason=f"{type(err).__name__}: {lines[0] if lines else ''}"[:500],
                )
            raise
        if not isinstance(result, dict):
            result = {"state": "failed", "reason": f"job returned {type(result).__name__}"}
        state = str(result.get("state"))
        if state in TERMINAL_STATES:
            return result
        # Interrupted. From here on, further TERM/USR2 (preemption sends both) must not re-enter
        # the training job's handlers; the decision below is final.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        rank = int(os.environ.get("RANK", "0"))
        if self.cancel_requested():
            return self._cancelled(result, rank == 0)
        step = int(result.get("step") or 0)
        if step <= self.last_step:
            self.stalled_requeues += 1
        else:
            self.stalled_requeues = 0
        self.last_step = step
        if self.stalled_requeues >= MAX_REQUEUES_WITHOUT_PROGRESS:
            if rank == 0:
                mark_status(
                    self.run_dir / "status.json",
                    state="failed",
                    reason=f"interrupted {self.stalled_requeues} times without progress",
                )
            return {**result, "state": "failed"}
        if callable(submitit_usr2) and rank == 0:
            self.requeues += 1
            # submitit's own handler: checkpoint() -> dump -> requeue -> sys.exit. It raises
            # UncompletedJobError instead when the timeout budget (max_num_timeout) is spent.
            submitit_usr2(signal.SIGUSR2, None)
        return result

    def _cancelled(self, result: dict[str, Any], rank0: bool) -> dict[str, Any]:
        if rank0:
            mark_status(self.run_dir / "status.json", state="cancelled", reason="cancelled by user")
        return {**result, "state": "cancelled"}

    def _early_sigterm(self, signum: int, frame: Any) -> None:
        """SIGTERM before training started: stop at once if the user cancelled (nothing to
        save yet), otherwise ignore it like submitit does (a preemption's USR2 follows)."""
        if self.cancel_requested():
            if os.environ.get("RANK", "0") == "0":
                mark_status(
                    self.run_dir / "status.json", state="cancelled", reason="cancelled by user"
                )
            raise SystemExit(0)

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Requeue this same callable; the training job resumes from its own checkpoint."""
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)
