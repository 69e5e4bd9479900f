"""The effective-depth diagnostic per arm (docs/depth.md): what the runs' LM evaluator recorded
under ``eval/depth/`` (``plan.metrics.depth_metric``), read at each run's last eval point that
has it, averaged over seeds per arm and drawn both arms on one figure.

A diagnostic, not a gate input: no verdict reads it, and the report says so beside it. Both arms
of a pair were scored by the same code on the same held-out batches, so their profiles are
comparable in shape; their absolute per-layer CE is not when the arms read out through different
norms (SiameseNorm's merge vs OLMo 3's final norm; docs/depth.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from olmoablate.plan import metrics as metric_names
from olmoablate.report.collect import Results, RunData

#: The frame's columns (``olmoablate.results.load(...).depth``, docs/results.md).
COLUMNS = ["run", "size", "arm", "seed", "set", "step", "kind", "index", "value"]


@dataclass
class DepthRecord:
    """One run's diagnostic at its last eval point that recorded one."""

    run: str
    size: str
    arm: str
    seed: int
    set: str
    step: int
    unit: str  # "layer" or "loop"
    ce: list[float]  # per layer (0 = embeddings) or per loop
    first_within: int | None
    da_weight: dict[int, float] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        head = {"run": self.run, "size": self.size, "arm": self.arm, "seed": self.seed,
                "set": self.set, "step": self.step}  # fmt: skip
        start = metric_names.depth_first_index(self.unit)
        out = [{**head, "kind": self.unit, "index": i, "value": v}
               for i, v in enumerate(self.ce, start=start)]  # fmt: skip
        out += [{**head, "kind": "da_weight", "index": j, "value": w}
                for j, w in sorted(self.da_weight.items())]  # fmt: skip
        if self.first_within is not None:
            out.append({**head, "kind": metric_names.DEPTH_FIRST, "index": None,
                        "value": float(self.first_within)})  # fmt: skip
        return out


def _record(run: RunData) -> list[DepthRecord]:
    """``run``'s depth records, one per eval set, at the last step where the set has a profile."""
    m = run.metrics
    if m is None or not len(m):
        return []
    by_set: dict[str, dict[tuple[str, int | None], np.ndarray]] = {}
    for name, col in m.columns.items():
        parsed = metric_names.split_depth(name)
        if parsed is not None:
            label, kind, i = parsed
            by_set.setdefault(label, {})[(kind, i)] = np.asarray(col, dtype=float)
    out = []
    e = run.entry
    for label, cols in sorted(by_set.items()):
        unit = "loop" if any(k == "loop" for k, _ in cols) else "layer"
        ce_keys = sorted((i for k, i in cols if k == unit and i is not None))
        if not ce_keys:
            continue
        ce_cols = np.stack([cols[(unit, i)] for i in ce_keys])
        done = np.flatnonzero(np.isfinite(ce_cols).all(axis=0))
        if done.size == 0:
            continue
        at = int(done[-1])
        first = cols.get((metric_names.DEPTH_FIRST, None))
        first_at = first[at] if first is not None else math.nan
        out.append(
            DepthRecord(
                run=e.run_id, size=e.size, arm=e.arm, seed=e.seed, set=label,
                step=int(m.steps[at]), unit=unit, ce=[float(v) for v in ce_cols[:, at]],
                first_within=int(first_at) if math.isfinite(first_at) else None,
                da_weight={i: float(c[at]) for (k, i), c in cols.items()
                           if k == "da_weight" and i is not None and math.isfinite(c[at])},
            )
        )  # fmt: skip
    return out


def depth_records(results: Results) -> list[DepthRecord]:
    """Every run's records (runs without the diagnostic, e.g. older runs, have none)."""
    return [rec for run in results.runs.values() for rec in _record(run)]


@dataclass
class ArmProfile:
    """One arm's profile at one size on one eval set: the mean over its seeds."""

    size: str
    arm: str
    set: str
    unit: str
    seeds: list[int]
    ce: list[float]
    ce_runs: list[list[float]]
    first_within: list[int | None]
    da_weight: dict[int, float]

    @property
    def indices(self) -> list[int]:
        """The layer (or loop) index of each entry of ``ce``."""
        start = metric_names.depth_first_index(self.unit)
        return list(range(start, start + len(self.ce)))


def arm_profiles(records: Sequence[DepthRecord]) -> list[ArmProfile]:
    """Records grouped by (size, set, arm), each arm's CE the mean over the seeds that share its
    depth (the baseline first, then the variants in name order)."""
    groups: dict[tuple[str, str, str], list[DepthRecord]] = {}
    for r in records:
        groups.setdefault((r.size, r.set, r.arm), []).append(r)
    out = []
    for (size, label, arm), recs in groups.items():
        recs = sorted(recs, key=lambda r: r.seed)
        n = len(recs[0].ce)
        recs = [r for r in recs if len(r.ce) == n]
        ce = np.mean([r.ce for r in recs], axis=0)
        keys = sorted({j for r in recs for j in r.da_weight})
        da = {j: float(np.mean([r.da_weight[j] for r in recs if j in r.da_weight])) for j in keys}
        out.append(
            ArmProfile(size, arm, label, recs[0].unit, [r.seed for r in recs],
                       [float(v) for v in ce], [r.ce for r in recs],
                       [r.first_within for r in recs], da)  # fmt: skip
        )
    return sorted(out, key=lambda p: (p.size, p.set, p.arm != "baseline", p.arm))
