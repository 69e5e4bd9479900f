"""Looped-variant extras of a pair: eval loss against the loop count at eval, and H norms.

Why separate: only a ``looped:`` variant logs per-loop-count evals (``... (loops=n)``) and
``train/H norm (loop t)``; the report shows how the loss behaves below, at and beyond the trained
loop count ``b`` (post-horizon divergence), beside the baseline's final loss.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from olmoablate.report.align import Aligned
from olmoablate.report.collect import RunData
from olmoablate.report.cost import num

_LOOP_EVAL = re.compile(r"^(eval/lm/.+/CE loss) \(loops=(\d+)\)$")
_H_NORM = re.compile(r"^train/H norm \(loop (\d+)\)$")


def looped_summary(
    var: RunData, base: RunData, evals: Mapping[str, Aligned]
) -> dict[str, Any] | None:
    arch = var.entry.get("architecture") or {}
    if "looped" not in arch or var.metrics is None:
        return None
    trained_b = int((arch.get("looped") or {}).get("loops") or 0)
    per_set: dict[str, dict[int, float]] = {}
    for key, col in var.metrics.columns.items():
        m = _LOOP_EVAL.match(key)
        if not m:
            continue
        ok = np.isfinite(col)
        if ok.any():
            per_set.setdefault(m.group(1), {})[int(m.group(2))] = float(col[ok][-1])
    sets: dict[str, Any] = {}
    for base_key, by_loop in per_set.items():
        loops = sorted(by_loop)
        at_b = by_loop.get(trained_b)
        if at_b is None:
            plain = evals.get(base_key)
            at_b = float(plain.variant[-1]) if plain is not None and len(plain) else None
        post = by_loop[loops[-1]] - at_b if at_b is not None and loops[-1] > trained_b else None
        base_ref = evals.get(base_key)
        sets[base_key] = {
            "loops": loops,
            "loss": [by_loop[n] for n in loops],
            "at_trained": at_b,
            "post_horizon_divergence": post,
            "baseline_final": float(base_ref.baseline[-1])
            if base_ref is not None and len(base_ref)
            else None,
        }
    hnorm: dict[int, float] = {}
    for key, col in var.metrics.columns.items():
        m = _H_NORM.match(key)
        ok = np.isfinite(col)
        if m and ok.any():
            tail = col[ok][-max(1, int(ok.sum()) // 10) :]
            hnorm[int(m.group(1))] = float(np.mean(tail))
    return {
        "trained_loops": trained_b,
        "sets": sets,
        "h_norm": dict(sorted(hnorm.items())),
        "unique_params": {
            "baseline": num(base.entry.get("unique_params")),
            "variant": num(var.entry.get("unique_params")),
        },
        "train_flops": {
            "baseline": num(base.entry.get("total_train_flops")),
            "variant": num(var.entry.get("total_train_flops")),
        },
    }
