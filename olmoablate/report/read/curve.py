"""One arm's curve: y(x), finite points only, sorted by x.

Why in ``read``: the loader builds one per metric of a run (``RunData.curve``); every comparison
(:mod:`olmoablate.report.compare.align`) then reads them.
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
