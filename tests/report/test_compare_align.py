"""Matched-token alignment, EMA, spike detection and cumulative FLOPs."""

from __future__ import annotations

import numpy as np
import pytest

from olmoablate.report.collect import Curve, cumulative_flops
from olmoablate.report.compare import common_grid, ema, interp_points, loss_spikes, match_points


def test_common_grid_stops_at_shorter_arm() -> None:
    b = Curve.of(np.arange(0, 1000, 10.0), np.linspace(5, 3, 100))
    v = Curve.of(np.arange(0, 500, 10.0), np.linspace(5, 4, 50))
    al = common_grid(b, v, points=50)
    assert al.x[0] == 0 and al.x[-1] == 490
    assert np.allclose(al.baseline, np.interp(al.x, b.x, b.y))
    assert len(common_grid(b, Curve.of(np.array([1.0]), np.array([2.0])))) == 0


def test_match_points_only_identical_tokens_and_drops_nan() -> None:
    b = Curve.of(np.array([100.0, 200, 300, 400]), np.array([4.0, 3.5, np.nan, 3.0]))
    v = Curve.of(np.array([200.0, 300, 400, 500]), np.array([3.4, 3.2, 2.9, 2.8]))
    al = match_points(b, v)
    assert al.x.tolist() == [200, 400]
    assert al.delta.tolist() == pytest.approx([-0.1, -0.1])


def test_interp_points_within_range_only() -> None:
    b = Curve.of(np.array([1.0, 2, 3, 10]), np.array([1.0, 2, 3, 4]))
    v = Curve.of(np.array([0.5, 5.0]), np.array([0.0, 9.0]))
    al = interp_points(b, v)
    assert al.x.tolist() == [1, 2, 3]
    assert al.variant.tolist() == pytest.approx([1.0, 3.0, 5.0])


def test_ema_smooths_and_keeps_length() -> None:
    y = np.r_[np.zeros(50), np.ones(50)]
    s = ema(y, 0.1)
    assert s.shape == y.shape and s[49] == 0 and 0 < s[60] < 1


def test_loss_spikes_finds_planted_spikes_only() -> None:
    rng = np.random.default_rng(0)
    y = 3.0 + rng.normal(0, 0.01, 1000)
    planted = [300, 500, 777]
    y[planted] += 1.0
    found = loss_spikes(y, window=50, factor=3.0)
    assert set(planted) <= set(found.tolist())
    assert len(found) <= len(planted) + 3  # a 3-sigma rule has rare false positives
    assert loss_spikes(y[:40], window=50).size == 0
    y[600] = np.nan
    assert 600 not in loss_spikes(y).tolist()


def test_cumulative_flops_prefers_measured() -> None:
    tok = np.array([100.0, 200, 300])
    pf = np.array([np.nan, 2e-12, 3e-12])
    f, label = cumulative_flops(tok, 6.0, pf)
    assert f is not None and "measured" in label and f[1] == pytest.approx(2000.0)
    f, label = cumulative_flops(tok, 6.0, None)
    assert f is not None and "estimated" in label and f.tolist() == [600, 1200, 1800]
    assert cumulative_flops(tok, None, None) == (None, "unavailable")


def test_loss_spikes_equals_the_jobs_rule() -> None:
    """Same answer as the training job's StabilityCallback, which feeds every step's loss to
    `olmoablate.plan.metrics.SpikeDetector` (mean + k·std of the previous window and a 5 % floor)."""
    from olmoablate.plan.metrics import SpikeDetector

    rng = np.random.default_rng(1)
    y = 3.0 + np.cumsum(rng.normal(0, 0.002, 3000)) + rng.normal(0, 0.02, 3000)
    y[rng.integers(100, 3000, 40)] += rng.uniform(0.02, 1.0, 40)
    det = SpikeDetector(window=50, factor=3.0, min_relative_jump=0.05)
    expected = [i for i, v in enumerate(y) if det.update(float(v))]
    assert 10 <= len(expected) <= 40  # the big injected jumps, not the noise
    assert loss_spikes(y, 50, 3.0, 0.05).tolist() == expected


@pytest.mark.parametrize("alpha", [1e-9, 1e-6, 2 / 1001, 0.05, 2 / 6, 0.9, 1.0])
def test_ema_equals_pandas_ewm(alpha: float) -> None:
    """The numpy EMA is pandas' ewm(adjust=True, ignore_na=True).mean() to rounding, across
    block boundaries, with leading and inner NaNs (forward-filled) and no NaN at all."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(1)
    for n in (1, 2, 255, 256, 257, 5000):
        y = 3.0 + rng.normal(0, 0.5, n) + np.linspace(8, 0, n)
        for holes in (False, True):
            if holes and n > 3:
                y[0] = np.nan
                y[rng.integers(0, n, n // 10)] = np.nan
            got = ema(y, alpha)
            ref = pd.Series(y).ewm(alpha=alpha, adjust=True, ignore_na=True).mean().to_numpy()
            assert np.array_equal(np.isnan(got), np.isnan(ref))
            ok = ~np.isnan(ref)
            assert np.allclose(got[ok], ref[ok], rtol=1e-12, atol=0), (n, holes)
