"""Resume, in one module: what a restart of a run continues from, and who decides to restart it.

* **What `submit` resends** (:func:`decide`): missing, cancelled and interrupted runs, failed ones
  with ``--retry-failed``, and ``--redo`` runs afresh (:func:`prepare_run_dir` moves the old folder
  aside); a folder started as another identity than the plan now names is never continued
  (:func:`check_resumable`, against the ``identity.json`` :func:`write_identity` records).
* **The requeue decision** (:func:`decide_stop`): what an interrupted job does next, from the
  signals it saw, the cancel marker and Slurm's restart count (the table is in docs/slurm.md).
* **The checkpoint rule** (:func:`select_checkpoint`): OLMo-core's own completeness test only asks
  that three files exist, so a save cut short (a crash, a full or bad disk) leaves a ``stepN``
  that resumes into a raw ``CheckpointException`` forever, the newest folder being always picked.
  So the job writes a manifest once OLMo-core reports a checkpoint saved (:data:`MANIFEST`: every
  file and its size), and a checkpoint counts only when OLMo-core's files exist and every listed
  file has its size (the job adds torch's shard index, ``callbacks.shard_index_problem``). A
  folder without a manifest counts only when no checkpoint of the run has one (older runs).
* **The fallback** (:func:`fall_back`): the newer checkpoints that do not count are moved to
  ``checkpoints/.broken/`` (never deleted) so OLMo-core resumes from the newest complete one; when
  none counts the run stops with one line (:class:`NoUsableCheckpoint`), never restarts from 0.

The store's lease (one run identity trained once per store) is decided from the owner's
reconciled state, so it lives with run state (:mod:`olmoablate.run.state`), which in turn says
where a run resumes by the rule here. No torch: `status` and `submit` run on login nodes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Protocol

from olmoablate.errors import UserError
from olmoablate.io import write_json_atomic
from olmoablate.plan.identity import short
from olmoablate.plan.layout import ResultsDir
from olmoablate.plan.names import DONE_STATES, LIVE_STATES, RunState
from olmoablate.plan.store import recorded_identity
from olmoablate.run.files import RunStatus

log = logging.getLogger(__name__)

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
    files: dict[str, int] = {}
    for root, _, names in os.walk(checkpoint):
        for name in names:
            path = Path(root) / name
            rel = path.relative_to(checkpoint).as_posix()
            if rel != MANIFEST and not name.endswith(".tmp"):
                files[rel] = path.stat().st_size
    write_json_atomic(checkpoint / MANIFEST, {"schema": 1, "files": dict(sorted(files.items()))})


def problem(checkpoint: Path, *, need_manifest: bool = True) -> str | None:
    """Why ``checkpoint`` does not count (None: it does)."""
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
    """The newest checkpoint of ``folder`` that counts, and the newer ones refused with their
    reason; ``extra_check`` (the job's, which needs torch) may refuse one the manifest accepts."""
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


def latest_checkpoint_step(checkpoint_dir: Path) -> int | None:
    """Where a run really resumes (None: from step 0)."""
    return select_checkpoint(Path(checkpoint_dir)).step


class NoUsableCheckpoint(RuntimeError):
    """Checkpoints exist but none is complete; ``str`` is the one-line reason."""


@dataclasses.dataclass(frozen=True)
class Fallback:
    """A resume that skipped incomplete newer checkpoints."""

    step: int | None  # the checkpoint resumed from (None: from scratch)
    refused: list[tuple[int, str]]  # (step, why) of each checkpoint moved aside

    @property
    def metrics(self) -> dict[str, float]:
        """The fields of the attempt's first metrics row."""
        return {
            FALLBACK_FROM_METRIC: float(max(s for s, _ in self.refused)),
            RESUMED_FROM_METRIC: float(self.step or 0),
        }

    @property
    def line(self) -> str:
        skipped = "; ".join(f"step{s}: {why}" for s, why in self.refused)
        return (
            f"incomplete checkpoint(s) moved to checkpoints/{BROKEN_DIR}/ ({skipped}); "
            f"resumed from checkpoint step {self.step}"
        )


def fall_back(
    checkpoints: Path, *, way_out: str, extra_check: Callable[[Path], str | None] | None = None
) -> Fallback | None:
    """Move the checkpoints newer than the newest that counts to ``checkpoints/.broken/`` (None:
    nothing refused); :class:`NoUsableCheckpoint` naming ``way_out`` (the command that starts
    the run over) when none counts. Rank 0 only."""
    sel = select_checkpoint(checkpoints, extra_check=extra_check)
    if not sel.refused:
        return None
    if sel.step is None:
        newest, path, why = sel.refused[0]
        raise NoUsableCheckpoint(
            f"corrupt checkpoint: step{newest} under {path.parent} is incomplete ({why}) and "
            f"no older checkpoint is complete; start the run over: {way_out}"
        )
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for step, path, why in sel.refused:
        dest = checkpoints / BROKEN_DIR / f"{path.name}-{stamp}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        path.rename(dest)
        log.warning(f"checkpoint step{step} refused ({why}); moved to {dest}")
    return Fallback(sel.step, [(s, why) for s, _, why in sel.refused])


def drop_incomplete(checkpoints: Path) -> bool:
    """Delete the checkpoint folders newer than the newest complete one, and OLMo-core's
    in-progress ``stepN-tmp`` folders (True: one was). Why: a save that failed on a full disk
    leaves its partial folder filling it, so the status write saying so would fail too and the
    run would look alive; where the save failed decides which of the two names it has."""
    freed = False
    for path in Path(checkpoints).glob("step*-tmp"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            freed = True
    for _, path in checkpoint_steps(checkpoints):
        if problem(path) is None:
            break  # the newest complete checkpoint: it and everything older stay
        shutil.rmtree(path, ignore_errors=True)
        freed = True
    return freed


class _View(Protocol):
    state: str


def decide(
    views: Mapping[str, _View], *, retry_failed: bool, redo: list[str], only: list[str] | None
) -> tuple[list[str], list[tuple[str, str]]]:
    """Which runs `submit` sends now (from :func:`olmoablate.run.state.reconcile`'s views), and
    why the others are not sent."""
    send: list[str] = []
    skip: list[tuple[str, str]] = []
    for rid, view in views.items():
        if only is not None and rid not in only:
            continue
        if rid in redo:
            if view.state in LIVE_STATES:
                raise UserError(f"--redo {rid}: run is {view.state}; `olmoablate cancel` it first")
            send.append(rid)
        elif view.state in DONE_STATES or view.state in LIVE_STATES:
            skip.append((rid, view.state))
        elif view.state == RunState.FAILED and not retry_failed:
            skip.append((rid, "failed (use --retry-failed)"))
        else:
            send.append(rid)
    return send, skip


def check_resumable(results: ResultsDir, send: list[str], redo: Collection[str]) -> None:
    """Refuse to continue a run folder started as another identity than the plan now names: the
    spec was re-planned with other data (a token file rewritten in place), and resuming would
    continue the old checkpoint on the new data under the new identity."""
    plan = results.plan
    if plan.identity is None:
        return
    for rid in send:
        if rid in redo or rid not in plan.identity.runs:
            continue
        recorded = recorded_identity(results.own_run(rid).path)
        if recorded is not None and recorded != plan.identity.runs[rid]:
            raise UserError(
                f"{results.own_run(rid).path} was started as identity {short(recorded)}, the "
                f"plan now says {short(plan.identity.runs[rid])} (`olmoablate explain` the two "
                f"plans to see why); start it over with --redo {rid}"
            )


def stale_done(results: ResultsDir, skip: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``skip`` with each finished run whose folder trained another identity than the plan now
    names (re-planned with ``--replan`` after its block's code or its data changed) saying so
    and naming ``--redo``: a bare "completed" hid that its numbers are not the plan's run."""
    plan = results.plan
    if plan.identity is None:
        return skip
    out = []
    for rid, why in skip:
        want = plan.identity.runs.get(rid)
        recorded = recorded_identity(results.own_run(rid).path)
        if why in DONE_STATES and want is not None and recorded not in (None, want):
            why = (
                f"{why} as identity {short(recorded)}, but the plan now says {short(want)} "
                f"(`olmoablate explain` the two plans); --redo {rid} trains the plan's"
            )
        out.append((rid, why))
    return out


def write_identity(results: ResultsDir, run_id: str) -> None:
    """``runs/<id>/identity.json``: the identity trained in this folder, with the versions."""
    plan = results.plan
    if plan.identity is None or run_id not in plan.identity.runs:
        return
    write_json_atomic(
        results.own_run(run_id).identity,
        {
            "identity": plan.identity.runs[run_id],
            "spec": plan.spec_name,
            "run_id": run_id,
            "versions": plan.identity.versions,
        },
    )


def prepare_run_dir(results: ResultsDir, run_id: str, fresh: bool) -> None:
    """Clear a stale cancel request; for --redo move the old run directory aside (never delete)."""
    rdir = results.own_run(run_id)  # never the folder of a run reused from another spec
    if fresh and rdir.path.exists():
        dest = results.superseded / f"{run_id}-{time.strftime('%Y%m%dT%H%M%S')}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        rdir.path.rename(dest)
    rdir.path.mkdir(parents=True, exist_ok=True)
    rdir.cancel_marker.unlink(missing_ok=True)
    RunStatus.update(rdir.status, run_id=run_id, state=RunState.PENDING, reason=None)
    write_identity(results, run_id)


#: Requeues in a row that did not move the step before the run ends ``failed``.
MAX_REQUEUES_WITHOUT_PROGRESS = 3
#: After a SIGTERM while Slurm still says RUNNING, how long to wait for the SIGUSR2 that would make
#: it a preemption (submitit and Slurm's send_user_signal send it right after the SIGTERM).
USR2_GRACE_S = 3.0


@dataclasses.dataclass(frozen=True, repr=False)
class StopDecision:
    """What an interrupted run does next: ``requeue`` (submitit), ``slurm`` (Slurm requeues it
    itself), ``cancel`` (ends cancelled) or ``stop`` (ends interrupted, resumable by ``submit``)."""

    action: str
    reason: str

    def __repr__(self) -> str:
        return f"StopDecision({self.action!r}, {self.reason!r})"


def decide_stop(
    signals: list[str],
    cancel_requested: bool,
    slurm_job: dict[str, Any] | None,
    restarts_at_start: int,
    controller_gone: int | None = None,
) -> StopDecision:
    """The meaning of a stop, from what the job can observe (docs/slurm.md's table):
    ``slurm_job`` is :func:`olmoablate.run.slurm.scontrol_job` (None off Slurm or when the
    controller cannot be asked), ``restarts_at_start`` SLURM_RESTART_COUNT at start,
    ``controller_gone`` the pid of a local job's controller that ended under the training
    process (its SIGTERM then came from the kernel, ``task.die_with_controller``)."""
    if cancel_requested:
        return StopDecision("cancel", "cancelled by user (olmoablate cancel)")
    if controller_gone is not None:
        return StopDecision(
            "stop", f"its job process {controller_gone} ended (killed?); training stopped"
        )
    if "SIGUSR2" in signals:
        return StopDecision("requeue", "SIGUSR2 (time limit or preemption): requeued")
    if slurm_job is not None and int(slurm_job.get("Restarts") or 0) > restarts_at_start:
        return StopDecision(
            "slurm", f"requeued by Slurm (restart {slurm_job['Restarts']}); resumes from checkpoint"
        )
    if "SIGTERM" in signals:
        if slurm_job is None:
            return StopDecision("cancel", "SIGTERM received: stopped by user")
        state = str(slurm_job.get("JobState") or "UNKNOWN")
        if state == "RUNNING":
            return StopDecision(
                "cancel", "SIGTERM received (scancel --signal=TERM): stopped by user"
            )
        return StopDecision("cancel", "cancelled by scancel")  # Slurm: COMPLETING/CANCELLED
    return StopDecision("stop", "training stopped before the last step")
