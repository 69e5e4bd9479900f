"""Small, dependency-free pieces shared by the job wrapper (compute node) and the launcher (login
node): kept apart so `status` does not import submitit just to read a file name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from olmoablate.io import read_json, write_json_atomic

DEFAULT_TARGET = "olmoablate.train.job:run_job"
# Written by `cancel` / Ctrl-C before the SIGTERM, so the job can tell a user's stop (leave the
# run cancelled) from a preemption (requeue it).
CANCEL_MARKER = ".cancel-requested"


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
