"""OLMo-core callbacks that turn a training run into the files of ``runs/<run_id>/``.

Every side effect of the job lives here, as OLMo-core :class:`Callback` subclasses, so the
training loop itself stays OLMo-core's. What each one is for:

* :class:`MetricsJSONLCallback` -> ``metrics.jsonl``: one row per step, the input of `report`
  (plus its columnar copy ``metrics.parquet``, see :mod:`olmoablate.columnar`).
* :class:`FingerprintCallback` -> ``fingerprints.jsonl``: sha256 of each global batch, the
  evidence that both arms of a pair saw the same tokens in the same order.
* :class:`LoopCurriculumCallback`: drives a looped model's loop count b(step) and records the
  per-loop hidden-state norms.
* :class:`StabilityCallback`: counts loss spikes, stops on NaN/Inf and marks the run diverged.
* :class:`InterruptCallback`: SIGTERM and SIGUSR2 (Slurm/submitit's pre-timeout warning) both
  become OLMo-core's graceful cancel (final checkpoint, normal return).
* :class:`StatusCallback` -> ``status.json`` while training.
* :class:`LoopedLMEvaluatorCallbackConfig`: OLMo-core's LM evaluator, plus (for looped arms)
  the same held-out loss at every loop count in ``evaluation.loop_counts``.
* :class:`WandBLoggerCallback`: optional, never required.

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

import hashlib
import json
import logging
import math
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from olmo_core.distributed.utils import get_rank, get_world_size, is_distributed
from olmo_core.train.callbacks import Callback, EvaluatorCallback, LMEvaluatorCallbackConfig

from olmoablate import columnar
from olmoablate.io import write_json_atomic, write_text_atomic
from olmoablate.stability import SpikeDetector

if TYPE_CHECKING:  # pragma: no cover - typing only
    from olmo_core.train import Trainer

log = logging.getLogger(__name__)

CE_LOSS = "train/CE loss"
GRAD_NORM = "optim/total grad norm"


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def peak_memory_gb() -> float:
    """CUDA max allocated on this device, else the process's peak RSS (Linux: KiB)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**30
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss_kib * (1 if sys.platform != "darwin" else 1 / 1024) / 2**20


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a truncated last line (copied mid-write) is ignored."""
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def truncate_jsonl_after(path: Path, step: int) -> int:
    """Rewrite ``path`` atomically keeping only rows with ``row["step"] <= step``.

    Returns the number of rows dropped. This is the resume half of the merge rule.
    """
    if not path.exists():
        return 0
    rows = read_jsonl(path)
    keep = [r for r in rows if int(r.get("step", -1)) <= step]
    if len(keep) != len(rows) or path.read_text(encoding="utf-8").count("\n") != len(rows):
        write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in keep))
    return len(rows) - len(keep)


def _model_of(trainer: Trainer) -> Any:
    return trainer.train_module.model  # type: ignore[attr-defined]


@dataclass
class MetricsJSONLCallback(Callback):
    """Per-step metrics rows for ``metrics.jsonl`` (rank 0 writes; see module docstring)."""

    #: Runs first, so a step's timing is taken before e.g. the checkpointer flushes metrics.
    priority: ClassVar[int] = 100

    path: str = "metrics.jsonl"
    global_batch_size: int = 0
    #: Set by the job: the step the trainer resumed from (None = fresh start).
    resume_step: int | None = None

    _pending: dict[str, Any] | None = None
    _step_start: float = 0.0
    _cpu_start: float = 0.0
    _step_times: dict[int, float] = field(default_factory=dict)
    _cpu_times: dict[int, float] = field(default_factory=dict)
    #: Measured wall time of every step trained in this attempt (for summary.json).
    step_times: list[float] = field(default_factory=list)
    last_row: dict[str, Any] = field(default_factory=dict)
    _rows_since_copy: int = 0

    def pre_train(self) -> None:
        self.resume_step = self.trainer.global_step if self.trainer.global_step > 0 else None
        if get_rank() == 0:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            truncate_jsonl_after(Path(self.path), self.trainer.global_step)
            self._update_copy()

    def _update_copy(self) -> None:
        """Refresh ``metrics.parquet`` (olmoablate.columnar): a cache for the report, so a
        failure is logged and training goes on; the report then parses the JSON itself."""
        self._rows_since_copy = 0
        try:
            columnar.update_copy(self.path)
        except Exception as err:  # noqa: BLE001 - never fatal for training
            log.warning("metrics.parquet not updated (%s: %s)", type(err).__name__, err)

    def pre_step(self, batch: dict[str, Any]) -> None:
        del batch
        self._step_start = time.perf_counter()
        self._cpu_start = time.process_time()

    def post_train_batch(self) -> None:
        dt = time.perf_counter() - self._step_start
        self._step_times[self.step] = dt
        # CPU seconds of all threads: on a shared CPU box wall time alone overstates the cost.
        self._cpu_times[self.step] = time.process_time() - self._cpu_start
        self.step_times.append(dt)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if get_rank() != 0:
            return
        if self.resume_step is not None and step <= self.resume_step:
            return  # already in the file from the attempt that saved the checkpoint
        row = {k: float(v) for k, v in metrics.items()}
        if self._pending is None or self._pending["step"] != step:
            self._flush()
            self._pending = {"step": step, "tokens": step * self.global_batch_size}
        self._pending.update(row)
        if step in self._step_times:
            self._pending["step_time_s"] = self._step_times.pop(step)
            self._pending["step_cpu_time_s"] = self._cpu_times.pop(step)
        self._pending["peak_memory_gb"] = peak_memory_gb()

    def _flush(self) -> None:
        if self._pending is None:
            return
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(self._pending) + "\n")
        self.last_row = self._pending
        self._pending = None
        self._rows_since_copy += 1
        if self._rows_since_copy >= columnar.ROWS_PER_UPDATE:
            self._update_copy()

    def close(self) -> None:
        if get_rank() == 0:
            self._flush()
            self._update_copy()


def interleave_rank_batches(parts: list[torch.Tensor]) -> torch.Tensor:
    """Global batch from the DP ranks' local batches: rank r holds global rows r, r+W, r+2W, …"""
    return torch.stack(parts, dim=1).reshape(-1, parts[0].shape[-1])


