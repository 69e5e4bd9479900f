"""The OLMo-core callbacks of the training job that are not records or numeric guards
(:mod:`olmoablate.run.records`, :mod:`olmoablate.run.guards`): every side effect of the job is a
:class:`Callback`, so the training loop itself stays OLMo-core's.

Here: a looped model's curriculum, signals, status.json while training, the looped evaluators,
W&B (optional, never required) and the checkpoint side of resume.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import pickle
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from olmo_core.distributed.utils import barrier, get_rank, get_world_size, is_distributed
from olmo_core.train.callbacks import (
    Callback,
    CheckpointerCallback,
    DownstreamEvaluatorCallbackConfig,
    EvaluatorCallback,
)

from olmoablate.io import write_json_atomic
from olmoablate.plan import metrics as metric_names
from olmoablate.plan.accounting import total_train_flops
from olmoablate.plan.metrics import CE_LOSS
from olmoablate.plan.names import STATUS_FILE, RunState, now_iso
from olmoablate.plan.planfile import RunEntry
from olmoablate.run import faults, resume
from olmoablate.run.eval import WholeSetLMEvaluatorCallbackConfig
from olmoablate.run.files import RunStatus
from olmoablate.run.records import _model_of, logged_steps, sync_before_checkpoint

if TYPE_CHECKING:  # pragma: no cover - typing only
    from olmo_core.train import Trainer

    from olmoablate.run.runplan import RunContext


log = logging.getLogger(__name__)


@dataclass
class LoopCurriculumCallback(Callback):
    """Keeps a looped model's loop count on its curriculum and records per-loop state norms.

    The trainer counts a batch's FLOPs right after fetching it, before ``pre_step``, so b(step) is
    set in ``pre_load_batch`` (and again in ``pre_step``, ahead of OLMo-core's SpeedMonitor), and
    the train module's cached ``num_flops_per_token`` is cleared whenever b changes: throughput,
    MFU and total FLOPs all use the loop count actually trained. Models without the hooks (the
    non-looped arms) are left alone.
    """

    priority: ClassVar[int] = 10

    _loops: Any = None

    def _set(self, step: int) -> None:
        """``step`` is OLMo-core's 1-based step about to run, the convention of
        :meth:`olmoablate.plan.arch.Looped.loops_at_step` (the first step trains with
        ``loops_at_step(1)``), which the model's ``set_train_step`` applies."""
        model = _model_of(self.trainer)
        hook = getattr(model, "set_train_step", None)
        if not callable(hook):
            return
        hook(step)
        loops = getattr(model, "current_loops", None)
        if loops != self._loops:
            # TransformerTrainModule.num_flops_per_token is lru_cached; drop the stale value.
            cached = getattr(type(self.trainer.train_module), "num_flops_per_token", None)
            if hasattr(cached, "cache_clear"):
                cached.cache_clear()  # type: ignore[union-attr]
            self._loops = loops

    def pre_train(self) -> None:
        self._set(self.trainer.global_step + 1)

    def pre_step(self, batch: dict[str, Any]) -> None:
        del batch
        self._set(self.step)

    def pre_load_batch(self) -> None:
        # After every post_step hook (evals see the b of the step they follow).
        self._set(self.trainer.global_step + 1)

    def post_train_batch(self) -> None:
        # The norms stay device tensors: float() here would add b host syncs per step to the
        # looped arms only (the other arms' metrics are synced once per metrics interval).
        model = _model_of(self.trainer)
        norms = getattr(model, "last_h_norm_tensors", None)
        if norms is None:
            return
        for t, v in enumerate(norms):
            self.trainer.record_metric(metric_names.h_norm(t + 1), v.detach())
        loops = getattr(model, "current_loops", None)
        if loops is not None:
            self.trainer.record_metric(metric_names.LOOPS, float(loops))


@dataclass
class InterruptCallback(Callback):
    """SIGTERM/SIGUSR2 -> OLMo-core's graceful cancel (checkpoint, then ``fit`` returns).

    Slurm (``--signal``) and submitit send SIGUSR2 before a time limit or preemption, so it gets
    SIGTERM's treatment; the previous handlers (submitit's requeue) come back in ``close``. Every
    signal is kept in order in ``signals`` (a preemption sends SIGTERM then SIGUSR2), so the job
    wrapper (olmoablate.run.task) can tell a user's stop from a requeue.
    """

    signal_received: str | None = None
    signals: list[str] = field(default_factory=list)
    _previous: dict[int, Any] = field(default_factory=dict)

    def _handle(self, signum: int, frame: Any) -> None:
        del frame
        name = signal.Signals(signum).name
        self.signal_received = name
        self.signals.append(name)
        log.warning(f"{name} received: saving a checkpoint and stopping")
        self.trainer.cancel_run(f"{name} received")

    def pre_train(self) -> None:
        # Tells the job wrapper that from now on a stop is a checkpoint, not a bare exit.
        os.environ["OLMOABLATE_FIT_STARTED"] = "1"
        for sig in (signal.SIGTERM, signal.SIGUSR2):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. some in-process executors)
                pass

    def close(self) -> None:
        for sig, handler in self._previous.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, TypeError):
                pass
        self._previous.clear()


