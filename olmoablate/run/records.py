"""The run's records: ``metrics.jsonl`` (per-step rows with true step timing, and its columnar
copy ``metrics.arrow``, :mod:`olmoablate.run.columnar`) and ``fingerprints.jsonl`` (one hash per
global batch: the evidence both arms saw the same tokens in the same order).

Merge rule on resume from the checkpoint of step *k*: each file is first rewritten atomically
without its rows of step > *k* (written after that checkpoint by the interrupted attempt, a torn
last line included), records the trainer re-emits for steps <= *k* are dropped, then the new
attempt appends: every step appears once. A fresh start (no checkpoint) keeps no row at all.

What makes the rule exact whenever the job is killed: the rows of steps <= *k* are on disk before
the checkpoint of step *k* exists. The checkpointer (:class:`olmoablate.run.callbacks.
RecordsFirstCheckpointerCallback`) saves step *k* after all of step *k* (its evaluations
included) and first calls :func:`sync_before_checkpoint`: every buffered row of steps <= *k* is
written and both files are fsynced. One step's metrics may come in several ``log_metrics`` calls,
so the newest row is buffered until a later step arrives, a checkpoint syncs it or the job
closes; a metric of a step already written (OLMo-core's ``checkpoint/save_duration_s`` of the
save that follows the sync) is not written again. No per-step cross-rank work: step times come
from CUDA events read when the trainer syncs, fingerprints are gathered at the same steps
(:func:`collect_due`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import resource
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from olmo_core.distributed.utils import get_rank, get_world_size, is_distributed
from olmo_core.train.callbacks import Callback
from olmo_core.train.common import ReduceType

from olmoablate.io import write_text_atomic
from olmoablate.plan import metrics as metric_names
from olmoablate.plan.metrics import PEAK_MEMORY
from olmoablate.plan.names import FINGERPRINTS_FILE, METRICS_FILE
from olmoablate.run import columnar

if TYPE_CHECKING:  # pragma: no cover - typing only
    from olmo_core.train import Trainer

log = logging.getLogger(__name__)


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
    """Rewrite ``path`` atomically with only its complete rows of a step <= ``step`` (the resume
    half of the merge rule; ``step`` -1: none), each line byte for byte as it was; a torn last
    line (a kill mid-write) and malformed lines go too, or the next row appended would be glued
    to them. Returns how many rows were dropped."""
    if not path.exists():
        return 0
    text = path.read_text(encoding="utf-8", errors="replace")
    keep: list[str] = []
    dropped = 0
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            continue  # torn (the last line only)
        try:
            row_step = int(json.loads(line)["step"])
        except (ValueError, TypeError, KeyError):
            continue  # not a row
        if row_step <= step:
            keep.append(line)
        else:
            dropped += 1
    new = "".join(keep)
    if new != text:
        write_text_atomic(path, new)
    return dropped


def fsync_file(path: Path) -> None:
    """Make what was written to ``path`` durable (a file this attempt created: its folder entry
    too); nothing when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:  # some filesystems refuse a folder's fsync: the file's own is what counts
        pass
    finally:
        os.close(dfd)


def logged_steps(path: Path) -> set[int]:
    """The steps that have a complete row in ``path``."""
    steps: set[int] = set()
    for row in read_jsonl(path):
        try:
            steps.add(int(row["step"]))
        except (KeyError, TypeError, ValueError):
            continue
    return steps


def sync_before_checkpoint(trainer: Trainer) -> None:
    """Before the checkpoint of ``trainer.global_step`` is saved (every rank, same point): the
    step's buffered metrics reach the callbacks, then the metrics and fingerprints rows of every
    step up to it are written and fsynced. A checkpoint thus never exists without its rows."""
    step = int(trainer.global_step)
    trainer._log_metrics()  # noqa: SLF001 - OLMo-core's save_checkpoint calls it the same way
    trainer._join_bookkeeping_ops()  # noqa: SLF001
    for cb in trainer.callbacks.values():
        if isinstance(cb, MetricsJSONLCallback | FingerprintCallback):
            cb.sync(step)


def _model_of(trainer: Trainer) -> Any:
    return trainer.train_module.model  # type: ignore[attr-defined]


