"""Atomic file writes and small JSON helpers shared by every stage.

Why: users interrupt commands, clusters kill jobs, and two `submit` calls can race. A reader must
only ever see the old file or the new one, never half of one, so every write goes to a temporary
file in the same directory, is fsynced, then renamed over the target (atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old or the new content."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        # mkstemp creates 0600; give the file the permissions a plain open() would (umask), so
        # results stay readable by Slurm jobs and colleagues.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, no whitespace): the input of every hash we record."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def sha256_of(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks (token files are hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> None:
    write_text_atomic(path, json.dumps(obj, indent=indent, sort_keys=False, default=str) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """An exclusive advisory lock (fcntl) held for the duration of the block.

    Used by the ledger so two concurrent `submit` calls serialize their read-modify-write.
    """
    import fcntl

    lock_path = Path(path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


#: ``runs/<run_id>/wandb.json``: the run's W&B id, project and URL, written by the training job
#: (`olmoablate.train.wandb_log`) and read by `report` / `olmoablate.results`.
WANDB_LINK_FILE = "wandb.json"


def user_cache_path(name: str) -> Path:
    """``$XDG_CACHE_HOME/olmoablate/<name>`` (default ``~/.cache``): facts derived from files
    that `validate` would otherwise recompute at every start (a login node's fast start)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "olmoablate" / name


def _cache_entry(name: str, key: str) -> Path:
    """One small file per key (``<name>/<sha256(key)>.json``): a lookup reads only its own
    entry, however many the folder holds, and concurrent writers of different keys never meet."""
    return user_cache_path(name) / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def user_cache_get(name: str, key: str) -> Any:
    """The value stored under ``key`` in the user cache folder ``name``, or None.

    Best effort by design: a missing, unreadable or corrupt entry is a miss, never an error. Keys
    must name everything the value depends on (a file's resolved path, size and mtime, ...).
    """
    try:
        doc = json.loads(_cache_entry(name, key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc.get("value") if isinstance(doc, dict) and doc.get("key") == key else None


def user_cache_put(name: str, key: str, value: Any, *, keep: int = 64) -> None:
    """Store ``value`` (JSON) under ``key``, keeping the ``keep`` most recently stored keys of
    the folder; a read-only or full home just never caches."""
    path = _cache_entry(name, key)
    try:
        write_json_atomic(path, {"key": key, "value": value}, indent=None)
        now = time.time_ns()  # explicit: the file system's own mtime may be coarser than puts
        os.utime(path, ns=(now, now))
        entries = sorted(path.parent.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[: max(0, len(entries) - keep)]:
            old.unlink(missing_ok=True)
    except OSError:
        pass  # includes an entry another process removed while we sorted
