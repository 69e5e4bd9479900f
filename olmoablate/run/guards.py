"""Callbacks that guard a run's numerics: NaN/Inf and loss-spike stops, and the compute-dtype
probe (evidence a run trained in the precision its plan claims)."""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from olmo_core.distributed.utils import is_distributed
from olmo_core.train.callbacks import Callback

from olmoablate.plan.metrics import (
    CE_LOSS,
    DEFAULT_FACTOR,
    DEFAULT_MIN_RELATIVE_JUMP,
    DEFAULT_WINDOW,
    GRAD_NORM,
    SpikeDetector,
)
from olmoablate.run.records import _model_of, collect_due

log = logging.getLogger(__name__)

#: The job's running spike count, logged with each step (for W&B and metrics.jsonl readers; the
#: report recounts spikes from the losses with the same rule).
LOSS_SPIKES = "stability/loss spikes"

#: Guards a run's divergence record, written from the main and the bookkeeping thread (module
#: level: the trainer deep-copies its callbacks, and a lock cannot be copied).
_DIVERGENCE_LOCK = threading.Lock()


def nonfinite_flags(values: list[torch.Tensor | None]) -> torch.Tensor:
    """1.0 where a metric is NaN/Inf, on the metrics' own device (a missing metric, e.g. no grad
    norm without clipping, counts as finite): no host sync, no CPU/CUDA mix."""
    present = [v for v in values if v is not None]
    device = present[0].device if present else torch.device("cpu")
    return torch.stack(
        [
            (~torch.isfinite(v.detach().float().reshape(()))).float()
            if v is not None
            else torch.zeros((), device=device)
            for v in values
        ]
    )


