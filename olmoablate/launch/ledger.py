"""`results/<spec>/ledger.json`: which job ran which run, so `submit` never sends a run twice.

Layout::

    {"schema": 1, "spec_name": ..., "spec_sha256": ..., "updated": ISO,
     "runs": {run_id: {"executor": "slurm|local", "state": ..., "attempts": n,
                       "job_ids": [..], "jobs": [{"job_id", "executor", "submitted", "attempt"}],
                       "updated": ISO, "reason": str|None}}}

Every read-decide-write happens under ``file_lock(results/<spec>/.ledger.lock)`` (see
``Ledger.locked``) and every write is atomic, so two concurrent `submit` calls serialize and a
reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from olmoablate.errors import UserError
from olmoablate.io import file_lock, read_json, write_json_atomic

LEDGER_FILE = "ledger.json"
LOCK_FILE = ".ledger.lock"
SCHEMA = 1


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class Ledger:
    """In-memory view of ledger.json; mutate only inside ``Ledger.locked``."""

    def __init__(self, results_dir: Path, data: dict[str, Any]) -> None:
        self.results_dir = results_dir
        self.data = data

    @property
    def path(self) -> Path:
        return self.results_dir / LEDGER_FILE

    @classmethod
    def read(cls, results_dir: Path) -> Ledger:
        """Read without the lock (for `status`): atomic writes make this safe."""
        path = results_dir / LEDGER_FILE
        if not path.exists():
            return cls(results_dir, {"schema": SCHEMA, "spec_sha256": None, "runs": {}})
        try:
            data = read_json(path)
        except (OSError, ValueError) as err:
            raise UserError(
                f"{path}: unreadable ledger ({err}); move it aside to start over"
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("runs"), dict):
            raise UserError(f"{path}: field `runs` is missing; move the file aside to start over")
        return cls(results_dir, data)

    @classmethod
    @contextlib.contextmanager
    def locked(cls, results_dir: Path) -> Iterator[Ledger]:
        """Hold the ledger lock for a whole read-decide-write; saves on clean exit."""
        with file_lock(results_dir / LOCK_FILE):
            ledger = cls.read(results_dir)
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

    def last_job(self, run_id: str) -> dict[str, Any] | None:
        entry = self.entry(run_id)
        if not entry or not entry.get("jobs"):
            return None
        return entry["jobs"][-1]

    def record_submission(self, run_id: str, job_id: str, executor: str, state: str) -> None:
        entry = self.runs.setdefault(
            run_id, {"executor": executor, "state": state, "attempts": 0, "job_ids": [], "jobs": []}
        )
        entry["attempts"] = int(entry.get("attempts", 0)) + 1
        entry["executor"] = executor
        entry["state"] = state
        entry["reason"] = None
        entry.setdefault("job_ids", []).append(job_id)
        entry.setdefault("jobs", []).append(
            {
                "job_id": job_id,
                "executor": executor,
                "submitted": now_iso(),
                "attempt": entry["attempts"],
            }
        )
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