@dataclass
class StatusCallback(Callback):
    """Writes ``status.json`` (state ``running``) every ``interval`` steps, atomically, rank 0."""

    path: str = STATUS_FILE
    base: dict[str, Any] = field(default_factory=dict)
    interval: int = 5
    total_steps: int = 0
    global_batch_size: int = 0
    _last_loss: float | None = None
    _t0: float = 0.0
    _s0: int = 0

    def _write(self, step: int) -> None:
        if get_rank() != 0:
            return
        elapsed = time.perf_counter() - self._t0
        tps = (step - self._s0) * self.global_batch_size / elapsed if elapsed > 0 else None
        RunStatus.model_validate(
            {
                **self.base,
                "state": RunState.RUNNING,
                "step": step,
                "total_steps": self.total_steps,
                "tokens": step * self.global_batch_size,
                "last_loss": self._last_loss,
                "tokens_per_s": tps if step > self._s0 else None,
            }
        ).write(Path(self.path))

    def pre_train(self) -> None:
        self._t0 = time.perf_counter()
        self._s0 = self.trainer.global_step
        self._write(self.trainer.global_step)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if CE_LOSS in metrics:
            self._last_loss = float(metrics[CE_LOSS])
            if step % self.interval == 0:
                self._write(step)


class LoopedEvaluatorCallback(EvaluatorCallback):
    """OLMo-core's evaluator, plus the held-out loss at each extra loop count of a looped model:
    the standard pass keeps OLMo-core's names (``eval/lm/<set>/CE loss``), each extra pass is
    recorded as ``eval/lm/<set>/CE loss (loops=<n>)`` (and PPL)."""

    loop_counts: list[int]
    #: Do not record the loop count the model trains with under ``(loops=n)`` names: its numbers
    #: are the standard pass's (plain names). The downstream evaluator skips it; the LM evaluator
    #: records the standard pass's numbers under that name too (the report's loop-horizon table
    #: reads every count from the ``(loops=n)`` columns). Neither scores the set twice.
    skip_trained_loops: bool = False

    def perform_eval(self, prefix: str = "eval") -> None:
        for evaluator in self.evaluators:
            if hasattr(evaluator, "last_metrics"):
                evaluator.last_metrics = None  # filled again by this standard pass
        super().perform_eval(prefix)
        model = _model_of(self.trainer)
        if not self.loop_counts or not hasattr(model, "current_loops"):
            return
        from olmo_core.data.utils import get_labels
        from olmo_core.utils import get_default_device, move_to_device

        # OLMo-core's own pass counts every DP rank's tokens (numel x dp world size) against
        # eval_duration: the extra passes must too, or on W ranks they would score W times the
        # tokens of the standard pass (a different token set per loop count).
        dp_world_size = get_world_size(self.trainer.dp_process_group)
        trained_loops = int(model.current_loops)
        counts = [int(n) for n in self.loop_counts]
        standard = [getattr(ev, "last_metrics", None) for ev in self.evaluators]
        if trained_loops in counts and (self.skip_trained_loops or None not in standard):
            # The standard pass just scored the model at this very loop count (same weights, same
            # data): a second pass would only reproduce its numbers, at the cost of a whole eval.
            counts.remove(trained_loops)
            if not self.skip_trained_loops:  # every evaluator kept its numbers (checked above)
                for evaluator, last in zip(self.evaluators, standard, strict=True):
                    for name, value in last.items():  # type: ignore[union-attr]
                        self.trainer.record_metric(
                            metric_names.with_loops(
                                f"{prefix}/{evaluator.name}/{name}", trained_loops
                            ),
                            value,
                        )
        collect = [getattr(ev, "collect_depth", None) for ev in self.evaluators]
        try:
            for evaluator in self.evaluators:
                if hasattr(evaluator, "collect_depth"):
                    evaluator.collect_depth = False  # the standard pass scored the profile
            for n in counts:
                model.current_loops = n  # forward() uses it when n_loops is not given
                for evaluator in self.evaluators:
                    evaluator.reset_metrics()
                    eval_tokens = 0
                    for i, batch in enumerate(evaluator, start=1):
                        eval_tokens += batch["input_ids"].numel() * dp_world_size
                        batch = move_to_device(batch, get_default_device())
                        with torch.no_grad():
                            out = self.trainer.train_module.eval_batch(  # type: ignore[attr-defined]
                                batch, labels=get_labels(batch)
                            )
                            logits, _, ce_loss, _ = out
                            evaluator.update_metrics(batch, ce_loss, logits)
                        if self.eval_duration.due(step=i, tokens=eval_tokens, epoch=1):
                            break
                    for name, value in evaluator.compute_metrics().items():
                        self.trainer.record_metric(
                            metric_names.with_loops(f"{prefix}/{evaluator.name}/{name}", n), value
                        )
        finally:
            model.current_loops = trained_loops
            for evaluator, was in zip(self.evaluators, collect, strict=True):
                if was is not None:
                    evaluator.collect_depth = was


