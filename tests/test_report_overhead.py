"""Step-time overhead: steady-state step selection and the batch-means ratio interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from olmoablate.report.overhead import (
    ATTEMPT_WARMUP_STEPS,
    ArmTiming,
    batch_means,
    conditions,
    ratio_interval,
    steady_steps,
)

#: warm-up 10 steps, evaluation every 20 steps, checkpoints every 50
PLAN = {"warmup_steps": 10, "intervals": (20, 50)}


def test_steady_steps_drop_warmup_eval_checkpoint_and_resume_steps() -> None:
    steps = np.arange(1, 101)
    times = np.full(100, 1.0)
    in_attempt = np.where(steps <= 60, steps, steps - 60)  # resumed after step 60
    t, dropped = steady_steps(steps, times, in_attempt, **PLAN)
    kept = [
        s
        for s in steps
        if s > 10
        and s % 20 not in (0, 1)
        and s % 50 not in (0, 1)
        and not 61 <= s <= 60 + ATTEMPT_WARMUP_STEPS
    ]
    assert t.size == len(kept) and dropped == 100 - len(kept)
    # rows without the column are kept (older metrics files)
    t2, _ = steady_steps(steps, times, np.full(100, np.nan), **PLAN)
    assert t2.size == steady_steps(steps, times, **PLAN)[0].size


def test_attempt_warmup_matches_the_training_job() -> None:
    from olmoablate.train.records import MetricsJSONLCallback

    assert MetricsJSONLCallback.WARMUP_STEPS == ATTEMPT_WARMUP_STEPS


def test_batch_means_and_ratio_interval_cover_the_truth() -> None:
    assert batch_means(np.arange(5.0)).size == 0  # too short for two blocks of 3
    assert batch_means(np.arange(60.0)).size == 10
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(200):
        b = 1.0 + rng.normal(0, 0.1, 120)
        v = 1.2 + rng.normal(0, 0.1, 120)
        ri = ratio_interval(b, v, 0.95)
        assert ri is not None
        covered += ri.lower <= 1.2 <= ri.upper
    # two one-sided 95% bounds: about 90% two-sided coverage for iid data
    assert 0.8 <= covered / 200 <= 0.97
    flat = ratio_interval(np.full(60, 0.5), np.full(60, 0.6), 0.95)
    assert flat is not None and flat.lower == pytest.approx(1.2) == flat.upper


def test_autocorrelated_steps_widen_the_interval() -> None:
    rng = np.random.default_rng(1)
    n = 400
    # slow drift (a neighbour's load): iid treatment would understate the uncertainty
    drift = np.repeat(rng.normal(0, 0.1, n // 40), 40)
    b = 1.0 + drift + rng.normal(0, 0.01, n)
    v = 1.1 + rng.normal(0, 0.01, n)
    ri = ratio_interval(b, v, 0.95)
    assert ri is not None
    iid_se = math.sqrt(b.var(ddof=1) / (n * b.mean() ** 2) + v.var(ddof=1) / (n * v.mean() ** 2))
    assert ri.log_se > 2 * iid_se


def test_conditions_name_different_nodes_and_local_runs() -> None:
    a = ArmTiming("a", np.ones(3), "step_cpu_time_s", "n1", "local")
    b = ArmTiming("b", np.ones(3), "step_cpu_time_s", "n2", "slurm")
    notes = conditions(a, b)
    assert any("different nodes" in n for n in notes) and any("local runs" in n for n in notes)
    same = ArmTiming("c", np.ones(3), "step_time_s", "n1", "slurm")
    assert conditions(same, same) == []