def collect_due(trainer: Trainer, step: int, first_step: int) -> bool:
    """Steps at which cross-rank work (fingerprint gathering, the non-finite check) is done:
    those at which OLMo-core syncs and logs metrics. The first step of an attempt, every
    ``metrics_collect_interval`` steps, the last step, and every checkpoint step (the trainer
    logs metrics right before saving: nothing buffered is older than a resume's checkpoint)."""
    if step == first_step or step % max(1, int(trainer.metrics_collect_interval)) == 0:
        return True
    max_steps = trainer.max_steps
    if max_steps is not None and step >= max_steps:
        return True
    ckpt = trainer.callbacks.get("checkpointer")
    interval = getattr(ckpt, "save_interval", None) if getattr(ckpt, "enabled", False) else None
    return bool(interval) and step % int(interval) == 0


#: Guards MetricsJSONLCallback's per-step timing state, which the main thread fills (pre_step,
#: post_train_batch) while OLMo-core's bookkeeping thread drains it (log_metrics). Module level:
#: the trainer deep-copies its callbacks, and a lock cannot be copied.
_TIMING_LOCK = threading.Lock()


def cuda_timing() -> bool:
    """Whether step times come from CUDA events (GPU work is asynchronous to the host)."""
    return torch.cuda.is_available() and torch.cuda.is_initialized()