@dataclass
class LoopedLMEvaluatorCallbackConfig(WholeSetLMEvaluatorCallbackConfig):
    """The whole-set LM evaluator (`olmoablate.run.eval`), looped for looped arms."""

    loop_counts: list[int] = field(default_factory=list)

    def build(self, trainer: Trainer) -> Callback | None:
        return _with_loop_counts(super().build(trainer), self.loop_counts)


@dataclass
class LoopedDownstreamEvaluatorCallbackConfig(DownstreamEvaluatorCallbackConfig):
    """OLMo-core's downstream evaluator, looped for looped arms:
    ``eval/downstream/<task> (<metric>) (loops=<n>)``."""

    loop_counts: list[int] = field(default_factory=list)

    def build(self, trainer: Trainer) -> Callback | None:
        return _with_loop_counts(super().build(trainer), self.loop_counts, skip_trained=True)


def _with_loop_counts(
    base: Callback | None, loop_counts: list[int], skip_trained: bool = False
) -> Callback | None:
    """``base`` as a :class:`LoopedEvaluatorCallback` (same evaluators and schedule) when there
    are loop counts to evaluate."""
    if base is None or not loop_counts:
        return base
    assert isinstance(base, EvaluatorCallback)
    cb = LoopedEvaluatorCallback(
        evaluators=base.evaluators,
        eval_interval=base.eval_interval,
        fixed_steps=base.fixed_steps,
        eval_on_startup=base.eval_on_startup,
        eval_on_finish=base.eval_on_finish,
        cancel_after_first_eval=base.cancel_after_first_eval,
        eval_duration=base.eval_duration,
        log_interval=base.log_interval,
    )
    cb.loop_counts = list(loop_counts)
    cb.skip_trained_loops = skip_trained
    return cb


# -- W&B, the way its users read an ablation. Every comparison is at matched tokens, so every
# metric's x-axis is ``tokens`` and the cumulative ``train FLOPs`` (the plan's convention,
# curriculum-aware) rides along for a compute axis; group = spec/group, job_type = arm, tags for
# spec, size, seed and arm; one W&B run per arm across requeues (a stable id, ``resume="allow"``).
# Offline by default, ``WANDB_MODE`` wins, and any wandb failure only logs a warning.

#: W&B-only axis names (never in metrics.jsonl): tokens seen and cumulative training FLOPs.
TOKENS = "tokens"
TRAIN_FLOPS = "train FLOPs"


def wandb_id(spec_name: str, run_id: str) -> str:
    return hashlib.sha1(f"{spec_name}/{run_id}".encode()).hexdigest()[:16]


def tags_of(spec_name: str, run: RunEntry) -> list[str]:
    """W&B caps a tag at 64 characters."""
    tags = [f"spec:{spec_name}", f"size:{run.size}", f"seed:{run.seed}", f"arm:{run.arm}"]
    return [t[:64] for t in tags]


class FlopsAxis:
    """Cumulative training FLOPs after ``step`` steps (a picklable callable)."""

    def __init__(self, run: RunEntry) -> None:
        self.dims = run.size_dims
        self.arch = run.architecture
        self.seq = run.training.sequence_length
        self.gbs = run.training.global_batch_size

    def __call__(self, step: int) -> float:
        return float(total_train_flops(self.dims, self.arch, self.seq, self.gbs, step))


