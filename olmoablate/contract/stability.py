"""The loss-spike rule, shared by the training job (which stops on it) and the report (which counts).

A step's train loss is a spike when the previous ``window`` losses are known and the loss is both
``factor`` standard deviations above their mean *and* at least ``min_relative_jump`` above it
(relative). Why both: a pure ``mean + 3·std`` rule fires on ordinary noise about once per 750
steps (0.13 % for Gaussian noise), so a healthy 100k-step run would "spike" a hundred times; the
relative floor keeps only jumps a person would call a spike. Non-finite losses are never part of
the window (they are handled as divergence, not spikes).

One implementation in two forms — streaming for the job, vectorised for the report — and a test
checks they agree point for point.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: The rule's defaults, defined only here: the spec's ``training.stability`` (contract/schema.py),
#: the training job's StabilityCallback and the report's loss_spikes all import them.
DEFAULT_WINDOW = 50
DEFAULT_FACTOR = 3.0
DEFAULT_MIN_RELATIVE_JUMP = 0.05


def _is_spike(history: Sequence[float], loss: float, factor: float, min_rel: float) -> bool:
    n = len(history)
    mean = sum(history) / n
    var = sum((x - mean) ** 2 for x in history) / n
    std = math.sqrt(var)
    return loss > mean + factor * std and loss > mean * (1.0 + min_rel) and loss - mean > 0


@dataclass
class SpikeDetector:
    """Streaming form: feed losses in step order; ``update`` returns True on a spike."""

    window: int = DEFAULT_WINDOW
    factor: float = DEFAULT_FACTOR
    min_relative_jump: float = DEFAULT_MIN_RELATIVE_JUMP
    history: deque[float] = field(default_factory=deque)

    def update(self, loss: float) -> bool:
        if not math.isfinite(loss):
            return False
        spike = len(self.history) >= self.window and _is_spike(
            self.history, loss, self.factor, self.min_relative_jump
        )
        self.history.append(loss)
        while len(self.history) > self.window:
            self.history.popleft()
        return spike

    def state(self) -> list[float]:
        return list(self.history)

    def load(self, history: Iterable[float]) -> None:
        self.history = deque(list(history)[-self.window :])


def spike_indices(
    losses: Sequence[float],
    window: int = DEFAULT_WINDOW,
    factor: float = DEFAULT_FACTOR,
    min_relative_jump: float = DEFAULT_MIN_RELATIVE_JUMP,
) -> list[int]:
    """Vectorised form for the report: indices (into ``losses``) of spikes, same rule.

    Rolling sums of the previous ``window`` values come from cumulative sums of centred values
    (for precision). The cheap necessary conditions (above the mean, and by the relative jump)
    are tested first on every step; the standard deviation is formed only where they hold, with
    exactly the expressions a full evaluation would use, so the answer is the same bit for bit
    at a fraction of the passes over the (100k-step) array."""
    import numpy as np

    x = np.asarray(losses, dtype=np.float64)
    finite = np.isfinite(x)
    idx_f: np.ndarray | None = None
    xf = x
    if not finite.all():
        idx_f = np.flatnonzero(finite)
        xf = x[finite]
    n = int(xf.size)
    if n <= window:
        return []
    centre = float(xf.mean())
    v0 = xf - centre
    c1 = np.empty(n + 1)
    c1[0] = 0.0
    np.cumsum(v0, out=c1[1:])
    mean0 = c1[window:n] - c1[: n - window]
    mean0 /= window
    mean = mean0 + centre
    cur = xf[window:]
    cand = np.flatnonzero((cur > mean * (1.0 + min_relative_jump)) & (cur > mean))
    if cand.size == 0:
        return []
    c2 = np.empty(n + 1)
    c2[0] = 0.0
    np.square(v0, out=v0)
    np.cumsum(v0, out=c2[1:])
    s2 = c2[window + cand] - c2[cand]
    m0 = mean0[cand]
    std = np.sqrt(np.maximum(s2 / window - m0 * m0, 0.0))
    hit = cand[cur[cand] > mean[cand] + factor * std]
    pos = hit + window
    return [int(k) for k in (pos if idx_f is None else idx_f[pos])]
