"""Step-time overhead: steady-state step selection and the batch-means ratio interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from olmoablate.plan.metrics import ATTEMPT_WARMUP_STEPS
from olmoablate.report.overhead import (
    MIN_BLOCKS,
    ArmTiming,
    autocorr_time,
    batch_means,
    conditions,
    ratio_interval,
    steady_steps,
    step_time_check,
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
    from olmoablate.run.records import MetricsJSONLCallback

    assert MetricsJSONLCallback.WARMUP_STEPS == ATTEMPT_WARMUP_STEPS


def test_batch_means_and_ratio_interval_cover_the_truth() -> None:
    rng = np.random.default_rng(0)
    assert batch_means(rng.normal(0, 1, 5)).size == 0  # too short for MIN_BLOCKS batches
    assert batch_means(np.arange(60.0)).size == 0  # a trend: autocorrelation time ~ the series
    iid = batch_means(rng.normal(0, 1, 200))
    assert MIN_BLOCKS <= iid.size <= 2 * MIN_BLOCKS
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
    # slow drift (a neighbour's load): iid treatment would understate the uncertainty; 400
    # steps are only 10 drift periods -- too short for batches of several autocorrelation
    # times (no interval, issue 23); 3200 steps give one, and it is wider than the iid one
    for n, has in ((400, False), (3200, True)):
        drift = np.repeat(rng.normal(0, 0.1, n // 40), 40)
        b = 1.0 + drift + rng.normal(0, 0.01, n)
        v = 1.1 + rng.normal(0, 0.01, n)
        ri = ratio_interval(b, v, 0.95)
        assert (ri is not None) == has
        if ri is not None:
            iid_se = math.sqrt(
                b.var(ddof=1) / (n * b.mean() ** 2) + v.var(ddof=1) / (n * v.mean() ** 2)
            )
            assert ri.log_se > 2 * iid_se


def test_conditions_name_different_nodes_and_local_runs() -> None:
    a = ArmTiming("a", np.ones(3), "step_cpu_time_s", "n1", "local")
    b = ArmTiming("b", np.ones(3), "step_cpu_time_s", "n2", "slurm")
    notes = conditions(a, b)
    assert any("different nodes" in n for n in notes) and any("local runs" in n for n in notes)
    same = ArmTiming("c", np.ones(3), "step_time_s", "n1", "slurm")
    assert conditions(same, same) == []


def _ar1(rng: np.random.Generator, phi: float, n: int, reps: int) -> np.ndarray:
    e = rng.standard_normal((reps, n + 300))
    x = np.zeros_like(e)
    for t in range(1, n + 300):
        x[:, t] = phi * x[:, t - 1] + e[:, t]
    return x[:, 300:] * math.sqrt(1 - phi**2)


def test_ar1_phi_09_interval_holds_or_says_inconclusive() -> None:
    """issue 23: AR(1) phi = 0.9 step times (ten fixed batches missed 9-16% per side)."""
    rng = np.random.default_rng(5)
    tau = autocorr_time(_ar1(rng, 0.9, 4000, 1)[0])
    assert 12 < tau < 28  # (1 + phi) / (1 - phi) = 19
    reps, n = 300, 1000
    b, v = 1.0 + 0.05 * _ar1(rng, 0.9, n, reps), 1.1 + 0.05 * _ar1(rng, 0.9, n, reps)
    lo = hi = got = 0
    for i in range(reps):
        ri = ratio_interval(b[i], v[i], 0.95)
        if ri is None:
            continue
        got += 1
        lo += ri.lower > 1.1
        hi += ri.upper < 1.1
    assert got > 0.7 * reps
    se = math.sqrt(0.05 * 0.95 / got)
    assert lo / got < 0.05 + 3 * se and hi / got < 0.05 + 3 * se, (lo / got, hi / got)
    # 100 steps cannot hold MIN_BLOCKS batches of several autocorrelation times: inconclusive
    short = _ar1(rng, 0.9, 100, 1)[0]
    a = ArmTiming("b", 1.0 + 0.05 * short, "step_time_s")
    c = ArmTiming("v", 1.1 + 0.05 * _ar1(rng, 0.9, 100, 1)[0], "step_time_s")
    chk = step_time_check([("p0", a, c)], 0.10, 0.95)
    assert chk is not None and chk.outcome == "inconclusive"
    assert "autocorrelation" in chk.reason and "too short" in chk.reason


@pytest.mark.parametrize("pairs", [2, 3])
def test_short_autocorrelated_runs_fall_back_to_the_spread_across_seeds(pairs: int) -> None:
    """Runs too short for within-run batch means (AR(1) phi = 0.9, 300 steps: tau ~ 19) but
    several seeds: each pair's ratio of run means is one independent replicate, and the t interval
    of their spread holds its level per side (truth: 10% overhead)."""
    rng = np.random.default_rng(11 + pairs)
    reps, n, truth = 1500, 300, 0.10
    lo = hi = fallback = 0
    for _ in range(reps):
        b = 1.0 + 0.05 * _ar1(rng, 0.9, n, pairs)
        v = (1.0 + truth) * (1.0 + 0.05 * _ar1(rng, 0.9, n, pairs))
        chk = step_time_check(
            [(f"p{i}", ArmTiming("b", b[i], "step_time_s"), ArmTiming("v", v[i], "step_time_s"))
             for i in range(pairs)],  # fmt: skip
            truth,
            0.95,
        )
        assert chk is not None and chk.lower is not None and chk.upper is not None
        fallback += "run-mean ratios" in chk.reason
        lo += chk.lower > truth
        hi += chk.upper < truth
    assert fallback > 0.8 * reps  # mostly the fallback; the rest had within-run intervals
    se = math.sqrt(0.05 * 0.95 / reps)
    assert lo / reps < 0.05 + 3 * se and hi / reps < 0.05 + 3 * se, (lo / reps, hi / reps)
    # one pair alone has no replicate spread: still inconclusive
    one = step_time_check(
        [("p0", ArmTiming("b", 1.0 + 0.05 * _ar1(rng, 0.9, n, 1)[0], "step_time_s"),
          ArmTiming("v", 1.1 + 0.05 * _ar1(rng, 0.9, n, 1)[0], "step_time_s"))],
        0.10, 0.95,
    )  # fmt: skip
    assert one is not None and one.outcome == "inconclusive"