@dataclass
class MetricsJSONLCallback(Callback):
    """Per-step metrics rows for ``metrics.jsonl`` (rank 0 writes).

    ``step_time_s`` is the time of the step's training work only: the window opens in
    ``pre_step`` (after the batch is loaded) and closes in ``post_train_batch`` (before
    evaluation, checkpointing and the other post-step hooks), the same for every arm. On CUDA it
    is a pair of CUDA events, read once the trainer has synchronised for its metrics (no extra
    sync): the device's real time whether the GPU or the kernel launches are the bottleneck,
    where a host clock would only measure the queueing. On CPU it is ``perf_counter``;
    ``step_cpu_time_s`` is the process's CPU seconds over the same window. ``step_in_attempt``
    (1 = first step after a start or resume) lets readers drop every attempt's warm-up steps.
    """

    #: Runs first, so a step's timing is taken before e.g. the checkpointer flushes metrics.
    priority: ClassVar[int] = 100
    #: Steps of each attempt that are warm-up, not steady state (summary.json's mean skips them).
    WARMUP_STEPS: ClassVar[int] = metric_names.ATTEMPT_WARMUP_STEPS

    path: str = METRICS_FILE
    global_batch_size: int = 0
    resume_step: int | None = None  # the step the trainer resumed from (None = fresh start)
    #: Set by the job: extra fields of this attempt's first row (a checkpoint fallback's steps,
    #: :mod:`olmoablate.run.callbacks`), so metrics.jsonl itself says where the attempt resumed.
    attempt_note: dict[str, float] = field(default_factory=dict)

    _pending: dict[str, Any] | None = None
    _step_start: float = 0.0
    _cpu_start: float = 0.0
    _start_event: Any = None
    _first_step: int = 1
    _events: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    _step_times: dict[int, float] = field(default_factory=dict)
    _cpu_times: dict[int, float] = field(default_factory=dict)
    #: Measured time of every step trained in this attempt, in step order (for summary.json).
    step_times: list[float] = field(default_factory=list)
    last_row: dict[str, Any] = field(default_factory=dict)
    #: Largest peak memory over ranks seen in this attempt's logged steps (rank 0; summary.json).
    max_peak_memory_gb: float = 0.0
    _rows_since_copy: int = 0
    #: Rows of every step <= this are in the file: kept from the attempt that saved the
    #: checkpoint resumed from, or written by this attempt. A later metric of such a step is
    #: not written again (it would be a second row of the step).
    _written_through: int = -1

    def pre_train(self) -> None:
        start = self.trainer.global_step
        self.resume_step = start if start > 0 else None
        self._first_step = start + 1
        # Resumed from step k: the rows of steps <= k were made durable before its checkpoint was
        # saved (sync). A fresh start keeps none: an earlier attempt's step-0 row would be
        # written twice.
        self._written_through = start if start > 0 else -1
        if get_rank() == 0:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            truncate_jsonl_after(Path(self.path), self._written_through)
            self._update_copy()

    def _update_copy(self) -> None:
        """Refresh ``metrics.arrow``: only a cache for the report, so a failure is logged."""
        self._rows_since_copy = 0
        try:
            columnar.update_copy(self.path)
        except Exception as err:  # noqa: BLE001 - never fatal for training
            log.warning("metrics.arrow not updated (%s: %s)", type(err).__name__, err)

    def pre_step(self, batch: dict[str, Any]) -> None:
        del batch
        self._cpu_start = time.process_time()
        if cuda_timing():
            self._start_event = torch.cuda.Event(enable_timing=True)
            self._start_event.record()
        else:
            self._start_event = None
            self._step_start = time.perf_counter()

    def post_train_batch(self) -> None:
        # CPU seconds of all threads: on a shared CPU box wall time alone overstates the cost.
        cpu = time.process_time() - self._cpu_start
        if self._start_event is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            with _TIMING_LOCK:
                self._cpu_times[self.step] = cpu
                self._events[self.step] = (self._start_event, end)
            self._start_event = None
        else:
            dt = time.perf_counter() - self._step_start
            with _TIMING_LOCK:
                self._cpu_times[self.step] = cpu
                self._step_times[self.step] = dt
                self.step_times.append(dt)
        # After the window closed. Every rank's peak, reduced with MAX by OLMo-core together
        # with the step's other metrics (no collective of our own): rank 0's memory alone
        # understates a run whose ranks differ (uneven shards, the LM head's rank).
        self.trainer.record_metric(PEAK_MEMORY, peak_memory_gb(), ReduceType.max)

    def _resolve_events(self, up_to: int) -> None:
        """Turn recorded event pairs of steps <= ``up_to`` into seconds. Called from OLMo-core's
        bookkeeping thread: the GPU wait happens outside the lock, so the main thread, which
        keeps recording events, never blocks on the device here."""
        with _TIMING_LOCK:
            due = [(s, self._events.pop(s)) for s in sorted(s for s in self._events if s <= up_to)]
        for step, (start, end) in due:
            end.synchronize()
            dt = float(start.elapsed_time(end)) / 1000.0
            with _TIMING_LOCK:
                self._step_times[step] = dt
                self.step_times.append(dt)

    def steady_step_times(self) -> list[float]:
        """Step times of this attempt without its warm-up steps (all of them if that is empty)."""
        self._resolve_events(self.trainer.global_step)
        with _TIMING_LOCK:
            times = list(self.step_times)
        steady = times[self.WARMUP_STEPS :]
        return steady or times[1:] or times

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self._resolve_events(step)  # every rank, so no rank accumulates events
        if get_rank() != 0:
            with _TIMING_LOCK:
                self._step_times.pop(step, None)
                self._cpu_times.pop(step, None)
            return
        if step <= self._written_through:
            return  # already in the file (see _written_through)
        row = {k: float(v) for k, v in metrics.items()}
        peak = row.pop(PEAK_MEMORY, None)
        if self._pending is None or self._pending["step"] != step:
            self._flush()
            self._pending = {"step": step, metric_names.TOKENS: step * self.global_batch_size}
            if self.attempt_note:
                self._pending.update(self.attempt_note)
                self.attempt_note = {}
        self._pending.update(row)
        with _TIMING_LOCK:
            timed = step in self._step_times
            if timed:
                self._pending[metric_names.STEP_TIME] = self._step_times.pop(step)
                self._pending[metric_names.STEP_CPU_TIME] = self._cpu_times.pop(step)
        if timed:
            self._pending[metric_names.STEP_IN_ATTEMPT] = step - self._first_step + 1
        if peak is not None or metric_names.PEAK_MEMORY_GB not in self._pending:
            self._pending[metric_names.PEAK_MEMORY_GB] = (
                peak if peak is not None else peak_memory_gb()
            )
        self.max_peak_memory_gb = max(
            self.max_peak_memory_gb, self._pending[metric_names.PEAK_MEMORY_GB]
        )

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

    def sync(self, step: int) -> None:
        """Write every row of steps <= ``step`` and fsync the file (rank 0): the checkpoint of
        ``step`` is saved next (:func:`sync_before_checkpoint`)."""
        if get_rank() != 0:
            return
        if self._pending is not None and int(self._pending["step"]) <= step:
            self._flush()
        self._written_through = max(self._written_through, step)
        fsync_file(Path(self.path))

    def close(self) -> None:
        if get_rank() == 0:
            self._flush()
            self._update_copy()


