"""The loss-spike rule: streaming (job) and vectorised (report) forms agree; noise is not a spike."""

from __future__ import annotations

import numpy as np

from olmoablate.plan.metrics import SpikeDetector, spike_indices


def _series(seed: int, n: int = 3000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = 3.0 + 2.0 * np.exp(-np.arange(n) / 300) + rng.normal(0, 0.03, n)
    for at in rng.choice(np.arange(100, n), size=8, replace=False):
        x[at] += rng.uniform(0.3, 1.0)  # real spikes: 10-30 % jumps
    x[rng.integers(100, n)] = np.nan
    return x


def test_streaming_and_vectorised_agree() -> None:
    for seed in range(5):
        x = _series(seed)
        det = SpikeDetector()
        streamed = [i for i, v in enumerate(x) if det.update(float(v))]
        assert streamed == spike_indices(x)
        assert 1 <= len(streamed) <= 8


def test_gaussian_noise_is_not_a_spike_storm() -> None:
    rng = np.random.default_rng(0)
    x = 3.0 + rng.normal(0, 0.03, 100_000)
    assert len(spike_indices(x)) == 0  # a pure mean+3σ rule would report ~130 here


def test_state_round_trip() -> None:
    x = _series(1)
    a = SpikeDetector()
    for v in x[:1000]:
        a.update(float(v))
    b = SpikeDetector()
    b.load(a.state())
    assert [a.update(float(v)) for v in x[1000:]] == [b.update(float(v)) for v in x[1000:]]
