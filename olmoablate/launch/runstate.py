"""Small, dependency-free pieces shared by the job wrapper (compute node) and the launcher (login
node): kept apart so `status` does not import submitit just to read a file name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from olmoablate.contract.checkpoints import select_checkpoint
from olmoablate.contract.layout import RunDir
from olmoablate.io import read_json, write_json_atomic

DEFAULT_TARGET = "olmoablate.train.job:run_job"
#: What a job runs: ``"package.module:function"`` (imported on the compute node) or, in tests, a
#: callable; either is called as ``target(plan_path, run_id)`` and returns the run's final status.
JobTarget = str | Callable[[str, str], dict[str, Any]]
#: Set (in the job process) by the training job's InterruptCallback once ``fit`` has taken over
#: SIGTERM/SIGUSR2: a SIGTERM seen by the job wrapper before that came before training started.
FIT_STARTED_ENV = "OLMOABLATE_FIT_STARTED"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclasses.dataclass(frozen=True)
class OwnStatus:
    """The run's own word: the fields of ``runs/<id>/status.json`` the launcher decides from.

    status.json is written by the training job (and marked by the launcher, see
    :func:`mark_status`), not part of the plan, so it has no contract model; it is read here
    once, each field checked for its type (a field of the wrong type counts as absent), and
    everything else in launch reads these attributes. ``present``: the file exists and is a
    JSON object.
    """

    present: bool = False
    state: str | None = None
    step: int | None = None
    total_steps: int | None = None
    tokens: int | None = None
    last_loss: float | None = None
    tokens_per_s: float | None = None
    reason: str | None = None
    #: A resume that had to skip incomplete checkpoints (olmoablate.train.resume), one line.
    recovery: str | None = None

    @classmethod
    def of(cls, data: dict[str, Any] | None) -> OwnStatus:
        """From a parsed status.json (None: the job never wrote one, or it is unreadable; an
        empty object counts as absent too)."""
        if not data:
            return cls()
        # The one place launch reads status.json (the job's file, not the plan) by field name.
        return cls(
            present=True,
            state=_str(data.get("state")),
            step=_int(data.get("step")),
            total_steps=_int(data.get("total_steps")),
            tokens=_int(data.get("tokens")),
            last_loss=_num(data.get("last_loss")),
            tokens_per_s=_num(data.get("tokens_per_s")),
            reason=_str(data.get("reason")),
            recovery=_str(data.get("recovery")),
        )

    @classmethod
    def read(cls, run: RunDir) -> OwnStatus:
        return cls.of(run.read_status())


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
    """Step of the newest *complete* checkpoint in ``checkpoint_dir`` (None if none): the
    rule the training job resumes by (:mod:`olmoablate.contract.checkpoints`), so `status`
    says where a run really resumes."""
    return select_checkpoint(Path(checkpoint_dir)).step