def global_batch_sha256(input_ids: torch.Tensor, group: Any = None) -> str:
    """sha256 of the global batch's token ids (int64 little-endian, global instance order).

    OLMo-core's loader gives DP rank r the instances ``r, r + W, r + 2W, …`` of the global batch,
    so gathering the local batches and interleaving them restores the global order. The hash is
    therefore independent of the number of ranks.
    """
    ids = input_ids.detach()
    if is_distributed() and get_world_size(group) > 1:
        parts = [torch.empty_like(ids) for _ in range(get_world_size(group))]
        torch.distributed.all_gather(parts, ids.contiguous(), group=group)
        ids = interleave_rank_batches(parts)
    arr = ids.to("cpu", torch.int64).numpy().astype("<i8", copy=False)
    return hashlib.sha256(arr.tobytes()).hexdigest()


@dataclass
class FingerprintCallback(Callback):
    """Appends ``{"step", "tokens", "sha256"}`` for every global batch to ``fingerprints.jsonl``."""

    path: str = "fingerprints.jsonl"
    global_batch_size: int = 0

    def pre_train(self) -> None:
        if get_rank() == 0:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            truncate_jsonl_after(Path(self.path), self.trainer.global_step)

    def pre_step(self, batch: dict[str, Any]) -> None:
        digest = global_batch_sha256(batch["input_ids"], self.trainer.dp_process_group)
        if get_rank() == 0:
            row = {
                "step": self.step,
                "tokens": self.step * self.global_batch_size,
                "sha256": digest,
            }
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")


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
        """``step`` is OLMo-core's 1-based step about to run; the model wants the 0-based index
        (steps already taken), the same convention as `olmoablate.accounting.loops_at_step`."""
        model = _model_of(self.trainer)
        hook = getattr(model, "set_train_step", None)
        if not callable(hook):
            return
        hook(step - 1)
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
        model = _model_of(self.trainer)
        norms = getattr(model, "last_h_norms", None)
        if norms is None:
            return
        values = norms.tolist() if isinstance(norms, torch.Tensor) else list(norms)
        for t, v in enumerate(values):
            self.trainer.record_metric(f"train/H norm (loop {t + 1})", float(v))
        loops = getattr(model, "current_loops", None)
        if loops is not None:
            self.trainer.record_metric("train/loops", float(loops))


