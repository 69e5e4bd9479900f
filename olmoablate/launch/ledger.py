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
reader never sees half a file. The ledger is launch's own record (no other stage reads it; the
report learns where a run executed from the run's own summary.json): the rest of launch reads it
through :meth:`Ledger.record`, typed by the contract
(:class:`olmoablate.contract.runfiles.LedgerRun`); :meth:`Ledger.save` is its one writer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from olmoablate.contract.layout import ResultsDir
from olmoablate.contract.runfiles import LedgerFile, LedgerJob, LedgerRun
from olmoablate.contract.runstates import RunState, now_iso
from olmoablate.errors import UserError
from olmoablate.io import file_lock, read_json, write_json_atomic

#: Held for every read-decide-write of the ledger (launch's own file, next to ledger.json).
LOCK_FILE = ".ledger.lock"
SCHEMA = 1


#: What the ledger knows of one run and of one of its jobs (the contract's typed entries).
RunRecord, JobRecord = LedgerRun, LedgerJob


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
        LedgerFile.check(data, str(path))  # a one-line error naming the field
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

    @property
    def spec_sha256(self) -> str | None:
        """The spec hash the ledger's jobs were submitted for."""
        return LedgerFile.check(self.data, str(self.path)).spec_sha256

    def entry(self, run_id: str) -> dict[str, Any] | None:
        return self.runs.get(run_id)

    def record(self, run_id: str) -> RunRecord | None:
        """The run's entry, typed (None: never submitted, or forgotten by --redo)."""
        entry = self.entry(run_id)
        return None if entry is None else LedgerRun.of(entry, f"{self.path}: runs.{run_id}")

    def mark_queued(
        self, run_id: str, owner_pid: int, host: str, owner_identity: dict[str, Any] | None = None
    ) -> None:
        """A local `submit` (process ``owner_pid`` on ``host``) holds the run in its queue."""
        entry = self.runs.setdefault(
            run_id, {"executor": "local", "attempts": 0, "job_ids": [], "jobs": []}
        )
        entry.update(
            executor="local",
            state=RunState.QUEUED,
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
        entry["attempts"] = LedgerRun.of(entry, str(self.path)).attempts + 1
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
