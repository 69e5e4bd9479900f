"""The name of every file that crosses a stage, defined once.

No imports: shell completion and the login-node commands need them without the plan model.
:mod:`olmoablate.plan.layout` builds the paths; nothing else spells a file name.
"""

from __future__ import annotations

import datetime
import enum
from pathlib import Path
from typing import Any

from olmoablate.io import read_json

# ------------------------------------------------------------------ a spec's results folder
#: The plan (`olmoablate plan`; :class:`olmoablate.plan.planfile.Plan`).
PLAN_FILE = "plan.json"
#: What `submit` launched (launch's own record; :mod:`olmoablate.run.state`).
LEDGER_FILE = "ledger.json"
#: The report's outputs: the verdicts, the comparison table, the documents.
GATE_FILE = "gate.json"
COMPARISON_FILE = "comparison.csv"
REPORT_MD_FILE = "report.md"
REPORT_HTML_FILE = "report.html"
#: The promoted runs of a proceed verdict, a plan `submit` accepts.
NEXT_PLAN_FILE = "next_plan.json"

# ------------------------------------------------------------------ a run's folder
STATUS_FILE = "status.json"
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"
#: The columnar copy of metrics.jsonl, its one cache (:mod:`olmoablate.run.columnar`).
METRICS_COPY_FILE = "metrics.arrow"
#: The copy releases before the metrics store wrote (read once to seed the new one).
LEGACY_METRICS_COPY_FILE = "metrics.parquet"
FINGERPRINTS_FILE = "fingerprints.jsonl"
PROOF_FILE = "proof.json"
#: The run's W&B id, project and URL (written by the job, read by the report and `results`).
WANDB_FILE = "wandb.json"
IDENTITY_FILE = "identity.json"
REUSED_FILE = "reused.json"

# ------------------------------------------------------------------ prepared token files
#: What `olmoablate data prepare` tokenized, beside the token files it wrote.
MANIFEST_FILE = "manifest.json"


# The run states and the run files' timestamp format: one vocabulary every stage decides from
# (no pydantic: imported at start-up; the typed files are :mod:`olmoablate.run.files`).

class RunState(enum.StrEnum):
    """Every state a run is in, wherever recorded; a StrEnum, so files written before it read
    unchanged."""

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
#: The gate's verdicts as gate.json, the board and ``report --fail-on`` spell them. Decided in
#: :mod:`olmoablate.report.verdict`; named here, below every stage, so the login-node ``board``
#: and the step-time check read the same words without importing the decision's numerics.
PROCEED, STOP, INCONCLUSIVE = "proceed", "stop", "inconclusive"


#: The longest file name the filesystems runs live on allow, in bytes (Linux ``NAME_MAX``: ext4,
#: xfs, btrfs, NFS, Lustre, GPFS). A run id, a spec name and a gate name each become one.
NAME_MAX_BYTES = 255
#: The most bytes a stage adds around a run id in one file name. The longest is a report plot's
#: temporary file ``.<size>__<variant>__flops.png.XXXXXXXX.tmp`` (an atomic write), 27 bytes
#: beyond size and variant, where the run id ``<size>-s<seed>-<variant>`` of seed 0 has 4:
#: 23 more than the id (the others: a replaced run's ``<id>-YYYYmmddTHHMMSS`` 16, a group's
#: ``.<size>-s<seed>.sbatch.XXXXXXXX.tmp`` 20 beyond the group id).
ID_FILE_NAME_EXTRA = 23
#: The longest run id, and the longest spec or gate name (folders named after them:
#: ``results/<spec>/``, ``gates/<gate>/``), so that every file name built from one fits
#: :data:`NAME_MAX_BYTES`: `validate` refuses longer ones naming the field
#: (:func:`olmoablate.plan.checks.check_run_ids`).
MAX_ID_BYTES = NAME_MAX_BYTES - ID_FILE_NAME_EXTRA


def group_id(size: str, seed: int) -> str:
    """The id of a (size, seed) group: its baseline's pair id, and the prefix of its run ids."""
    return f"{size}-s{seed}"


def run_id(size: str, seed: int, arm: str) -> str:
    """A run's id and folder name under ``runs/``: ``{size}-s{seed}-{arm}``."""
    return f"{group_id(size, seed)}-{arm}"


def recorded_state(status_path: Path) -> RunState | None:
    """The state a run's status.json records, or None (no file, not JSON, no known state).
    The store's one question about another spec's run, answered below the plan (the typed file:
    :class:`olmoablate.run.files.RunStatus`)."""
    try:
        state = read_json(status_path).get("state")
        return RunState(state)
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def now_iso() -> str:
    """Now, as every run file writes it: ``2026-12-01T13:12:42+00:00``."""
    return format_time(datetime.datetime.now(datetime.timezone.utc))


def format_time(when: datetime.datetime) -> str:
    return when.isoformat(timespec="seconds")


def parse_time(value: Any) -> datetime.datetime | None:
    """A run file's timestamp (``+00:00`` or ``+0000``; no offset: UTC), else None."""
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


# Where results folders live by default (plain constants: the command modules name them at import).

RESULTS_ROOT = Path("results")
#: Environment variable every command reads as its --results-root default.
RESULTS_ROOT_ENV = "OLMOABLATE_RESULTS_ROOT"