@dataclass
class StabilityCallback(Callback):
    """Loss-spike counter and NaN/Inf stop.

    Spikes follow the project's one rule (`olmoablate.stability`: above ``mean + spike_factor·std``
    of the previous ``spike_window`` losses *and* ``min_relative_jump`` above their mean), so the
    report counts exactly what the job counted. More than ``max_spikes`` spikes (when set), or
    (with ``stop_on_nonfinite``) a non-finite loss or grad norm, stops the run and marks it
    diverged: non-finite values are caught right after the step's backward/optimizer step, on every
    rank at once, so the run stops on that step. The divergence is final; the launcher must not
    retry it.
    """

    priority: ClassVar[int] = 5

    spike_window: int = 50
    spike_factor: float = 3.0
    min_relative_jump: float = 0.05
    max_spikes: int | None = None
    stop_on_nonfinite: bool = True

    spikes: int = 0
    diverged_at_step: int | None = None
    reason: str | None = None
    _detector: SpikeDetector | None = None

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

    def _diverge(self, step: int, reason: str, *, all_ranks: bool) -> None:
        if self.diverged_at_step is None:
            self.diverged_at_step = step
            self.reason = reason
            log.error(f"Run diverged at step {step}: {reason}")
        self.trainer.cancel_run(f"diverged: {reason}", no_sync=all_ranks)

    def post_train_batch(self) -> None:
        if not self.stop_on_nonfinite or self.diverged_at_step is not None:
            return
        found = [self.trainer.get_metric(name) for name in (CE_LOSS, GRAD_NORM)]
        values = [
            v.detach().float().reshape(()) if v is not None else torch.zeros(()) for v in found
        ]
        flags = torch.stack([(~torch.isfinite(v)).float() for v in values])
        if is_distributed():  # same decision on every rank, so all can stop together
            flags = flags.to(self.trainer.device)
            torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
        bad = [name for name, f in zip((CE_LOSS, GRAD_NORM), flags.tolist(), strict=True) if f > 0]
        if bad:
            shown = ", ".join(
                f"{n} = {float(v):g}"
                for n, v, f in zip((CE_LOSS, GRAD_NORM), values, found, strict=True)
                if f is not None
            )
            self._diverge(self.step, f"non-finite {' and '.join(bad)} ({shown})", all_ranks=True)

    def pre_log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        loss = metrics.get(CE_LOSS)
        if loss is None or not math.isfinite(loss):
            return
        if self.detector.update(float(loss)):
            self.spikes += 1
            log.warning(f"Loss spike at step {step}: {loss:.4f}")
        metrics["stability/loss spikes"] = float(self.spikes)
        if (
            self.max_spikes is not None
            and self.spikes > self.max_spikes
            and self.diverged_at_step is None
        ):
            self._diverge(
                step,
                f"{self.spikes} loss spikes > training.stability.max_spikes = {self.max_spikes}",
                all_ranks=False,
            )


@dataclass
class DebugNaNCallback(Callback):
    """Test hook (``training.debug_nan_at_step``): poisons the gradients of step ``at_step``.

    It runs after backward and before the optimizer step, so the grad norm of that exact step is
    NaN - a deterministic way to exercise the divergence path without relying on an LR blow-up.
    """

    at_step: int = -1

    def pre_optim_step(self) -> None:
        if self.step != self.at_step:
            return
        for p in _model_of(self.trainer).parameters():
            if p.grad is not None:
                p.grad.fill_(float("nan"))
                break


