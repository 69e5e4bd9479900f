"""Noise sources: A/A run-level sd, matched-token run values, the jitter diagnostic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from olmoablate.report.noise import aa_source, estimate, jitter, run_level_values
from olmoablate.stats import t_ppf


def test_aa_source_is_sqrt2_times_the_run_sd_with_k_dof() -> None:
    src = aa_source([2.50, 2.52, 2.47], ["a", "b", "c"])
    assert src is not None and src.dof == 2
    assert src.run_sd == pytest.approx(float(np.std([2.50, 2.52, 2.47], ddof=1)))
    assert src.sd == pytest.approx(src.run_sd * math.sqrt(2))
    assert aa_source([2.5, math.nan], ["a", "b"]) is None
    est = estimate([[0.05, 0.05, 0.05]], 0.95, src)
    assert est is not None and est.lower == pytest.approx(0.05 - t_ppf(0.95, 2) * src.sd)


def test_run_level_values_use_common_points_and_windows() -> None:
    x = np.arange(1.0, 11.0)
    a = (x, x * 0 + 1.0)
    b = (x[:8], x[:8] * 0 + 2.0)  # shorter run: only common x count
    assert run_level_values([a, b], last_n=3) == [1.0, 2.0]
    ramp = (x, x.copy())
    # windows of 2 over the 10 points: means 1.5, 3.5, ..., 9.5; last 2 -> 8.5
    assert run_level_values([ramp], last_n=2, window=2) == [8.5]


def test_jitter_ignores_a_trend() -> None:
    x = np.arange(1.0, 7.0) * 1000
    trend = 0.01 * np.arange(6)  # a clean trend: raw spread is large, jitter is ~0
    j = jitter(x, trend, last_n=3)
    assert j is not None and j.sd < 1e-12 and float(np.std(trend[-3:], ddof=1)) > 0.009
    rng = np.random.default_rng(0)
    noisy = trend + rng.normal(0, 0.002, 6)
    j = jitter(x, noisy, last_n=3)
    assert (
        j is not None
        and 0.0003 < j.sd < 0.006
        and j.se_of_mean == pytest.approx(j.sd / math.sqrt(3))
    )
    assert jitter(x[:3], trend[:3], 3) is None
