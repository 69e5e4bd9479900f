"""Small, dependency-free pieces shared by the job wrapper (compute node) and the launcher (login
node): kept apart so `status` does not import submitit just to read a file name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from olmoablate.contract.checkpoints import select_checkpoint
from olmoablate.contract.layout import RunDir
from olmoablate.contract.runfiles import RunStatus

DEFAULT_TARGET = "olmoablate.train.job:run_job"
#: What a job runs: ``"package.module:function"`` (imported on the compute node) or, in tests, a
#: callable; either is called as ``target(plan_path, run_id)`` and returns the run's final status.
JobTarget = str | Callable[[str, str], dict[str, Any]]
#: Set (in the job process) by the training job's InterruptCallback once ``fit`` has taken over
#: SIGTERM/SIGUSR2: a SIGTERM seen by the job wrapper before that came before training started.
FIT_STARTED_ENV = "OLMOABLATE_FIT_STARTED"


def own_status(run: RunDir) -> RunStatus:
    """The run's own word (``runs/<id>/status.json``, typed by the contract); an empty
    :class:`RunStatus` (``present`` False) when the job never wrote one."""
    return RunStatus.read(run) or RunStatus()


def mark_status(status_path: Path, **fields: Any) -> None:
    """Update fields of the run's status.json (atomic), keeping what the training job wrote."""
    RunStatus.update(status_path, **fields)


def latest_checkpoint_step(checkpoint_dir: Path) -> int | None:
    """Step of the newest *complete* checkpoint in ``checkpoint_dir`` (None if none): the
    rule the training job resumes by (:mod:`olmoablate.contract.checkpoints`), so `status`
    says where a run really resumes."""
    return select_checkpoint(Path(checkpoint_dir)).step
