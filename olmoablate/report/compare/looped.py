"""Looped-variant extras of a pair: eval loss against the loop count at eval, and H norms.

Why separate: only a ``looped:`` variant logs per-loop-count evals (``... (loops=n)``) and
``train/H norm (loop t)``; the report shows how the loss behaves below, at and beyond the trained
loop count ``b`` (post-horizon divergence), beside the baseline's final loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from olmoablate.contract import metrics as names
from olmoablate.report.compare.align import Aligned
from olmoablate.report.compare.cost import num
from olmoablate.report.read.collect import RunData


def loop_eval(name: str) -> tuple[str, int] | None:
    """(eval set's CE loss name, loop count) of an LM eval scored at another loop count
    (``eval/lm/<set>/CE loss (loops=n)``), None for any other metric."""
    base, loops = names.split_loops(name)
    if loops is None or not names.is_lm_ce(base):
        return None
    return base, loops


def is_loop_eval(name: str) -> bool:
    return loop_eval(name) is not None


def looped_summary(
    var: RunData, base: RunData, evals: Mapping[str, Aligned]
) -> dict[str, Any] | None:
    looped = var.entry.architecture.looped
    if looped is None or var.metrics is None:
        return None
    trained_b = looped.loops
    per_set: dict[str, dict[int, float]] = {}
    for key, col in var.metrics.columns.items():
        parsed = loop_eval(key)
        if parsed is None:
            continue
        ok = np.isfinite(col)
        if ok.any():
            per_set.setdefault(parsed[0], {})[parsed[1]] = float(col[ok][-1])
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
        loop = names.h_norm_loop(key)
        ok = np.isfinite(col)
        if loop is not None and ok.any():
            tail = col[ok][-max(1, int(ok.sum()) // 10) :]
            hnorm[loop] = float(np.mean(tail))
    return {
        "trained_loops": trained_b,
        "sets": sets,
        "h_norm": dict(sorted(hnorm.items())),
        "unique_params": {
            "baseline": num(base.entry.unique_params),
            "variant": num(var.entry.unique_params),
        },
        "train_flops": {
            "baseline": num(base.entry.total_train_flops),
            "variant": num(var.entry.total_train_flops),
        },
    }
