"""Checkpoints that fail safe (the rule is :mod:`olmoablate.contract.checkpoints`).

* :class:`CheckpointManifestCallback` writes the completion manifest of every checkpoint once
  OLMo-core reports it saved (``post_checkpoint_saved``: after the last byte of an async save
  too), on rank 0 only.
* :func:`choose_resume_point`, called by the job before the trainer is built, picks the newest
  checkpoint that counts; newer, incomplete ones are moved to ``checkpoints/.broken/`` (kept as
  evidence, never deleted) so OLMo-core's own ``latest_checkpoint`` resumes from the chosen one,
  and the job says so in status.json and in the first metrics row of the attempt. When
  checkpoints exist but none counts it raises :class:`NoUsableCheckpoint` with the one line
  that names the checkpoint and the way out: the run is not silently restarted from step 0.
* :func:`failure_reason`: the one-line root cause of a failed attempt for status.json
  (:mod:`olmoablate.contract.faults`), its traceback appended to ``runs/<id>/error.log``.
"""

from __future__ import annotations

import errno
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from olmo_core.distributed.utils import barrier, get_rank, is_distributed
from olmo_core.train.callbacks import Callback

from olmoablate.contract import checkpoints as ck
from olmoablate.contract import faults
from olmoablate.contract.runfiles import RunStatus
from olmoablate.contract.runstates import RunState, now_iso

if TYPE_CHECKING:  # pragma: no cover - typing only
    from olmoablate.train.plan import RunContext

log = logging.getLogger(__name__)


class NoUsableCheckpoint(RuntimeError):
    """Checkpoints exist but none is complete; ``str`` is the one-line reason."""


@dataclass
class CheckpointManifestCallback(Callback):
    """Marks each saved checkpoint complete (``stepN/.olmoablate-complete.json``)."""

    #: After OLMo-core's checkpointer (priority 1) in every hook.
    priority: ClassVar[int] = 0

    def post_checkpoint_saved(self, path: Any) -> None:
        if get_rank() != 0:
            return
        folder = Path(str(path))
        if folder.is_dir():  # a remote (URL) save folder has no local files to list
            ck.write_manifest(folder)


def shard_index_problem(checkpoint: Path) -> str | None:
    """Why torch's own index of the model/optimizer shards (``model_and_optim/.metadata``: for
    every tensor the file, offset and length it was written to) does not fit the files on disk
    (None: it fits). Independent of the manifest, so it also catches a truncated shard of a
    checkpoint written before manifests existed."""
    import pickle

    index = checkpoint / "model_and_optim" / ".metadata"
    try:
        with open(index, "rb") as fh:
            storage = pickle.load(fh).storage_data  # noqa: S301 - the run's own checkpoint
        need: dict[str, int] = {}
        for info in storage.values():
            end = int(info.offset) + int(info.length)
            need[info.relative_path] = max(need.get(info.relative_path, 0), end)
    except Exception as err:  # noqa: BLE001 - an unreadable index is a refused checkpoint
        return f"model_and_optim/.metadata unreadable ({type(err).__name__})"
    for rel, size in sorted(need.items()):
        try:
            actual = (index.parent / rel).stat().st_size
        except OSError:
            return f"model_and_optim/{rel} missing"
        if actual < size:
            return f"model_and_optim/{rel} is {actual} of {size} bytes torch's index needs"
    return None


@dataclass(frozen=True)
class Fallback:
    """A resume that skipped incomplete newer checkpoints."""

    step: int | None  # the checkpoint resumed from (None: from scratch)
    refused: list[tuple[int, str]]  # (step, why) of each checkpoint moved aside

    @property
    def metrics(self) -> dict[str, float]:
        """The fields of the attempt's first metrics row that record the fallback."""
        return {
            ck.FALLBACK_FROM_METRIC: float(max(s for s, _ in self.refused)),
            ck.RESUMED_FROM_METRIC: float(self.step or 0),
        }

    @property
    def line(self) -> str:
        skipped = "; ".join(f"step{s}: {why}" for s, why in self.refused)
        return (
            f"incomplete checkpoint(s) moved to checkpoints/{ck.BROKEN_DIR}/ ({skipped}); "
            f"resumed from checkpoint step {self.step}"
        )


