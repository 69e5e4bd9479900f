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
``olmoablate.run.callbacks.shard_index_problem``). :func:`select_checkpoint` picks the newest one
that counts and says why each newer one does not. A folder without a manifest is accepted only when no checkpoint of
the run has one (a run trained before manifests existed).

The job (``olmoablate.run.job``) moves the refused newer folders aside (never deletes them) so
OLMo-core resumes from the chosen one; `status` uses the same rule to say where a run resumes.
No torch: `status` runs on login nodes.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from olmoablate.io import write_json_atomic
from olmoablate.plan.layout import RunDir
from olmoablate.run.files import RunStatus

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


# --------------------------------------------------------------------------------------------------
# Small, dependency-free pieces shared by the job wrapper (compute node) and the launcher (login
# node): kept apart so `status` does not import submitit just to read a file name.
# --------------------------------------------------------------------------------------------------


DEFAULT_TARGET = "olmoablate.run.job:run_job"
#: What a job runs: ``"package.module:function"`` (imported on the compute node) or, in tests, a
#: callable; either is called as ``target(plan_path, run_id)`` and returns the run's final status.
JobTarget = str | Callable[[str, str], dict[str, Any]]
#: Set (in the job process) by the training job's InterruptCallback once ``fit`` has taken over
#: SIGTERM/SIGUSR2: a SIGTERM seen by the job wrapper before that came before training started.
FIT_STARTED_ENV = "OLMOABLATE_FIT_STARTED"


def own_status(run: RunDir) -> RunStatus:
    """The run's own word (``runs/<id>/status.json``, typed by the contract); an empty
    :class:`RunStatus` (``present`` False) when the job never wrote one."""
    return RunStatus.read(run) or RunStatus()


def mark_status(status_path: Path, **fields: Any) -> None:
    """Update fields of the run's status.json (atomic), keeping what the training job wrote."""
    RunStatus.update(status_path, **fields)


def latest_checkpoint_step(checkpoint_dir: Path) -> int | None:
    """Step of the newest *complete* checkpoint in ``checkpoint_dir`` (None if none): the
    rule the training job resumes by (:mod:`olmoablate.run.resume`), so `status`
    says where a run really resumes."""
    return select_checkpoint(Path(checkpoint_dir)).step


# --------------------------------------------------------------------------------------------------
# One line a person can act on, from whatever exception ended a run.
#
# A training job that fails writes ``status.json`` ``reason``: the *root cause* in one line, what
# was being done and where, and the command that continues - never a traceback (that goes to the
# run's ``error.log``). The root cause is searched through the whole exception chain
# (``__cause__``/``__context__``, exception groups, and the per-rank failures that
# ``torch.distributed.checkpoint.CheckpointException`` wraps), because the interesting error - an
# ``OSError(ENOSPC)`` in a writer thread - is usually several wrappers deep. Known causes (disk
# full, quota, permission, missing file, out of memory, collective timeout, corrupt checkpoint)
# get their own wording and way out; anything else is ``Type: first line of its message``.
#
# Shared by the job (train) and its wrapper (launch), so no torch here: exceptions are recognised
# by type name, errno and message.
# --------------------------------------------------------------------------------------------------


#: ``runs/<id>/error.log``: the full traceback of every failed attempt (appended).
ERROR_LOG = "error.log"
MAX_REASON = 500


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it wraps (breadth first, each once)."""
    todo, seen = [exc], set()
    while todo and len(seen) < 100:
        cur = todo.pop(0)
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        yield cur
        todo.extend(e for e in (cur.__cause__, cur.__context__) if e is not None)
        todo.extend(getattr(cur, "exceptions", None) or [])  # ExceptionGroup
        failures = getattr(cur, "failures", None)  # torch DCP CheckpointException
        if isinstance(failures, dict):
            for value in failures.values():
                first = value[0] if isinstance(value, tuple) and value else value
                if isinstance(first, BaseException):
                    todo.append(first)


def first_line(exc: BaseException) -> str:
    text = str(exc) if type(exc).__name__ != "CheckpointException" else ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else ""


def _frames(exc: BaseException) -> list[str]:
    names: list[str] = []
    for e in chain(exc):
        names += [f.name for f in traceback.extract_tb(e.__traceback__)]
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            for value in failures.values():
                if isinstance(value, tuple) and len(value) > 1 and value[1] is not None:
                    names += [getattr(f, "name", "") for f in value[1]]
    return names


def activity(exc: BaseException, step: int | None) -> str:
    """What the job was doing, from the traceback's function names."""
    frames = _frames(exc)
    if any("save_checkpoint" in n or n == "_save_checkpoint" for n in frames):
        return f"writing checkpoint step{step}" if step is not None else "writing a checkpoint"
    if any("load_checkpoint" in n for n in frames):
        return "loading the checkpoint"
    if any("eval" in n for n in frames):
        return f"evaluating at step {step}"
    return f"at step {step}" if step else ""


