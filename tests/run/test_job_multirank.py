"""Numbers and collectives that must not depend on the number of ranks (issue 27), on 2 gloo ranks.

* A looped arm's extra ``(loops=n)`` LM evals stop after the same number of tokens as OLMo-core's
  own pass (tokens summed over the data-parallel ranks), so every loop count scores the same
  token set on any world size: a real 2-rank ``torchrun`` job.
* The stability all-reduce is never skipped by one rank only: the loss-spike stop is decided in
  OLMo-core's bookkeeping thread, at a different moment on each rank; the collective must not
  depend on it. Two gloo processes run the real callback against a stand-in trainer and reach
  the collect step with the spike stop already seen on one rank and not yet on the other.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from olmoablate.testing import REPO
from olmoablate.testing.plans import certify, make_plan, run_entry


def _torchrun(plan: Path, run_id: str, world: int = 2) -> subprocess.CompletedProcess[str]:
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [str(torchrun), "--standalone", f"--nproc-per-node={world}"]
        + ["-m", "olmoablate.run.job", str(plan), run_id],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
    )


@pytest.mark.slow
def test_looped_evals_score_the_same_tokens_at_every_loop_count_on_two_ranks(
    tmp_path: Path,
) -> None:
    run_id = "tiny-s0-looped"
    looped = {"body_layers": 4, "loops": 2, "tail": 1}
    entry = run_entry(
        run_id,
        "looped",
        {"looped": looped},
        pair_id=run_id,
        steps=2,
        evaluation={"interval": 2, "max_eval_tokens": 2048},
        training={"stability": {"max_spikes": 3}},
        topology={"cpu_processes": 2, "data_parallel": "ddp"},
    )
    entry["loop_counts"] = [1, 2, 4]
    plan = make_plan(tmp_path, [certify(entry)], train_tokens=12_000, heldout_tokens=8_000)
    proc = _torchrun(plan, run_id)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    rows = [
        json.loads(x)
        for x in (plan.parent / "runs" / run_id / "metrics.jsonl").read_text().splitlines()
    ]
    name = "eval/lm/synthetic-heldout/tokens"
    evals = [r for r in rows if f"{name} (loops=1)" in r]
    assert [r["step"] for r in evals] == [2]
    counts = {n: evals[0][f"{name} (loops={n})"] for n in (1, 2, 4)}
    assert counts[2] == evals[0][name]  # the standard pass (b = 2) under its (loops=2) name
    assert len(set(counts.values())) == 1, counts  # one token set for every loop count
    assert 0 < counts[1] < 4_000  # capped by max_eval_tokens, not the whole 8k-token set


# ----------------------------------------------------------------------------- collectives


class _Trainer:
    """What StabilityCallback reads from OLMo-core's Trainer, on the CPU."""

    def __init__(self) -> None:
        self.global_step = 0
        self.metrics_collect_interval = 2
        self.max_steps = 100
        self.callbacks: dict[str, Any] = {}
        self.device = torch.device("cpu")
        self.metrics: dict[str, torch.Tensor] = {}
        self.cancelled: list[tuple[str, bool]] = []

    def get_metric(self, name: str) -> torch.Tensor | None:
        return self.metrics.get(name)

    def cancel_run(self, reason: str, no_sync: bool = False) -> None:
        self.cancelled.append((reason, no_sync))


def _stability_rank(rank: int, port: int, out: str) -> None:
    from olmoablate.run.guards import StabilityCallback

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=20))
    try:
        cb = StabilityCallback(spike_window=3, spike_factor=1.0, max_spikes=0)
        trainer = _Trainer()
        trainer.metrics_collect_interval = 4  # collect steps 1, 4, 8
        cb.trainer = trainer  # type: ignore[assignment]
        cb.pre_train()
        losses = [1.0, 1.0, 1.0, 5.0, 1.0, 1.0, 1.0, 1.0]  # step 4: a spike; max_spikes = 0

        def deliver_steps_1_to_4() -> None:  # OLMo-core's bookkeeping thread, after step 4
            for s in range(1, 5):
                cb.pre_log_metrics(s, {"train/CE loss": losses[s - 1]})

        for step in range(1, 9):
            trainer.global_step = step
            trainer.metrics = {"train/CE loss": torch.tensor(losses[step - 1])}
            cb.post_train_batch()  # at steps 1, 4 and 8: the non-finite all-reduce
            if rank == 0 and step == 4:
                deliver_steps_1_to_4()  # rank 0's thread is prompt
        if rank == 1:
            deliver_steps_1_to_4()  # rank 1's thread only after its step 8 (a busy host)
        cb.post_train()  # the final check: a collective on every rank
        result: dict[str, Any] = {
            "diverged_at_step": cb.diverged_at_step,
            "reason": cb.reason,
            "cancelled": trainer.cancelled,
        }
    except Exception as err:  # noqa: BLE001 - reported to the test process
        result = {"error": f"{type(err).__name__}: {err}"}
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_stability_all_reduce_is_not_skipped_by_one_rank(tmp_path: Path) -> None:
    """The spike stop (bookkeeping thread) reached rank 0 before step 4's collect point and rank 1
    after it: both ranks still run the same collectives (no gloo timeout) and both end diverged
    for the spikes, not failed."""
    mp.start_processes(
        _stability_rank, args=(_free_port(), str(tmp_path)), nprocs=2, start_method="spawn"
    )
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in results:
        assert "error" not in r, results
        assert r["diverged_at_step"] == 4 and "loss spikes" in r["reason"], results