def choose_resume_point(checkpoints: Path, *, way_out: str) -> Fallback | None:
    """Make the newest complete checkpoint the one OLMo-core resumes from (module docstring).

    Returns None when nothing was refused. ``way_out`` is the command that starts the run over
    (named in the error when no checkpoint counts). Rank 0 decides and moves; all ranks wait.
    """
    result: Fallback | None = None
    error: str | None = None
    if get_rank() == 0:
        sel = ck.select_checkpoint(checkpoints, extra_check=shard_index_problem)
        if sel.refused and sel.step is None:
            newest, path, why = sel.refused[0]
            error = (
                f"corrupt checkpoint: step{newest} under {path.parent} is incomplete ({why}) and "
                f"no older checkpoint is complete; start the run over: {way_out}"
            )
        elif sel.refused:
            stamp = time.strftime("%Y%m%dT%H%M%S")
            for step, path, why in sel.refused:
                dest = checkpoints / ck.BROKEN_DIR / f"{path.name}-{stamp}"
                dest.parent.mkdir(parents=True, exist_ok=True)
                path.rename(dest)
                log.warning(f"checkpoint step{step} refused ({why}); moved to {dest}")
            result = Fallback(sel.step, [(s, why) for s, _, why in sel.refused])
            log.warning(result.line)
    if is_distributed():
        from olmo_core.distributed.utils import broadcast_object

        error, result = broadcast_object((error, result))
        barrier()
    if error is not None:
        raise NoUsableCheckpoint(error)
    return result


def resume_point(ctx: RunContext, base: dict[str, Any], previous: RunStatus) -> Any:
    """Make the newest *complete* checkpoint the one OLMo-core resumes from
    (:mod:`olmoablate.train.resume`); a fallback is recorded in ``base`` (every status.json
    of the run from now on) and returned for the attempt's first metrics row."""
    results = ctx.run_dir.path.parent.parent
    fallback = choose_resume_point(
        ctx.run_dir.checkpoints, way_out=f"olmoablate submit {results} --redo {ctx.run_id}"
    )
    base["recovery"] = fallback.line if fallback is not None else previous.recovery
    return fallback


def failure_reason(ctx: RunContext, error: BaseException, step: int | None) -> str:
    """The one-line root cause of a failed attempt (:mod:`olmoablate.contract.faults`); the full
    traceback goes to ``runs/<id>/error.log`` (or, on a full disk, stays in the job's log)."""
    results = ctx.run_dir.path.parent.parent
    log_path = ctx.run_dir.path / faults.ERROR_LOG
    header = f"{now_iso()} {ctx.run_id} step {step}"
    kept = faults.write_traceback(log_path, error, header)
    if not kept:
        log.error("traceback of the failure (not written to %s)", log_path, exc_info=error)
    return faults.classify(
        error,
        step=step,
        resume=f"olmoablate submit {results} --retry-failed",
        where=str(ctx.run_dir.checkpoints),
        log=str(log_path) if kept else "the job's log",
    )


def record_failure(write: Any, ctx: RunContext, step: int, reason: str, **extra: Any) -> None:
    """``write("failed", step, reason=...)``, and on a full disk make room first.

    Why: a save that fails with ENOSPC leaves its partial ``stepN`` folder filling the disk, so
    the status write that says so fails too and the run looks alive. Checkpoint folders newer
    than the newest complete one are incomplete by definition (no completion marker): they are
    deleted, once, and the write retried; complete checkpoints are never touched.
    """
    try:
        write(RunState.FAILED, step, reason=reason, **extra)
        return
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        full = err
    freed = False
    for _, path in ck.checkpoint_steps(ctx.run_dir.checkpoints):
        if ck.problem(path) is None:
            break  # the newest complete checkpoint: it and everything older stay
        shutil.rmtree(path, ignore_errors=True)
        freed = True
    if not freed:
        raise full
    write(RunState.FAILED, step, reason=reason, **extra)
