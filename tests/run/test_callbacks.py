"""Unit tests of olmoablate.run.callbacks that need no training run (the job tests cover the
callbacks end to end)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from olmoablate.run.guards import StabilityCallback
from olmoablate.run.records import (
    MetricsJSONLCallback,
    global_batch_sha256,
    interleave_rank_batches,
    read_jsonl,
    truncate_jsonl_after,
)


def test_truncate_keeps_rows_up_to_resume_step_and_drops_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    rows = [{"step": s, "x": s * 1.5} for s in range(8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 8, "x"')
    assert len(read_jsonl(path)) == 8  # the torn line is ignored
    assert truncate_jsonl_after(path, 5) == 2
    assert read_jsonl(path) == rows[:6]
    assert path.read_text().endswith("\n") and '"x"\n' not in path.read_text()
    assert truncate_jsonl_after(tmp_path / "missing.jsonl", 3) == 0
    assert truncate_jsonl_after(path, -1) == 6 and path.read_text() == ""  # a fresh start


def test_global_batch_hash_is_int64_le_of_the_global_order() -> None:
    batch = torch.arange(8 * 5, dtype=torch.int64).reshape(8, 5) * 7919 % 100352
    # sha256 over the instances' sha256s (each row as int64 little-endian), in global order:
    # ranks only exchange 32 bytes per instance.
    rows = [hashlib.sha256(r.numpy().astype("<i8").tobytes()).digest() for r in batch]
    expected = hashlib.sha256(b"".join(rows)).hexdigest()
    assert global_batch_sha256(batch) == expected
    assert global_batch_sha256(batch.to(torch.int32)) == expected  # dtype-independent
    # What OLMo-core's loader gives DP rank r of W: rows r, r+W, ... (data_loader.py).
    for world in (2, 4):
        parts = [batch[r::world] for r in range(world)]
        assert torch.equal(interleave_rank_batches(parts), batch)
    assert global_batch_sha256(batch[[1, 0, 2, 3, 4, 5, 6, 7]]) != expected


class _Trainer:
    """Minimal stand-in for the Trainer attributes these callbacks touch (no Slurm/IO)."""

    def __init__(self) -> None:
        self.global_step = 0
        self.canceled: list[str] = []
        self.metrics: dict[str, torch.Tensor] = {}
        self.metrics_collect_interval = 1
        self.max_steps = 100
        self.callbacks: dict[str, Any] = {}

    def cancel_run(self, reason: str, no_sync: bool = False) -> None:
        self.canceled.append(reason)

    def get_metric(self, name: str) -> torch.Tensor | None:
        return self.metrics.get(name)


def _stability(**kw: Any) -> tuple[StabilityCallback, _Trainer]:
    cb = StabilityCallback(**kw)
    trainer = _Trainer()
    cb.trainer = trainer  # type: ignore[assignment]
    cb.post_attach()
    cb.pre_train()
    return cb, trainer


def test_spikes_are_counted_against_the_running_window() -> None:
    cb, trainer = _stability(spike_window=5, spike_factor=3.0, max_spikes=1)
    losses = [5.0, 5.1, 4.9, 5.0, 5.05, 9.0, 5.0, 4.95, 12.0]
    recorded = []
    for step, loss in enumerate(losses, start=1):
        m = {"train/CE loss": loss}
        cb.pre_log_metrics(step, m)
        recorded.append(m["stability/loss spikes"])
    assert recorded == [0, 0, 0, 0, 0, 1, 1, 1, 2]
    assert cb.diverged_at_step == 9 and "max_spikes = 1" in (cb.reason or "")
    assert trainer.canceled
    # Resumable: the window and count survive a checkpoint round trip.
    clone, _ = _stability(spike_window=5, spike_factor=3.0, max_spikes=1)
    clone.load_state_dict(json.loads(json.dumps(cb.state_dict())))
    assert clone.spikes == 2 and clone.detector.state() == cb.detector.state()


def test_nonfinite_grad_norm_stops_at_that_step() -> None:
    cb, trainer = _stability()
    trainer.global_step = 3
    trainer.metrics = {
        "train/CE loss": torch.tensor(4.0),
        "optim/total grad norm": torch.tensor(1.0),
    }
    cb.post_train_batch()
    assert cb.diverged_at_step is None and not trainer.canceled
    trainer.global_step = 4
    trainer.metrics["optim/total grad norm"] = torch.tensor(math.inf)
    cb.post_train_batch()
    assert cb.diverged_at_step == 4 and "optim/total grad norm" in (cb.reason or "")
    assert trainer.canceled


def _metrics_callback(path: Path, resumed_at: int) -> MetricsJSONLCallback:
    cb = MetricsJSONLCallback(path=str(path), global_batch_size=256)
    trainer = _Trainer()
    trainer.global_step = resumed_at
    cb.trainer = trainer  # type: ignore[assignment]
    cb.pre_train()
    return cb


def test_metrics_rows_merge_by_step_and_skip_resumed_steps(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    # The attempt that saved the checkpoint of step 2 had its rows 0-2 on disk (synced before
    # the save) and was killed writing row 3.
    path.write_text("".join(json.dumps({"step": s, "train/CE loss": 5.0}) + "\n" for s in range(3)))
    with path.open("a") as fh:
        fh.write('{"step": 3, "train/CE')
    cb = _metrics_callback(path, resumed_at=2)
    assert [r["step"] for r in read_jsonl(path)] == [0, 1, 2] and path.read_text().endswith("}\n")
    cb.log_metrics(2, {"train/masked labels (%)": 0.1})  # re-emitted on resume: dropped
    cb.log_metrics(3, {"train/CE loss": 4.0})
    cb.log_metrics(3, {"eval/lm/x/CE loss": 3.5})  # the same step in a second record
    cb.log_metrics(4, {"train/CE loss": 3.9})
    cb.sync(4)  # the checkpoint of step 4 is saved next: its rows are on disk first
    assert [r["step"] for r in read_jsonl(path)] == [0, 1, 2, 3, 4]
    cb.log_metrics(4, {"checkpoint/save_duration_s": 0.1})  # measured after it: no second row
    cb.log_metrics(5, {"train/CE loss": 3.8})
    cb.close()
    rows = read_jsonl(path)[3:]
    assert [r["step"] for r in read_jsonl(path)] == [0, 1, 2, 3, 4, 5]
    assert rows[0]["train/CE loss"] == 4.0 and rows[0]["eval/lm/x/CE loss"] == 3.5
    assert "checkpoint/save_duration_s" not in rows[1]
    assert rows[0]["tokens"] == 768 and rows[1]["tokens"] == 1024
    assert all(r["peak_memory_gb"] > 0 for r in rows)
    assert np.isfinite([r["train/CE loss"] for r in rows]).all()


def test_a_fresh_start_keeps_no_row_of_an_earlier_attempt(tmp_path: Path) -> None:
    """Killed before its first checkpoint, a run starts over: the earlier attempt's rows (its
    step-0 row too) are not kept, or step 0 would be in the file twice."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(2)))
    cb = _metrics_callback(path, resumed_at=0)
    assert path.read_text() == ""
    cb.log_metrics(0, {"train/masked labels (%)": 0.1})
    cb.log_metrics(1, {"train/CE loss": 4.0})
    cb.close()
    assert [r["step"] for r in read_jsonl(path)] == [0, 1]