@dataclass
class WandBLoggerCallback(Callback):
    """One W&B run per arm (rank 0 only); ``runs/<id>/wandb.json`` records its id, project and
    (online) URL, which `report` links to."""

    priority: ClassVar[int] = 3

    run_id: str = ""
    wandb_id: str = ""
    project: str = "olmoablate"
    entity: str | None = None
    group: str | None = None
    job_type: str | None = None
    tags: list[str] = field(default_factory=list)
    mode: str = "offline"
    directory: str = "."
    #: where the id/project/URL are recorded for `report` (None: not recorded)
    link_path: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    global_batch_size: int = 0
    #: cumulative train FLOPs after a step (None: not logged)
    flops: Any = None
    _run: Any = None

    def pre_train(self) -> None:
        if get_rank() != 0:
            return
        mode = os.environ.get("WANDB_MODE") or self.mode
        if mode == "disabled":
            return
        try:
            import wandb

            Path(self.directory).mkdir(parents=True, exist_ok=True)
            run = wandb.init(
                id=self.wandb_id,
                name=self.run_id,
                resume="allow",
                project=self.project,
                entity=self.entity,
                group=self.group,
                job_type=self.job_type,
                tags=self.tags,
                config=self.config,
                mode=mode,  # type: ignore[arg-type]
                dir=self.directory,
                reinit="create_new",  # several arms trained in one process (tests, local pool)
            )
            run.define_metric(TOKENS)
            run.define_metric(TRAIN_FLOPS, step_metric=TOKENS)
            run.define_metric("*", step_metric=TOKENS)
            self._run = run
            self._write_link(mode)
        except Exception as err:  # noqa: BLE001 - wandb is optional by design
            log.warning(f"wandb disabled for this run ({type(err).__name__}: {err})")
            self._run = None

    def _write_link(self, mode: str) -> None:
        run = self._run
        if self.link_path is None:
            return
        url = getattr(run, "url", None) if mode == "online" else None
        write_json_atomic(
            self.link_path,
            {
                "id": run.id,
                "project": self.project,
                "entity": getattr(run, "entity", None) or self.entity,
                "group": self.group,
                "job_type": self.job_type,
                "mode": mode,
                "url": url or None,
            },
        )

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if self._run is None:
            return
        row = {k: float(v) for k, v in metrics.items()}
        row[TOKENS] = float(step * self.global_batch_size)
        if self.flops is not None:
            row[TRAIN_FLOPS] = self.flops(step)
        try:
            self._run.log(row, step=step)
        except Exception as err:  # noqa: BLE001
            log.warning(f"wandb logging failed, disabling ({err})")
            self._run = None

    def close(self) -> None:
        if self._run is not None:
            try:
                self._run.finish()
            except Exception as err:  # noqa: BLE001
                log.warning(f"wandb finish failed ({err})")
            self._run = None


# -- Checkpoints that fail safe: the rules are :mod:`olmoablate.run.resume` (torch-free); here the
# checkpointer that saves a step only once its records are on disk, the callback that marks a save
# complete, torch's shard-index check and the rank-0 fallback shared with every rank.


@dataclass
class RecordsFirstCheckpointerCallback(CheckpointerCallback):
    """OLMo-core's checkpointer, saving step k after *all* of step k, its records on disk first.

    Why: OLMo-core saves in ``post_train_batch``, before the step's evaluations (``post_step``)
    and before the step's metrics row can be complete, so a SIGKILL right after a checkpoint lost
    that row for good: the resume skips every step up to the checkpoint's. Here the save runs in
    ``post_step``, after every other callback's (the evaluators, the speed monitor), and begins
    with :func:`olmoablate.run.records.sync_before_checkpoint` (rows of steps <= k written and
    fsynced). A checkpoint of step k therefore never exists without the rows of steps <= k, and a
    resume from it keeps exactly those (:mod:`olmoablate.run.records`' merge rule). Saving after
    the evaluation also restores the RNG state the uninterrupted run continues with.
    Everything else (intervals, async saves, ``max_checkpoints``, the final save in
    ``post_train``) is OLMo-core's own.
    """

    #: Last in every hook: the step's evaluations and metrics come first.
    priority: ClassVar[int] = -100

    def post_train_batch(self) -> None:
        """Nothing here: OLMo-core's per-step checkpoint logic runs in :meth:`post_step`."""

    def post_step(self) -> None:
        super().post_train_batch()

    def _save_checkpoint(self, save_async: bool | None = None, ephemeral: bool = False) -> str:
        sync_before_checkpoint(self.trainer)
        return super()._save_checkpoint(save_async=save_async, ephemeral=ephemeral)


