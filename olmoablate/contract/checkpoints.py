"""Which checkpoints of a run count: only complete ones, verified before a resume.

OLMo-core writes a checkpoint into a temporary folder and renames it into place, and its own
completeness rule (``Checkpointer.dir_is_checkpoint``) only asks that three files *exist*. A
crash mid-write on some file systems, a bad disk or a copy that ran out of space leaves a
``stepN`` folder whose shards are truncated, and the resume then fails with a raw
``CheckpointException`` - and keeps failing, because the newest folder is always picked.

So the training job writes, once OLMo-core reports a checkpoint saved, a manifest
(``stepN/.olmoablate-complete.json``: every file of the checkpoint and its size), and a
checkpoint *counts* only when OLMo-core's files exist, the manifest is there and every file it
lists has its recorded size (the job adds torch's own shard index as a second check,
``olmoablate.train.resume.shard_index_problem``). :func:`select_checkpoint` picks the newest one
that counts and says why each newer one does not. A folder without a manifest is accepted only when no checkpoint of
the run has one (a run trained before manifests existed).

The job (``olmoablate.train.job``) moves the refused newer folders aside (never deletes them) so
OLMo-core resumes from the chosen one; `status` uses the same rule to say where a run resumes.
No torch: `status` runs on login nodes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path

from olmoablate.io import write_json_atomic

#: Written into ``stepN/`` after OLMo-core saved it: every file and its size.
MANIFEST = ".olmoablate-complete.json"
#: Where refused checkpoints are moved (inside the run's checkpoints folder).
BROKEN_DIR = ".broken"
#: Fields of the first metrics.jsonl row of an attempt that resumed past incomplete checkpoints:
#: the newest checkpoint refused and the one resumed from.
FALLBACK_FROM_METRIC = "checkpoint/refused step"
RESUMED_FROM_METRIC = "checkpoint/resumed from step"
#: OLMo-core's own completeness rule (``Checkpointer.dir_is_checkpoint``).
OLMO_CORE_FILES = ("train/rank0.pt", "model_and_optim/.metadata", ".metadata.json")


@dataclasses.dataclass(frozen=True)
class Selection:
    """The checkpoint a resume starts from and the newer ones that do not count."""

    step: int | None
    path: Path | None
    #: (step, folder, why) of every checkpoint newer than ``step`` that is incomplete
    refused: list[tuple[int, Path, str]]


def checkpoint_steps(folder: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``stepN`` folder, newest first."""
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return []
    out = [
        (int(p.name[4:]), p)
        for p in entries
        if p.name.startswith("step") and p.name[4:].isdigit() and p.is_dir()
    ]
    return sorted(out, reverse=True)


def write_manifest(checkpoint: Path) -> None:
    """Record every file of a saved checkpoint and its size (the completion marker)."""
    files: dict[str, int] = {}
    for root, _, names in os.walk(checkpoint):
        for name in names:
            path = Path(root) / name
            rel = path.relative_to(checkpoint).as_posix()
            if rel != MANIFEST and not name.endswith(".tmp"):
                files[rel] = path.stat().st_size
    write_json_atomic(checkpoint / MANIFEST, {"schema": 1, "files": dict(sorted(files.items()))})


def problem(checkpoint: Path, *, need_manifest: bool = True) -> str | None:
    """Why ``checkpoint`` does not count (None: it is complete)."""
    for rel in OLMO_CORE_FILES:
        if not (checkpoint / rel).is_file():
            return f"{rel} missing"
    manifest = checkpoint / MANIFEST
    if not manifest.is_file():
        return (
            f"no completion marker ({MANIFEST}): the save did not finish" if need_manifest else None
        )
    try:
        files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        assert isinstance(files, dict) and files
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        return f"{MANIFEST} unreadable"
    for rel, size in files.items():
        path = checkpoint / rel
        try:
            actual = path.stat().st_size
        except OSError:
            return f"{rel} missing"
        if actual != size:
            return f"{rel} is {actual} of {size} bytes (truncated or overwritten)"
    return None


def select_checkpoint(
    folder: Path, extra_check: Callable[[Path], str | None] | None = None
) -> Selection:
    """The newest checkpoint of ``folder`` that counts (module docstring), and the newer ones
    refused with their reason. ``extra_check`` (the job: torch's own shard index, which
    needs torch) may refuse a checkpoint the manifest accepts."""
    found = checkpoint_steps(folder)
    need = any((p / MANIFEST).exists() for _, p in found)
    refused: list[tuple[int, Path, str]] = []
    for step, path in found:
        why = problem(path, need_manifest=need)
        if why is None and extra_check is not None:
            why = extra_check(path)
        if why is None:
            return Selection(step, path, refused)
        refused.append((step, path, why))
    return Selection(None, None, refused)