def test_loop_state_norms_are_recorded_without_a_host_sync() -> None:
    """Issue 27, 7: the looped arm's per-loop state norms used to be ``float()``-ed every step
    (b host syncs per step that no other arm pays). Norms on the meta device stand in for CUDA
    tensors: any conversion to a Python number raises."""
    from olmoablate.models.build import build_model
    from olmoablate.plan import metrics as names
    from olmoablate.run.callbacks import LoopCurriculumCallback

    dims = {
        "d_model": 16,
        "n_layers": 4,
        "n_heads": 2,
        "n_kv_heads": 2,
        "mlp_hidden_size": 16,
        "sliding_window": 4,
        "vocab_size": 32,
    }
    model = build_model(dims, {"looped": {"body_layers": 4, "loops": 2, "tail": 1}})
    model(torch.randint(0, 32, (1, 8)))
    assert len(model.last_h_norms) == 2
    model._h_norms = [torch.ones((), device="meta") for _ in range(2)]  # type: ignore[assignment]

    class _Trainer:
        def __init__(self) -> None:
            self.train_module = type("TM", (), {"model": model})()
            self.recorded: dict[str, Any] = {}

        def record_metric(self, name: str, value: Any) -> None:
            self.recorded[name] = value

    cb = LoopCurriculumCallback()
    cb.trainer = _Trainer()  # type: ignore[assignment]
    cb.post_train_batch()
    rec = cb.trainer.recorded  # type: ignore[attr-defined]
    assert {names.h_norm(1), names.h_norm(2)} <= set(rec)
    assert all(rec[names.h_norm(t)].device.type == "meta" for t in (1, 2))


def test_peak_memory_is_the_max_over_ranks(tmp_path: Path) -> None:
    """Issue 27, 7: every rank records its peak with OLMo-core's MAX reduction; the row and the
    summary's figure are the reduced value, not rank 0's own."""
    from olmo_core.train.common import ReduceType

    from olmoablate.plan.metrics import PEAK_MEMORY

    class _T:
        global_step = 1
        recorded: dict[str, Any] = {}

        def record_metric(self, name: str, value: Any, reduce_type: Any = None) -> None:
            self.recorded[name] = (value, reduce_type)

    cb = MetricsJSONLCallback(path=str(tmp_path / "m.jsonl"), global_batch_size=8)
    cb.trainer = _T()  # type: ignore[assignment]
    cb.pre_step({})
    cb.post_train_batch()
    value, how = cb.trainer.recorded[PEAK_MEMORY]  # type: ignore[attr-defined]
    assert how == ReduceType.max and value > 0
    cb.log_metrics(1, {"train/CE loss": 4.0, PEAK_MEMORY: 1000.0})  # another rank's, reduced
    cb.log_metrics(2, {"train/CE loss": 3.9, PEAK_MEMORY: 900.0})
    cb.close()
    rows = read_jsonl(tmp_path / "m.jsonl")
    assert [r["peak_memory_gb"] for r in rows] == [1000.0, 900.0]
    assert all(PEAK_MEMORY not in r for r in rows)
    assert cb.max_peak_memory_gb == 1000.0
