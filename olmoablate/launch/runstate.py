"""Small, dependency-free pieces shared by the job wrapper (compute node) and the launcher (login
node): kept apart so `status` does not import submitit just to read a file name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from olmoablate.io import read_json, write_json_atomic

DEFAULT_TARGET = "olmoablate.train.job:run_job"
#: What a job runs: ``"package.module:function"`` (imported on the compute node) or, in tests, a
#: callable; either is called as ``target(plan_path, run_id)`` and returns the run's final status.
JobTarget = str | Callable[[str, str], dict[str, Any]]
# Written by `cancel` / Ctrl-C before the SIGTERM, so the job can tell a user's stop (leave the
# run cancelled) from a preemption (requeue it).
CANCEL_MARKER = ".cancel-requested"
#: Set (in the job process) by the training job's InterruptCallback once ``fit`` has taken over
#: SIGTERM/SIGUSR2: a SIGTERM seen by the job wrapper before that came before training started.
FIT_STARTED_ENV = "OLMOABLATE_FIT_STARTED"


def mark_status(status_path: Path, **fields: Any) -> None:
    """Update fields of the run's status.json (atomic), keeping what the training job wrote."""
    import datetime

    try:
        status = read_json(status_path)
        if not isinstance(status, dict):
            status = {}
    except (OSError, ValueError):
        status = {}
    status.update(fields)
    status["updated"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    write_json_atomic(status_path, status)


def latest_checkpoint_step(checkpoint_dir: Path) -> int | None:
    """Step of the newest *complete* OLMo-core checkpoint in ``checkpoint_dir`` (None if none).

    Same completeness rule as ``olmo_core.train.checkpoint.Checkpointer.dir_is_checkpoint``
    (train state, model/optimizer metadata, checkpoint metadata), without importing torch, so
    `status` can say where a failed run would resume.
    """
    try:
        entries = list(Path(checkpoint_dir).iterdir())
    except OSError:
        return None
    steps = []
    for path in entries:
        name = path.name
        if not (name.startswith("step") and name[4:].isdigit()):
            continue
        if all(
            (path / part).exists()
            for part in ("train/rank0.pt", "model_and_optim/.metadata", ".metadata.json")
        ):
            steps.append(int(name[4:]))
    return max(steps) if steps else None