def _where(err: OSError, fallback: str | None) -> str:
    """`` under FOLDER``: the folder of the file being written (above a writer's temporary
    folder, whose name means nothing to a user), relative to the working directory if inside."""
    name = err.filename or fallback
    if not name:
        return ""
    folder = Path(str(name))
    if err.filename:
        folder = folder.parent
    while folder.parent != folder and ("tmp" in folder.name or folder.name.startswith(".")):
        folder = folder.parent
    try:
        shown = str(folder.relative_to(Path.cwd()))
    except ValueError:
        shown = str(folder)
    return f" under {shown}"


def classify(
    exc: BaseException,
    *,
    step: int | None = None,
    resume: str = "olmoablate submit ... --retry-failed",
    where: str | None = None,
    log: str | None = None,
) -> str:
    """The one-line reason for ``exc`` (module docstring): ``cause; fix, then RESUME``.

    ``resume`` is the command that continues the run, ``where`` the folder to name when the
    error names none, ``log`` where the traceback went (named in the line).
    """
    doing = activity(exc, step)
    seen = f" (traceback in {log})" if log else ""

    def line(cause: str, fix: str = "") -> str:
        return _cut(f"{cause.strip()}{seen}; {fix}{'then ' if fix else ''}{resume}")

    causes = list(chain(exc))
    texts = " | ".join(f"{type(e).__name__}: {e}" for e in causes if e is not exc) + str(exc)
    low = texts.lower()
    names = {type(e).__name__ for e in causes}
    for e in causes:
        if type(e).__name__ == "NoUsableCheckpoint":
            return _cut(str(e))
    oserrors = [e for e in causes if isinstance(e, OSError) and e.errno is not None]
    for e in oserrors:
        if e.errno == errno.ENOSPC:
            return line(
                f"disk full (No space left on device) {doing}{_where(e, where)}", "free space, "
            )
        if e.errno == errno.EDQUOT:
            return line(f"disk quota exceeded {doing}{_where(e, where)}", "free space, ")
    if "no space left on device" in low:
        return line(f"disk full (No space left on device) {doing}", "free space, ")
    for e in oserrors:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            what = f"{e.strerror}: {e.filename}" if e.filename else str(e.strerror)
            return line(f"permission denied ({what}) {doing}", "fix the permissions or path, ")
    for e in causes:
        missing = isinstance(e, FileNotFoundError) or (
            isinstance(e, OSError) and e.errno == errno.ENOENT
        )
        if missing:
            name = getattr(e, "filename", None) or first_line(e)
            return line(
                f"missing file ({name}) {doing}",
                "restore it (data: `olmoablate data prepare`; or re-plan), ",
            )
    if names & {"OutOfMemoryError", "MemoryError"} or "out of memory" in low:
        oom = next(
            (e for e in causes if type(e).__name__ in ("OutOfMemoryError", "MemoryError")), exc
        )
        return line(
            f"out of memory {doing} ({first_line(oom)[:160] or type(oom).__name__})",
            "lower training.micro_batch_size or use more devices, ",
        )
    peer_lost = any(
        s in low for s in ("connection closed by peer", "connection reset by peer", "broken pipe")
    )
    if peer_lost or (
        ("nccl" in low or "gloo" in low or "DistBackendError" in names)
        and ("timeout" in low or "timed out" in low or "watchdog" in low)
    ):
        what = "lost a peer rank" if peer_lost else "NCCL/collective timeout"
        return line(
            f"{what} {doing} (a rank stopped responding: a node lost or hung)",
            "check the nodes (sinfo), ",
        )
    if "CheckpointException" in names or any(
        s in texts for s in ("PytorchStreamReader failed", "unexpected EOF", "UnpicklingError")
    ):
        root = next((e for e in causes if type(e).__name__ != "CheckpointException"), exc)
        return line(
            f"corrupt or unreadable checkpoint {doing} "
            f"({type(root).__name__}: {first_line(root)[:160]})",
            "move the newest checkpoints/stepN aside, ",
        )
    root = causes[-1] if len(causes) > 1 else exc
    shown = f"{type(exc).__name__}: {first_line(exc)}"
    if root is not exc:
        shown += f" (caused by {type(root).__name__}: {first_line(root)})"
    return line(f"{shown} {doing}")


def _cut(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= MAX_REASON else one[: MAX_REASON - 1] + "…"


def write_traceback(log_path: Path, exc: BaseException, header: str) -> bool:
    """Append the full traceback of ``exc`` to ``log_path``; False when it cannot be written
    (a full disk): the caller then leaves it on stderr, i.e. in the job's own log."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    for e in chain(exc):
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            text += f"\n{type(e).__name__} per rank:\n{e}\n"
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(f"==== {header}\n{text}\n")
        return True
    except OSError:
        return False