@dataclass
class InterruptCallback(Callback):
    """SIGTERM/SIGUSR2 -> OLMo-core's graceful cancel (checkpoint, then ``fit`` returns).

    OLMo-core already handles SIGTERM; Slurm (``--signal``) and submitit send SIGUSR2 before a
    time limit or preemption, so USR2 gets the same treatment. The previous handlers (e.g.
    submitit's requeue handler) are restored in ``close`` and recorded in ``signal_received`` so
    the job can report ``interrupted`` and the launcher can requeue.
    """

    signal_received: str | None = None
    _previous: dict[int, Any] = field(default_factory=dict)

    def _handle(self, signum: int, frame: Any) -> None:
        del frame
        name = signal.Signals(signum).name
        self.signal_received = name
        log.warning(f"{name} received: saving a checkpoint and stopping")
        self.trainer.cancel_run(f"{name} received")

    def pre_train(self) -> None:
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

    path: str = "status.json"
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
        write_json_atomic(
            self.path,
            {
                **self.base,
                "state": "running",
                "step": step,
                "total_steps": self.total_steps,
                "tokens": step * self.global_batch_size,
                "last_loss": self._last_loss,
                "tokens_per_s": tps if step > self._s0 else None,
                "updated": now_iso(),
            },
        )

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

    def perform_eval(self, prefix: str = "eval") -> None:
        super().perform_eval(prefix)
        model = _model_of(self.trainer)
        if not self.loop_counts or not hasattr(model, "current_loops"):
            return
        from olmo_core.data.utils import get_labels
        from olmo_core.utils import get_default_device, move_to_device

        trained_loops = model.current_loops
        try:
            for n in self.loop_counts:
                model.current_loops = int(n)  # forward() uses it when n_loops is not given
                for evaluator in self.evaluators:
                    evaluator.reset_metrics()
                    eval_tokens = 0
                    for i, batch in enumerate(evaluator, start=1):
                        eval_tokens += batch["input_ids"].numel()
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
                            f"{prefix}/{evaluator.name}/{name} (loops={n})", value
                        )
        finally:
            model.current_loops = trained_loops


@dataclass
class LoopedLMEvaluatorCallbackConfig(LMEvaluatorCallbackConfig):
    """:class:`LMEvaluatorCallbackConfig` that builds a :class:`LoopedEvaluatorCallback`."""

    loop_counts: list[int] = field(default_factory=list)

    def build(self, trainer: Trainer) -> Callback | None:
        base = super().build(trainer)
        if base is None or not self.loop_counts:
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
        cb.loop_counts = list(self.loop_counts)
        return cb


@dataclass
class WandBLoggerCallback(Callback):
    """One W&B run per arm; optional. Any failure to import or init wandb only logs a warning.

    The id is stable across requeues (derived from spec name + run id) and ``resume="allow"``,
    so a resumed job continues the same W&B run. ``mode`` defaults to offline; ``WANDB_MODE`` in
    the environment wins over the plan.
    """

    priority: ClassVar[int] = 3

    run_id: str = ""
    wandb_id: str = ""
    project: str = "olmoablate"
    entity: str | None = None
    group: str | None = None
    job_type: str | None = None
    mode: str = "offline"
    directory: str = "."
    config: dict[str, Any] = field(default_factory=dict)
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
            self._run = wandb.init(
                id=self.wandb_id,
                name=self.run_id,
                resume="allow",
                project=self.project,
                entity=self.entity,
                group=self.group,
                job_type=self.job_type,
                config=self.config,
                mode=mode,  # type: ignore[arg-type]
                dir=self.directory,
            )
        except Exception as err:  # noqa: BLE001 - wandb is optional by design
            log.warning(f"wandb disabled for this run ({type(err).__name__}: {err})")
            self._run = None

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if self._run is None:
            return
        try:
            self._run.log(dict(metrics), step=step)
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
