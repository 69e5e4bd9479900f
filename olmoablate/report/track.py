"""The gate's track record: did a stage verdict hold at the sizes it promoted to?

A 1B gate is worth what its decisions are worth at 3B/7B (DataDecide's "decision accuracy").
``proceed`` held at a larger size when the improvement there is still > 0; ``stop`` held when it
is at most ``min_effect``; ``ranked_same`` is DataDecide's criterion (the same sign at the stage
and the size). A proposal held when its verdict held at every promoted size with results.
Proposals sharing a baseline run are not independent: the accuracy by group and its Wilson
interval count each group (proposals linked by a shared baseline identity) once. The verdict
words come from :mod:`olmoablate.plan.names`, so ``board`` stays light.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from olmoablate.plan.names import PROCEED, STOP

DECIDED = (PROCEED, STOP)


@dataclasses.dataclass(frozen=True)
class TrackRow:
    """One decided proposal at one promoted size that has results."""

    proposal: str  # "<spec>/<gate>/<variant>"
    spec: str
    variant: str
    stage: str
    stage_verdict: str
    stage_effect: float
    size: str
    effect: float
    lower: float | None
    upper: float | None
    min_effect: float
    held: bool
    ranked_same: bool


def held(verdict: str, effect: float, min_effect: float) -> bool:
    """Whether a stage ``verdict`` held at a size where the improvement is ``effect``."""
    if verdict == PROCEED:
        return effect > 0
    if verdict == STOP:
        return effect <= min_effect
    raise ValueError(f"not a decided verdict: {verdict!r}")


def _sign(x: float) -> int:
    return 0 if x == 0 else (1 if x > 0 else -1)


def track_rows(
    proposal: str,
    spec: str,
    variant: str,
    stage: str,
    verdict: str,
    stage_effect: float | None,
    min_effect: float,
    at_sizes: Sequence[tuple[str, dict[str, Any] | None]],
) -> list[TrackRow]:
    """The rows of one proposal: ``at_sizes`` = (promoted size, its estimate or None)."""
    if verdict not in DECIDED or stage_effect is None:
        return []
    out = []
    for size, est in at_sizes:
        if not est or est.get("mean") is None:
            continue
        eff = float(est["mean"])
        out.append(
            TrackRow(
                proposal, spec, variant, stage, verdict, float(stage_effect), size, eff,
                est.get("lower"), est.get("upper"), float(min_effect),
                held(verdict, eff, min_effect), _sign(eff) == _sign(float(stage_effect)),
            )
        )  # fmt: skip
    return out


def wilson(successes: float, n: float, z: float = 1.96) -> tuple[float, float] | None:
    """Wilson score interval of a proportion (None when n is 0)."""
    if n <= 0:
        return None
    p = successes / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def summary(rows: Sequence[TrackRow], groups: dict[str, int]) -> dict[str, Any]:
    """Decision accuracy over proposals (each proposal held at every promoted size with results),
    with the number of proposals and of independent groups (``groups``: proposal -> group id)."""
    by: dict[str, list[TrackRow]] = {}
    for r in rows:
        by.setdefault(r.proposal, []).append(r)
    outcome = {p: all(r.held for r in rs) for p, rs in by.items()}
    ranked = {p: all(r.ranked_same for r in rs) for p, rs in by.items()}
    n = len(outcome)
    clusters: dict[int, list[bool]] = {}
    for p, ok in outcome.items():
        clusters.setdefault(groups.get(p, -1 - len(clusters)), []).append(ok)
    k = len(clusters)
    per_group = [sum(v) / len(v) for v in clusters.values()]
    acc_group = sum(per_group) / k if k else None
    return {
        "proposals": n,
        "independent_groups": k,
        "held": sum(outcome.values()),
        "decision_accuracy": (sum(outcome.values()) / n) if n else None,
        "ranked_same": (sum(ranked.values()) / n) if n else None,
        "decision_accuracy_by_group": acc_group,
        "interval_95": wilson(acc_group * k, k) if acc_group is not None else None,
        "note": (
            f"{n} decided proposal(s) with promoted-size results in {k} independent group(s) "
            "(proposals sharing a baseline run count as one group; the interval uses the groups)"
        ),
    }
