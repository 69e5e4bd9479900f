"""The gate's track record: did a stage verdict hold at the sizes it promoted to?

A 1B gate is worth what its decisions are worth at 3B/7B (DataDecide's "decision accuracy").
``proceed`` held at a larger size when the improvement there is still > 0; ``stop`` held when it
is at most ``min_effect``; ``ranked_same`` is DataDecide's criterion (the same sign at the stage
and the size). A proposal held when its verdict held at every promoted size with results.
Proposals sharing a baseline run are not independent: the accuracy by group and its Wilson
interval count each group (proposals linked by a shared baseline identity) once. The verdict
words come from :mod:`olmoablate.plan.names`, so ``board`` stays light.

A multiplier gate (:mod:`.ladder`) is checked against its projection: where a target size has
results, the realized multiplier there (:class:`ProjectionCheck`) against the projection's
bounds; ``proceed`` held when it is > 1x, ``stop`` when it is at most ``min_multiplier``. The
board reads those from gate.json (:func:`ladder_rows`, :func:`ladder_projection`): no
estimator, no refit on a login node.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Protocol

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


class LossLaw(Protocol):
    """A fitted baseline law (``scaling.Law``), named structurally so ``board`` imports no
    estimator: loss at a compute, and the compute that reaches a loss (None: never)."""

    def loss(self, compute: float) -> Any: ...

    def compute_for(self, loss: float) -> float | None: ...


@dataclasses.dataclass(frozen=True)
class ProjectionCheck:
    """A ladder's projection at a target size checked against runs trained there. ``realized``:
    the compute the fitted baseline law needs to reach the variant's mean loss, over the
    variant's training FLOPs. ``anchored``: the same with the law moved up or down to pass
    through the baseline's mean loss measured there, so an error of the law's level at the target
    (which the measured baseline shows: ``baseline_loss`` against ``baseline_predicted``) is not
    read as the variant's; at equal FLOPs it is > 1 exactly when the variant's loss is lower.
    ``inside``/``inside_anchored``: within the projection's one-sided bounds (point checks: the
    realized values carry their own seed noise, ``seeds`` says how much)."""

    size: str
    seeds: int
    variant_loss: float
    baseline_loss: float
    baseline_predicted: float
    realized: float | None
    anchored: float | None
    projected: float | None
    lower: float | None
    upper: float | None
    inside: bool | None
    inside_anchored: bool | None

    @property
    def line(self) -> str:
        """One sentence for the report."""
        law = (
            f"the baseline law predicted {self.baseline_predicted:.4g} there, measured "
            f"{self.baseline_loss:.4g}"
        )
        head = f"at {self.size} ({self.seeds} seed(s)):"
        if self.realized is None or self.anchored is None:
            return (
                f"{head} the variant's loss {self.variant_loss:.4g} is at or below the law's "
                f"irreducible loss, so the realized multiplier is undefined; {law}"
            )
        got = (
            f"realized multiplier {self.realized:.3g}x from the fitted law, "
            f"{self.anchored:.3g}x with the law through the measured baseline"
        )
        if self.projected is None or self.lower is None or self.upper is None:
            return f"{head} {got} (no projection to compare: refused); {law}"
        where = {True: "inside", False: "OUTSIDE"}
        return (
            f"{head} {got}: {where[bool(self.inside)]}, {where[bool(self.inside_anchored)]} the "
            f"projection {self.projected:.3g}x [{self.lower:.3g}, {self.upper:.3g}]; {law}"
        )


def projection_check(
    size: str,
    law: LossLaw,
    baseline_losses: Sequence[float],
    variant_losses: Sequence[float],
    flops_b: float,
    flops_v: float,
    projection: tuple[float, float, float] | None,
) -> ProjectionCheck:
    """Check one projection ((estimate, lower, upper) or None) against the runs at ``size``."""
    mv = sum(variant_losses) / len(variant_losses)
    mb = sum(baseline_losses) / len(baseline_losses)
    predicted = float(law.loss(flops_b))
    need = law.compute_for(mv)
    near = law.compute_for(mv - (mb - predicted))
    realized = None if need is None else need / flops_v
    anchored = None if near is None else near / flops_v
    est, lo, hi = projection if projection is not None else (None, None, None)

    def within(m: float | None) -> bool | None:
        return None if m is None or lo is None or hi is None else lo <= m <= hi

    return ProjectionCheck(
        size, len(variant_losses), mv, mb, predicted, realized, anchored, est, lo, hi,
        within(realized), within(anchored),
    )  # fmt: skip


def multiplier_held(verdict: str, realized: float, min_multiplier: float) -> bool:
    """A multiplier verdict at a size where the realized multiplier is ``realized``: proceed held
    when the variant still saves compute there (> 1), stop when it clears no more than the bar
    (the quality gate's rule with 1x for no effect and ``min_multiplier`` for ``min_effect``)."""
    if verdict == PROCEED:
        return realized > 1.0
    if verdict == STOP:
        return realized <= min_multiplier
    raise ValueError(f"not a decided verdict: {verdict!r}")


def multiplier_rows(
    proposal: str,
    spec: str,
    variant: str,
    stage: str,
    verdict: str,
    stage_multiplier: float | None,
    min_multiplier: float,
    checks: Sequence[dict[str, Any]],
) -> list[TrackRow]:
    """The rows of one multiplier proposal from its ladder's projection checks (gate.json):
    effects are the anchored realized multipliers (:class:`ProjectionCheck`: at equal FLOPs > 1
    exactly when the variant's loss is lower there), ``ranked_same`` compares the sides of 1x at
    the stage and the size."""
    if verdict not in DECIDED or stage_multiplier is None:
        return []
    out = []
    for c in checks:
        m = c.get("anchored")
        if m is None:
            continue
        out.append(
            TrackRow(
                proposal, spec, variant, stage, verdict, float(stage_multiplier), str(c["size"]),
                float(m), c.get("lower"), c.get("upper"), float(min_multiplier),
                multiplier_held(verdict, float(m), min_multiplier),
                _sign(math.log(m)) == _sign(math.log(stage_multiplier)),
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


# gate.json's ladder records as the board reads them (plain dicts: no estimator, no refit)


def _ladder_fit(lad: dict[str, Any], unit: str) -> dict[str, Any]:
    fit = (lad.get("fits") or {}).get(unit) or {}
    if not isinstance(fit, dict):
        raise ValueError(f"'ladder.fits.{unit}' is not an object")
    return fit


def ladder_projection(lad: dict[str, Any] | None) -> dict[str, Any] | None:
    """A variant's ladder record -> the projection at the largest target (by its FLOPs) in the
    gate's unit (``unit, size, estimate, lower, upper``), or why there is none (``refused``),
    with the fewest seeds of a rung and the noise source."""
    if not lad:
        return None
    unit = str(lad.get("unit"))
    projs = [p for p in _ladder_fit(lad, unit).get("projections") or [] if p.get("multiplier")]
    refused = lad.get("refused") or ("" if projs else "no projection")
    seeds = [len(r.get("loss_v") or {}) for r in lad.get("rungs") or []]
    head = {"unit": unit, "unit_word": lad.get("unit_word") or unit,
            "seeds": min(seeds) if seeds else None,
            "noise": _ladder_fit(lad, unit).get("noise_source") or None}  # fmt: skip
    if refused:
        return {**head, "refused": str(refused)}
    top = max(projs, key=lambda p: float(p.get("flops_v") or 0.0))
    m = top["multiplier"]
    return {**head, "size": top.get("size"), "estimate": m.get("estimate"),
            "lower": m.get("lower"), "upper": m.get("upper"), "refused": ""}  # fmt: skip


def ladder_rows(
    proposal: str,
    spec: str,
    variant: str,
    stage: str,
    verdict: str,
    lad: dict[str, Any],
) -> list[TrackRow]:
    """A multiplier proposal's rows: its projections checked at the targets, against the
    ``min_multiplier`` it was decided with (realized multipliers are in FLOPs, so only for a gate
    decided in FLOPs: a verdict in tokens or parameters is not judged by a FLOPs multiplier)."""
    if lad.get("unit") != "flops":
        return []
    rungs = [r for r in _ladder_fit(lad, "flops").get("rungs") or [] if r.get("multiplier")]
    top = max(rungs, key=lambda r: float(r.get("flops_v") or 0.0)) if rungs else None
    stage_m = top["multiplier"].get("estimate") if top else None
    return multiplier_rows(
        proposal, spec, variant, stage, verdict, stage_m, float(lad.get("min_multiplier") or 1.0),
        list(lad.get("track") or []),
    )  # fmt: skip


def _x(m: Any) -> str:
    return "n/a" if m is None else f"{float(m):.3g}"


def multiplier_text(m: dict[str, Any] | None, verdict: str) -> str:
    """The board's cell for :func:`ladder_projection`: ``1.08x compute [0.98, 1.17] at 7B``, or
    ``compute: refused (inconclusive)``; ``-`` for a gate of another rule."""
    if not m:
        return "-"
    word = str(m.get("unit_word") or m.get("unit"))
    if m.get("refused"):
        return f"{word}: refused ({verdict})"
    bounds = f"[{_x(m.get('lower'))}, {_x(m.get('upper'))}]"
    return f"{_x(m.get('estimate'))}x {word} {bounds} at {m.get('size')}"
