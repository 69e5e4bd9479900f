"""`results/<spec>/ledger.json`: which job ran which run, so `submit` never sends a run twice.

Layout::

    {"schema": 1, "spec_name": ..., "spec_sha256": ..., "updated": ISO,
     "runs": {run_id: {"executor": "slurm|local", "state": ..., "attempts": n,
                       "job_ids": [..], "jobs": [{"job_id", "executor", "submitted", "attempt",
                                                  "host", "identity" (local jobs)}],
                       "updated": ISO, "reason": str|None,
                       "owner_pid", "owner_identity", "host" (runs queued by a local `submit`)}}}

Every read-decide-write happens under ``file_lock(results/<spec>/.ledger.lock)`` (see
``Ledger.locked``) and every write is atomic, so two concurrent `submit` calls serialize and a
reader never sees half a file. The ledger is launch's own record (no other stage reads it): the
rest of launch reads it through :meth:`Ledger.record` (typed), the dict keys live only here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from olmoablate.contract.layout import ResultsDir
from olmoablate.errors import UserError
from olmoablate.io import file_lock, read_json, write_json_atomic

#: Held for every read-decide-write of the ledger (launch's own file, next to ledger.json).
LOCK_FILE = ".ledger.lock"
SCHEMA = 1


@dataclasses.dataclass(frozen=True)
class JobRecord:
    """One job the ledger recorded for a run."""

    job_id: str
    executor: str  # "slurm" | "local"
    #: Local jobs: the machine that started them (their pid means nothing on another one).
    host: str | None
    #: Local jobs: the process's start time, boot id and command line (launch/procid.py); a
    #: pid whose identity differs is another process, never signalled.
    identity: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What the ledger knows of one run: the launcher's side of its state."""

    executor: str | None
    state: str | None
    attempts: int
    reason: str | None
    #: Runs queued by a local `submit`: that process (the queue dies with it).
    owner_pid: int | None
    last_job: JobRecord | None
    #: The queueing `submit` process's identity (launch/procid.py), when recorded.
    owner_identity: dict[str, Any] | None = None


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class Ledger:
    """In-memory view of ledger.json; mutate only inside ``Ledger.locked``."""

    def __init__(self, results: ResultsDir, data: dict[str, Any]) -> None:
        self.results = results
        self.data = data

    @property
    def path(self) -> Path:
        return self.results.ledger

    @classmethod
    def read(cls, results: ResultsDir) -> Ledger:
        """Read without the lock (for `status`): atomic writes make this safe."""
        path = results.ledger
        if not path.exists():
            return cls(results, {"schema": SCHEMA, "spec_sha256": None, "runs": {}})
        try:
            data = read_json(path)
        except (OSError, ValueError) as err:
            raise UserError(
                f"{path}: unreadable ledger ({err}); move it aside to start over"
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("runs"), dict):
            what = (
                "not a JSON object"
                if not isinstance(data, dict)
                else (
                    "field `runs` is missing"
                    if "runs" not in data
                    else "field `runs` is not an object"
                )
            )
            raise UserError(f"{path}: {what}; move the file aside to start over")
        return cls(results, data)

    @classmethod
    @contextlib.contextmanager
    def locked(cls, results: ResultsDir) -> Iterator[Ledger]:
        """Hold the ledger lock for a whole read-decide-write; saves on clean exit."""
        with file_lock(results.root / LOCK_FILE):
            ledger = cls.read(results)
            yield ledger
            ledger.save()

    def save(self) -> None:
        self.data["schema"] = SCHEMA
        self.data["updated"] = now_iso()
        write_json_atomic(self.path, self.data)

    @property
    def runs(self) -> dict[str, dict[str, Any]]:
        return self.data["runs"]

    def entry(self, run_id: str) -> dict[str, Any] | None:
        return self.runs.get(run_id)

    def record(self, run_id: str) -> RunRecord | None:
        """The run's entry, typed (None: never submitted, or forgotten by --redo)."""
        entry = self.entry(run_id)
        if entry is None:
            return None
        jobs = entry.get("jobs") or []
        last = jobs[-1] if jobs else None
        owner = entry.get("owner_pid")
        return RunRecord(
            executor=entry.get("executor"),
            state=entry.get("state"),
            attempts=int(entry.get("attempts", 0)),
            reason=entry.get("reason"),
            owner_pid=int(owner) if owner else None,
            last_job=None
            if last is None
            else JobRecord(
                str(last["job_id"]), str(last["executor"]), last.get("host"), last.get("identity")
            ),
            owner_identity=entry.get("owner_identity"),
        )

    def mark_queued(
        self, run_id: str, owner_pid: int, host: str, owner_identity: dict[str, Any] | None = None
    ) -> None:
        """A local `submit` (process ``owner_pid`` on ``host``) holds the run in its queue."""
        entry = self.runs.setdefault(
            run_id, {"executor": "local", "attempts": 0, "job_ids": [], "jobs": []}
        )
        entry.update(
            executor="local",
            state="queued",
            owner_pid=owner_pid,
            owner_identity=owner_identity,
            reason=None,
            updated=now_iso(),
            host=host,
        )

    def record_submission(
        self,
        run_id: str,
        job_id: str,
        executor: str,
        state: str,
        host: str | None = None,
        identity: dict[str, Any] | None = None,
    ) -> None:
        """A job was started for the run (``host``, ``identity``: the machine and the process's
        identity, launch/procid.py, for local jobs)."""
        entry = self.runs.setdefault(
            run_id, {"executor": executor, "state": state, "attempts": 0, "job_ids": [], "jobs": []}
        )
        entry["attempts"] = int(entry.get("attempts", 0)) + 1
        entry["executor"] = executor
        entry["state"] = state
        entry["reason"] = None
        entry.setdefault("job_ids", []).append(job_id)
        job = {
            "job_id": job_id,
            "executor": executor,
            "submitted": now_iso(),
            "attempt": entry["attempts"],
        }
        if host is not None:
            job["host"] = host
        if identity is not None:
            job["identity"] = identity
        entry.setdefault("jobs", []).append(job)
        entry["updated"] = now_iso()

    def set_state(self, run_id: str, state: str, reason: str | None = None) -> None:
        entry = self.runs.get(run_id)
        if entry is None:
            return
        entry["state"] = state
        entry["reason"] = reason
        entry["updated"] = now_iso()

    def forget(self, run_id: str) -> None:
        """Drop a run's history (for --redo): its old jobs belong to a superseded spec."""
        old = self.runs.pop(run_id, None)
        if old is not None:
            self.data.setdefault("superseded", {}).setdefault(run_id, []).append(old)
