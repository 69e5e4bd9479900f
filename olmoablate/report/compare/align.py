"""Matched-token (and matched-FLOP) alignment of two arms' curves.

Why a separate module: every number the report prints compares the arms *at the same amount of
training*, never "at the end of whatever each run reached". Train loss is interpolated onto one
token grid that stops where the shorter arm stops; eval points are only paired at identical token
counts (both arms evaluate at the same steps, so no interpolation is needed or allowed). Under
FLOPs matching the same is done on a cumulative-FLOPs axis, labelled as such.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from olmoablate.contract.stability import (
    DEFAULT_FACTOR,
    DEFAULT_MIN_RELATIVE_JUMP,
    DEFAULT_WINDOW,
)
from olmoablate.report.read.curve import Curve


@dataclass
class Aligned:
    """Two arms on a shared x axis (tokens or FLOPs); ``delta`` = variant - baseline (raw)."""

    x: np.ndarray
    baseline: np.ndarray
    variant: np.ndarray

    @property
    def delta(self) -> np.ndarray:
        return self.variant - self.baseline

    def __len__(self) -> int:
        return int(self.x.size)


def common_grid(b: Curve, v: Curve, points: int = 1000) -> Aligned:
    """Interpolate both curves onto one grid spanning only the x range both arms reached."""
    if len(b) < 2 or len(v) < 2:
        return Aligned(np.empty(0), np.empty(0), np.empty(0))
    lo, hi = max(b.x[0], v.x[0]), min(b.x[-1], v.x[-1])
    if hi <= lo:
        return Aligned(np.empty(0), np.empty(0), np.empty(0))
    grid = np.linspace(lo, hi, points)
    return Aligned(grid, np.interp(grid, b.x, b.y), np.interp(grid, v.x, v.y))


def match_points(b: Curve, v: Curve) -> Aligned:
    """Pair eval points at identical x (tokens): no interpolation."""
    common, ib, iv = np.intersect1d(b.x, v.x, assume_unique=False, return_indices=True)
    return Aligned(common, b.y[ib], v.y[iv])


def interp_points(b: Curve, v: Curve) -> Aligned:
    """Pair the baseline's points with the variant interpolated at the same x (within range).

    Used only on the FLOPs axis, where the arms' eval points do not coincide.
    """
    if len(v) < 2 or len(b) == 0:
        return Aligned(np.empty(0), np.empty(0), np.empty(0))
    keep = (b.x >= v.x[0]) & (b.x <= v.x[-1])
    x = b.x[keep]
    return Aligned(x, b.y[keep], np.interp(x, v.x, v.y))


def ema(y: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """Exponential moving average (NaNs carry the previous value) for smoothed plots.

    The same quantity as pandas' ``ewm(alpha, adjust=True, ignore_na=True).mean()`` (the
    weighted mean of the points so far, weights ``(1 - alpha)**age`` counted over finite points
    only), to floating-point rounding, computed blockwise in numpy: importing pandas for this
    alone costs more than smoothing a whole ladder's curves.
    """
    y = np.asarray(y, dtype=float)
    if y.size == 0:
        return y
    ok = ~np.isnan(y)
    v = y[ok]
    if v.size == 0:
        return np.full(y.size, np.nan)
    beta = 1.0 - float(alpha)
    if beta <= 0.0:
        smooth = v.copy()
    else:
        smooth = _weighted_mean_blocks(v, beta)
    if v.size == y.size:
        return smooth
    out = np.full(y.size, np.nan)
    out[ok] = smooth
    # a NaN point repeats the last average (forward fill); leading NaNs stay NaN
    idx = np.where(ok, np.arange(y.size), -1)
    np.maximum.accumulate(idx, out=idx)
    have = idx >= 0
    out[have] = out[idx[have]]
    return out


def _weighted_mean_blocks(v: np.ndarray, beta: float) -> np.ndarray:
    """sum_{i<=t} beta**(t-i) v_i / sum_{i<=t} beta**(t-i) for every t, without a Python loop
    per point: within a block the sum is beta**j * cumsum(beta**-i * v_i) (the block is short
    enough that beta**-i stays below e**30), and blocks are chained by a short scalar loop.
    Powers go through log1p/expm1 so that beta close to 1 keeps full precision."""
    n = v.size
    lb = np.log1p(-(1.0 - beta)) if beta < 1.0 else 0.0  # log(beta), accurate near 1
    width = int(min(256, max(1, 30.0 / max(-lb, 1e-300))))
    n_blocks = -(-n // width)
    pad = np.zeros(n_blocks * width)
    pad[:n] = v
    j = np.arange(width, dtype=float)
    decay = np.exp(lb * j)
    local = np.cumsum(pad.reshape(n_blocks, width) * np.exp(-lb * j), axis=1)
    local *= decay  # sums over each block's own points
    carry = np.empty(n_blocks)  # the whole sum just before each block
    total = 0.0
    step = float(np.exp(lb * width))
    for b, end in enumerate(local[:, -1].tolist()):
        carry[b] = total
        total = end + step * total
    local += carry[:, None] * (decay * beta)[None, :]
    t1 = np.arange(1, n + 1, dtype=float)
    weights = -np.expm1(lb * t1) / (1.0 - beta) if beta < 1.0 else t1
    return local.ravel()[:n] / weights


def loss_spikes(
    loss: np.ndarray,
    window: int = DEFAULT_WINDOW,
    factor: float = DEFAULT_FACTOR,
    min_relative_jump: float = DEFAULT_MIN_RELATIVE_JUMP,
) -> np.ndarray:
    """Indices of loss spikes under the project's one rule (`olmoablate.contract.stability`), the same
    rule the training job's StabilityCallback counts with, so report and job agree."""
    from olmoablate.contract.stability import spike_indices

    return np.asarray(spike_indices(loss, window, factor, min_relative_jump), dtype=np.int64)