@dataclass
class StabilityCallback(Callback):
    """Loss-spike counter and NaN/Inf stop.

    Spikes follow the project's one rule (`olmoablate.plan.metrics.SpikeDetector`), so the report
    counts exactly what the job counted. More than ``max_spikes`` spikes (when set), or (with
    ``stop_on_nonfinite``) a non-finite loss or grad norm, stops the run and marks it diverged
    (final: never retried). Non-finite values are flagged on the device after each step and
    checked with one all-reduce at the trainer's metrics steps (:func:`collect_due`), so the first
    bad step is recorded.

    No collective here depends on state another thread sets: the spike rule runs in
    ``pre_log_metrics``, which OLMo-core calls from its bookkeeping thread at a different moment
    on each rank, so a spike stop only records the divergence (under a lock) and asks for
    OLMo-core's synchronised cancel; whether the non-finite all-reduce runs depends only on its
    own earlier results, the same on every rank. Neither path uses ``cancel_run(no_sync=True)``:
    its barrier is skipped on a rank whose bookkeeping thread has already seen a cancel, a hang
    on the others. Every rank asks for the cancel and OLMo-core's cancel check stops them all at
    the same step, within ``topology.metrics_interval`` steps.
    """

    priority: ClassVar[int] = 5

    spike_window: int = DEFAULT_WINDOW
    spike_factor: float = DEFAULT_FACTOR
    min_relative_jump: float = DEFAULT_MIN_RELATIVE_JUMP
    max_spikes: int | None = None
    stop_on_nonfinite: bool = True

    spikes: int = 0
    diverged_at_step: int | None = None
    reason: str | None = None
    _detector: SpikeDetector | None = None
    _first_step: int = 1
    _flags: list[tuple[int, torch.Tensor, list[Any]]] = field(default_factory=list)
    #: Set only from the all-reduced flags (main thread): the same on every rank, at the same step.
    _nonfinite_stop: bool = False

    @property
    def detector(self) -> SpikeDetector:
        if self._detector is None:
            self._detector = SpikeDetector(
                self.spike_window, self.spike_factor, self.min_relative_jump
            )
        return self._detector

    def state_dict(self) -> dict[str, Any]:
        return {
            "spikes": self.spikes,
            "history": self.detector.state(),
            "diverged_at_step": self.diverged_at_step,
            "reason": self.reason,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.spikes = int(state_dict.get("spikes", 0))
        self.detector.load(state_dict.get("history", []))
        self.diverged_at_step = state_dict.get("diverged_at_step")
        self.reason = state_dict.get("reason")

    def _record(self, step: int, reason: str) -> None:
        """Keep the earliest divergence (either thread), so every rank ends with the same one."""
        with _DIVERGENCE_LOCK:
            if self.diverged_at_step is None or step < self.diverged_at_step:
                self.diverged_at_step = step
                self.reason = reason
                log.error(f"Run diverged at step {step}: {reason}")

    def _diverge(self, step: int, reason: str) -> None:
        self._record(step, reason)
        self.trainer.cancel_run(f"diverged: {reason}")

    def pre_train(self) -> None:
        self._first_step = self.trainer.global_step + 1
        self._flags = []
        self._nonfinite_stop = False

    def post_train_batch(self) -> None:
        if not self.stop_on_nonfinite or self._nonfinite_stop:
            return
        found = [self.trainer.get_metric(name) for name in (CE_LOSS, GRAD_NORM)]
        self._flags.append((self.step, nonfinite_flags(found), found))
        if collect_due(self.trainer, self.step, self._first_step):
            self._check(cancel=True)

    def post_train(self) -> None:
        if self.stop_on_nonfinite and not self._nonfinite_stop:
            self._check(cancel=False)  # the last steps of a cancelled/finished attempt

    def _check(self, *, cancel: bool) -> None:
        """One all-reduce (and host sync) for all steps since the last check."""
        if not self._flags:
            return
        pending, self._flags = self._flags, []
        flags = torch.stack([f for _, f, _ in pending])
        if is_distributed():
            flags = flags.to(self.trainer.device)
            torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
        for (step, _, found), row in zip(pending, flags.tolist(), strict=True):
            bad = [name for name, f in zip((CE_LOSS, GRAD_NORM), row, strict=True) if f > 0]
            if not bad:
                continue
            shown = ", ".join(
                f"{n} = {float(v):g}"
                for n, v in zip((CE_LOSS, GRAD_NORM), found, strict=True)
                if v is not None
            )
            reason = f"non-finite {' and '.join(bad)} ({shown})"
            self._nonfinite_stop = True
            if cancel:
                self._diverge(step, reason)
            else:
                self._record(step, reason)
            return

    def pre_log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        loss = metrics.get(CE_LOSS)
        if loss is None or not math.isfinite(loss):
            return
        if self.detector.update(float(loss)):
            self.spikes += 1
            log.warning(f"Loss spike at step {step}: {loss:.4f}")
        metrics[LOSS_SPIKES] = float(self.spikes)
        if self.max_spikes is not None and self.spikes > self.max_spikes:
            with _DIVERGENCE_LOCK:
                first = self.diverged_at_step is None
            if first:
                self._diverge(
                    step,
                    f"{self.spikes} loss spikes > training.stability.max_spikes = {self.max_spikes}",
                )


@dataclass
class ComputeDtypeCallback(Callback):
    """Records the output dtype of the first linear layer in the first training forward: the
    evidence in ``summary.json`` that a run trained in the precision its plan claims.

    The hook sits inside the first (compiled) block, so dynamo traces it: it only stores the
    dtype in a dict (a side effect dynamo replays, no graph break) and is removed after the
    first step, outside any forward. Removing it inside the forward broke the block's graph, and
    since dynamo does not guard on module hooks the split code served every block of the run.
    """

    compute_dtype: str | None = None
    _handle: Any = None
    _seen: dict[str, Any] = field(default_factory=dict)

    def pre_train(self) -> None:
        linear = next(
            (m for m in _model_of(self.trainer).modules() if isinstance(m, torch.nn.Linear)), None
        )
        if linear is not None and self.compute_dtype is None:
            self._handle = linear.register_forward_hook(self._hook)

    def _hook(self, module: Any, args: Any, output: Any) -> None:
        del module, args
        if isinstance(output, torch.Tensor) and torch.is_grad_enabled():
            self._seen["dtype"] = output.dtype

    def post_train_batch(self) -> None:
        if self._handle is not None and "dtype" in self._seen:
            self.compute_dtype = str(self._seen["dtype"]).removeprefix("torch.")
            self.close()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