def interleave_rank_batches(parts: list[torch.Tensor]) -> torch.Tensor:
    """Global batch from the DP ranks' local batches: rank r holds global rows r, r+W, r+2W, …"""
    return torch.stack(parts, dim=1).reshape(-1, parts[0].shape[-1])


def instance_digests(input_ids: torch.Tensor) -> torch.Tensor:
    """sha256 of each instance (row) of token ids as int64 little-endian, a (rows, 32) uint8 CPU
    tensor: ranks exchange 32 bytes per instance, not ids."""
    arr = input_ids.detach().to("cpu", torch.int64).numpy().astype("<i8", copy=False)
    rows = [hashlib.sha256(row.tobytes()).digest() for row in arr.reshape(arr.shape[0], -1)]
    return torch.frombuffer(bytearray(b"".join(rows)), dtype=torch.uint8).reshape(-1, 32)


def batch_sha256(digests: torch.Tensor) -> str:
    """The global batch's fingerprint: sha256 of its instances' sha256s in global order."""
    return hashlib.sha256(digests.contiguous().numpy().tobytes()).hexdigest()


def gather_global_digests(local: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Per-instance digests of the global batch (or of several steps' batches stacked along
    dim 0), in global instance order, from every DP rank's local ones: one collective.

    OLMo-core's loader gives DP rank r the instances ``r, r + W, r + 2W, …`` of the global batch,
    so interleaving restores the global order and the fingerprint does not depend on W.
    """
    if is_distributed() and get_world_size(group) > 1:
        parts = [torch.empty_like(local) for _ in range(get_world_size(group))]
        torch.distributed.all_gather(parts, local.contiguous(), group=group)
        return torch.stack(parts, dim=1).reshape(-1, *local.shape[1:])
    return local


def global_batch_sha256(input_ids: torch.Tensor, group: Any = None) -> str:
    """Fingerprint of one global batch from this rank's local batch (collective when W > 1)."""
    return batch_sha256(gather_global_digests(instance_digests(input_ids), group))


@dataclass
class FingerprintCallback(Callback):
    """Appends ``{"step", "tokens", "sha256"}`` for every global batch to ``fingerprints.jsonl``.

    Each rank hashes its instances in ``pre_step`` (the ids are still on the CPU); the pending
    digests are gathered in one collective at :func:`collect_due` steps and at the end.
    """

    #: After the metrics timing (100), before the checkpointer (1) saves at the same step.
    priority: ClassVar[int] = 50

    path: str = FINGERPRINTS_FILE
    global_batch_size: int = 0
    _pending: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    _first_step: int = 1

    def pre_train(self) -> None:
        start = self.trainer.global_step
        self._first_step = start + 1
        self._pending = []
        if get_rank() == 0:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            truncate_jsonl_after(Path(self.path), start if start > 0 else -1)

    def pre_step(self, batch: dict[str, Any]) -> None:
        self._pending.append((self.step, instance_digests(batch["input_ids"])))

    def post_train_batch(self) -> None:
        if collect_due(self.trainer, self.step, self._first_step):
            self._flush()

    def post_train(self) -> None:
        self._flush()  # every rank reaches post_train together (not on errors)

    def sync(self, step: int) -> None:
        """Every rank: gather what is pending (steps <= ``step``), then rank 0 writes and fsyncs."""
        del step
        self._flush()
        if get_rank() == 0:
            fsync_file(Path(self.path))

    def _flush(self) -> None:
        if not self._pending:
            return
        steps = [s for s, _ in self._pending]
        # (local rows, steps, 32): one collective for all pending steps (fixed-size batches).
        stacked = torch.stack([d for _, d in self._pending], dim=1)
        self._pending = []
        gathered = gather_global_digests(stacked, self.trainer.dp_process_group)
        per_step = [gathered[:, i] for i in range(len(steps))]
        if get_rank() != 0:
            return
        with open(self.path, "a", encoding="utf-8") as fh:
            for step, digests in zip(steps, per_step, strict=True):
                row = {
                    "step": step,
                    "tokens": step * self.global_batch_size,
                    "sha256": batch_sha256(digests),
                }
                fh.write(json.dumps(row) + "\n")
