"""One arm's curve: y(x), finite points only, sorted by x; and a run's cumulative-FLOPs axis.

Why in ``read``: the loader builds one per metric of a run (``RunData.curve``); every comparison
(:mod:`olmoablate.report.compare.align`) and the notebook frames
(:mod:`olmoablate.report.read.metric_frames`) then read them, on the same FLOPs axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Curve:
    """y(x) of one arm, finite points only, sorted by x."""

    x: np.ndarray
    y: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray | None, y: np.ndarray | None) -> Curve:
        if x is None or y is None:
            return cls(np.empty(0), np.empty(0))
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        keep = np.isfinite(x) & np.isfinite(y)
        if not keep.all():
            x, y = x[keep], y[keep]
        if x.size > 1 and not np.all(x[1:] >= x[:-1]):  # metrics are sorted by step already
            order = np.argsort(x, kind="stable")
            x, y = x[order], y[order]
        return cls(x, y)

    def __len__(self) -> int:
        return int(self.x.size)


def cumulative_flops(
    tokens: np.ndarray, flops_per_token: float | None, petaflops: np.ndarray | None
) -> tuple[np.ndarray | None, str]:
    """Cumulative training FLOPs per metrics row, and how they were obtained.

    Prefers OLMo-core's own ``throughput/total petaflops`` (exact under a loop curriculum, where
    FLOPs per step change); otherwise tokens x the plan's FLOPs/token (exact for fixed-cost
    models, an approximation for curricula; the label says which).
    """
    if petaflops is not None and np.isfinite(petaflops).sum() >= 2:
        pf = np.asarray(petaflops, dtype=float) * 1e15
        # fill rows without the metric (SpeedMonitor starts at step 2) by tokens-proportional
        ok = np.isfinite(pf)
        if not ok.all():
            pf = np.interp(tokens, tokens[ok], pf[ok])
        return pf, "measured (throughput/total petaflops)"
    if flops_per_token:
        return np.asarray(tokens, dtype=float) * float(flops_per_token), (
            "estimated (tokens x plan train_flops_per_token)"
        )
    return None, "unavailable"