@dataclass
class CheckpointManifestCallback(Callback):
    """Marks each checkpoint complete (:data:`olmoablate.run.resume.MANIFEST`) once OLMo-core
    reports it saved (after the last byte of an async save too), rank 0."""

    #: After OLMo-core's checkpointer (priority 1) in every hook.
    priority: ClassVar[int] = 0

    def post_checkpoint_saved(self, path: Any) -> None:
        if get_rank() != 0:
            return
        folder = Path(str(path))
        if folder.is_dir():  # a remote (URL) save folder has no local files to list
            resume.write_manifest(folder)


def shard_index_problem(checkpoint: Path) -> str | None:
    """Why torch's own index of the model/optimizer shards (``model_and_optim/.metadata``: for
    every tensor the file, offset and length it was written to) does not fit the files on disk
    (None: it fits). Independent of the manifest, so it also catches a truncated shard of a
    checkpoint written before manifests existed."""
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


def rows_problem(checkpoint: Path, steps: set[int]) -> str | None:
    """Why a checkpoint cannot be resumed from for its records (None: it can): the job writes
    the metrics row of step k before it saves the checkpoint of step k
    (:class:`RecordsFirstCheckpointerCallback`), so a checkpoint without its step's row in
    ``steps`` (the steps of metrics.jsonl) was saved by an earlier release whose attempt was
    killed before the row was written; resuming from it would lose that row for good."""
    name = checkpoint.name
    step = int(name[4:]) if name.startswith("step") and name[4:].isdigit() else None
    if step is None or step in steps:
        return None
    return f"metrics.jsonl has no row of step {step} (killed before it was written)"


def resume_point(ctx: RunContext, base: dict[str, Any], previous: RunStatus) -> Any:
    """:func:`olmoablate.run.resume.fall_back` on rank 0, shared with every rank; a fallback is
    recorded in ``base`` (every later status.json) and returned for the first metrics row."""
    results = ctx.run_dir.path.parent.parent
    fallback: resume.Fallback | None = None
    error: str | None = None
    if get_rank() == 0:
        steps = logged_steps(ctx.run_dir.metrics)

        def check(checkpoint: Path) -> str | None:
            return shard_index_problem(checkpoint) or rows_problem(checkpoint, steps)

        try:
            fallback = resume.fall_back(
                ctx.run_dir.checkpoints,
                way_out=f"olmoablate submit {results} --redo {ctx.run_id}",
                extra_check=check,
            )
        except resume.NoUsableCheckpoint as err:
            error = str(err)
        if fallback is not None:
            log.warning(fallback.line)
    if is_distributed():
        from olmo_core.distributed.utils import broadcast_object

        error, fallback = broadcast_object((error, fallback))
        barrier()
    if error is not None:
        raise resume.NoUsableCheckpoint(error)
    base["recovery"] = fallback.line if fallback is not None else previous.recovery
    return fallback


def failure_reason(
    ctx: RunContext, error: BaseException, step: int | None, *, started: bool = True
) -> str:
    """The one-line reason of a failed attempt (:mod:`olmoablate.run.faults`); the traceback
    goes to ``runs/<id>/error.log`` (on a full disk: the job's log). ``started=False``: the
    failure came before training (building the model, the proof), where an unrecognised error
    repeats on a retry, so the line suggests re-planning and redoing the run instead."""
    results = ctx.run_dir.path.parent.parent
    log_path = ctx.run_dir.path / faults.ERROR_LOG
    header = f"{now_iso()} {ctx.run_id} step {step}"
    if any(isinstance(e, OSError) and e.errno == errno.ENOSPC for e in faults.chain(error)):
        # a save cut short by a full disk leaves its partial folder filling it: make room first,
        # so the traceback and the status that say so are written whole
        resume.drop_incomplete(ctx.run_dir.checkpoints)
    kept = faults.write_traceback(log_path, error, header)
    if not kept:
        log.error("traceback of the failure (not written to %s)", log_path, exc_info=error)
    return faults.classify(
        error,
        step=step,
        resume=f"olmoablate submit {results} --retry-failed",
        where=str(ctx.run_dir.checkpoints),
        log=str(log_path) if kept else "the job's log",
        redo=None if started else faults.redo_advice(results, ctx.run_id),
    )


def record_failure(write: Any, ctx: RunContext, step: int, reason: str, **extra: Any) -> None:
    """``write("failed", step, reason=...)``; on a full disk again, once
    :func:`olmoablate.run.resume.drop_incomplete` made room."""
    try:
        write(RunState.FAILED, step, reason=reason, **extra)
        return
    except OSError as err:
        if err.errno != errno.ENOSPC or not resume.drop_incomplete(ctx.run_dir.checkpoints):
            raise
    write(RunState.FAILED, step, reason=reason, **extra)
