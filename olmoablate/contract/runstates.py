"""The run states and the run files' timestamp format, defined once (no pydantic: `status`,
`--help` and the CLI's modules import these at start-up; the typed files that use them are
:mod:`olmoablate.contract.runfiles`).

Why one vocabulary: launch, the training job, the store, `watch` and the report all decide from
a run's state; spelled out by hand in each (six copies in four files, before), a new state or a
renamed one drifted. Every stage compares against the members and groups below.
"""

from __future__ import annotations

import datetime
import enum
from typing import Any


class RunState(enum.StrEnum):
    """Every state a run is in, wherever it is recorded (status.json, ledger.json, `status`).

    A :class:`enum.StrEnum`: members compare equal to (and serialise as) their names, so files
    written before this type read unchanged.
    """

    #: submitted, waiting for the scheduler (Slurm PENDING, a requeue)
    PENDING = "pending"
    #: held in the queue of a local `submit` (no process yet)
    QUEUED = "queued"
    RUNNING = "running"
    #: `cancel` asked a started job to stop; it has not ended yet (launch's view only)
    CANCELLING = "cancelling"
    #: reached the planned step count
    COMPLETED = "completed"
    #: a NaN/Inf loss or too many loss spikes: final, never retried
    DIVERGED = "diverged"
    #: ended with an error (its one-line ``reason``); `submit --retry-failed` runs it again
    FAILED = "failed"
    #: stopped by `cancel`, `watch` or the user's Ctrl-C
    CANCELLED = "cancelled"
    #: stopped before the last step with a checkpoint; `submit` resumes it
    INTERRUPTED = "interrupted"
    #: launch cannot tell (a ledger entry, no run files, no live job)
    UNKNOWN = "unknown"
    #: no files at all for a planned run (the report's word for it)
    MISSING = "missing"


#: Final by the run's own word: nothing more will be trained (a run that is already one of these
#: is returned as is by the training job and never resubmitted).
DONE_STATES = frozenset({RunState.COMPLETED, RunState.DIVERGED})
#: The job wrapper returns these as they are (no stop to decide on).
TERMINAL_STATES = DONE_STATES | {RunState.FAILED}
#: Ended, by the run's own status.json.
ENDED_STATES = TERMINAL_STATES | {RunState.CANCELLED, RunState.INTERRUPTED}
#: A job is (or will be) at work on the run.
LIVE_STATES = frozenset(
    {RunState.QUEUED, RunState.PENDING, RunState.RUNNING, RunState.CANCELLING}
)
#: Waiting or training: an ETA is meaningful.
ACTIVE_STATES = frozenset({RunState.RUNNING, RunState.PENDING})
#: Ended other than by completing.
STOPPED_STATES = ENDED_STATES - {RunState.COMPLETED}
#: States whose ``reason`` `status` shows (live and completed runs speak for themselves).
EXPLAINED_STATES = STOPPED_STATES | {RunState.UNKNOWN}
#: A run of another spec that may stand for this one (store reuse): done, or on its way.
REUSABLE_STATES = frozenset(
    {RunState.COMPLETED, RunState.RUNNING, RunState.PENDING, RunState.QUEUED}
)


# ---------------------------------------------------------------------------------- timestamps
def now_iso() -> str:
    """Now, as every run file writes it: ``2026-12-01T13:12:42+00:00``."""
    return format_time(datetime.datetime.now(datetime.timezone.utc))


def format_time(when: datetime.datetime) -> str:
    return when.isoformat(timespec="seconds")


def parse_time(value: Any) -> datetime.datetime | None:
    """A timestamp of a run file (either format ever written: ``+00:00`` or ``+0000``); None
    for anything else. A time without an offset is taken as UTC."""
    if isinstance(value, datetime.datetime):
        when = value
    elif isinstance(value, str) and value:
        try:
            when = datetime.datetime.fromisoformat(value)
        except ValueError:
            try:
                when = datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S%z")
            except ValueError:
                return None
    else:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)
