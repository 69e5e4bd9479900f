"""OLMo-core callbacks that turn a training run into the files of ``runs/<run_id>/``.

Every side effect of the job lives here, as OLMo-core :class:`Callback` subclasses, so the
training loop itself stays OLMo-core's. What each one is for:

* :class:`MetricsJSONLCallback` -> ``metrics.jsonl``: one row per step, the input of `report`.
* :class:`FingerprintCallback` -> ``fingerprints.jsonl``: sha256 of each global batch, the
  evidence that both arms of a pair saw the same tokens in the same order.
* :class:`LoopCurriculumCallback`: drives a looped model's loop count b(step) and records the
  per-loop hidden-state norms.
* :class:`StabilityCallback`: counts loss spikes, stops on NaN/Inf and marks the run diverged.

The records and the numeric guards live in :mod:`olmoablate.train.records` and
:mod:`olmoablate.train.guards` (re-exported here); this module keeps the rest.
* :class:`InterruptCallback`: SIGTERM and SIGUSR2 (Slurm/submitit's pre-timeout warning) both
  become OLMo-core's graceful cancel (final checkpoint, normal return).
* :class:`StatusCallback` -> ``status.json`` while training.
* :class:`LoopedLMEvaluatorCallbackConfig`: OLMo-core's LM evaluator, plus (for looped arms)
  the same held-out loss at every loop count of the run entry's ``loop_counts``.
* :class:`LoopedDownstreamEvaluatorCallbackConfig`: the same for OLMo-core's downstream
  (ai2-olmo-eval) evaluator: every task at every extra loop count.
* W&B logging is its own module, :mod:`olmoablate.train.wandb_log` (optional, never required).

Merge rule on resume (``metrics.jsonl`` and ``fingerprints.jsonl``): when the trainer resumes from
the checkpoint of step *k*, each file is first rewritten atomically without its rows of step > *k*
(rows written after that checkpoint by the interrupted attempt), then the new attempt appends.
Records the trainer re-emits for steps <= *k* on resume (its dry-run/bookkeeping record) are
dropped. So every step appears exactly once. OLMo-core may deliver one step's metrics in two
``log_metrics`` calls (e.g. split by a checkpoint save); rows are buffered and merged by step and a
step is written when a later step arrives or at close. A hard kill (SIGKILL) can therefore lose
the last buffered row; SIGTERM/SIGUSR2 cannot, because ``close`` flushes.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from olmo_core.distributed.utils import get_rank, get_world_size
from olmo_core.train.callbacks import (
    Callback,
    DownstreamEvaluatorCallbackConfig,
    EvaluatorCallback,
)

from olmoablate.contract import metrics as metric_names
from olmoablate.contract.filenames import STATUS_FILE
from olmoablate.contract.metrics import CE_LOSS, GRAD_NORM
from olmoablate.contract.runfiles import RunStatus
from olmoablate.contract.runstates import RunState
from olmoablate.train.eval_data import WholeSetLMEvaluatorCallbackConfig
from olmoablate.train.guards import (
    ComputeDtypeCallback,
    StabilityCallback,
    nonfinite_flags,
)
from olmoablate.train.records import (
    FingerprintCallback,
    MetricsJSONLCallback,
    _model_of,
    batch_sha256,
    collect_due,
    cuda_timing,
    gather_global_digests,
    global_batch_sha256,
    instance_digests,
    interleave_rank_batches,
    now_iso,
    peak_memory_gb,
    read_jsonl,
    truncate_jsonl_after,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from olmo_core.train import Trainer

__all__ = [
    "CE_LOSS",
    "GRAD_NORM",
    "ComputeDtypeCallback",
    "FingerprintCallback",
    "MetricsJSONLCallback",
    "StabilityCallback",
    "batch_sha256",
    "collect_due",
    "cuda_timing",
    "gather_global_digests",
    "global_batch_sha256",
    "instance_digests",
    "interleave_rank_batches",
    "nonfinite_flags",
    "now_iso",
    "peak_memory_gb",
    "read_jsonl",
    "truncate_jsonl_after",
]

log = logging.getLogger(__name__)


@dataclass
class LoopCurriculumCallback(Callback):
    """Keeps a looped model's loop count on its curriculum and records per-loop state norms.

    The trainer counts a batch's FLOPs right after fetching it, before ``pre_step``, so b(step) is
    set in ``pre_load_batch`` (and again in ``pre_step``, ahead of OLMo-core's SpeedMonitor), and
    the train module's cached ``num_flops_per_token`` is cleared whenever b changes: throughput,
    MFU and total FLOPs all use the loop count actually trained. A model
    without the hooks is left alone, so the callback is harmless on non-looped arms.
    """

    priority: ClassVar[int] = 10

    _loops: Any = None

    def _set(self, step: int) -> None:
        """``step`` is OLMo-core's 1-based step about to run, the convention of
        :meth:`olmoablate.contract.arch.Looped.loops_at_step` (the first step trains with
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

    OLMo-core already handles SIGTERM; Slurm (``--signal``) and submitit send SIGUSR2 before a
    time limit or preemption, so USR2 gets the same treatment. The previous handlers (e.g.
    submitit's requeue handler) are restored in ``close``. Every signal is recorded in
    ``signals`` (a preemption sends SIGTERM then SIGUSR2), so the job wrapper
    (olmoablate.launch.job) can tell a user's stop from a requeue; ``signal_received`` is the last.
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
    """OLMo-core's evaluator, plus the held-out loss at each extra loop count of a looped model.

    The standard pass (the model's own loop count) keeps OLMo-core's names
    (``eval/lm/<set>/CE loss``); each extra pass is recorded as
    ``eval/lm/<set>/CE loss (loops=<n>)`` (and PPL). Both arms evaluate at the same steps because
    the interval comes from the plan entry.
    """

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
        try:
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


@dataclass
class LoopedLMEvaluatorCallbackConfig(WholeSetLMEvaluatorCallbackConfig):
    """The whole-set LM evaluator (`olmoablate.train.eval_data`), as a
    :class:`LoopedEvaluatorCallback` for looped arms."""

    loop_counts: list[int] = field(default_factory=list)

    def build(self, trainer: Trainer) -> Callback | None:
        return _with_loop_counts(super().build(trainer), self.loop_counts)


@dataclass
class LoopedDownstreamEvaluatorCallbackConfig(DownstreamEvaluatorCallbackConfig):
    """:class:`DownstreamEvaluatorCallbackConfig` whose callback also scores a looped model at
    each extra loop count: ``eval/downstream/<task> (<metric>) (loops=<n>)``. The trained count
    is the standard pass (plain names), so it is not scored twice."""

    loop_counts: list[int] = field(default_factory=list)

    def build(self, trainer: Trainer) -> Callback | None:
        return _with_loop_counts(super().build(trainer), self.loop_counts, skip_trained=True)


def _with_loop_counts(
    base: Callback | None, loop_counts: list[int], skip_trained: bool = False
) -> Callback | None:
    """OLMo-core's evaluator callback as a :class:`LoopedEvaluatorCallback` (same evaluators and
    schedule) when there are loop counts to evaluate; else unchanged."""
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
