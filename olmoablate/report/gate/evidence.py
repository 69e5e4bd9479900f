"""Gate evidence of a compared pair, and the consistency of the improvement across sizes.

Why separate from the comparison: these turn a pair's curves into the numbers the gate
(:mod:`olmoablate.report.gate.verdict`) decides on (the sign-adjusted improvement over the last eval
intervals), so what the gate sees is defined in one place, apart from what the report shows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from olmoablate.contract import metrics as names
from olmoablate.report.compare.align import Aligned, match_points
from olmoablate.report.compare.pair import PairResult, improvement_sign
from olmoablate.report.gate.noise import NoiseSource
from olmoablate.report.gate.verdict import Estimate, PairEvidence, estimate
from olmoablate.report.read.collect import Results, RunData


def gate_series(
    run_b: RunData, run_v: RunData, metric: str, matched: Aligned | None = None
) -> Aligned:
    """The gate metric of two runs at identical token counts, one point per evaluation.

    Eval metrics are logged once per evaluation: their points are used as they are. A per-step
    metric (``train/CE loss``) is averaged over windows of ``evaluation.interval`` steps ending at
    the last common step, so that "the last n points" means the last n eval intervals, not the
    last n (very noisy) single steps. ``matched``: the metric already at matched tokens (a
    pair's :meth:`~olmoablate.report.compare.pair.PairResult.at_matched_tokens`).
    """
    al = matched if matched is not None else match_points(run_b.curve(metric), run_v.curve(metric))
    if names.is_eval(metric) or len(al) < 2:
        return al
    interval = run_b.entry.evaluation.interval
    n_win = len(al) // interval
    if n_win == 0:
        return al
    cut = len(al) - n_win * interval  # windows end at the last common step
    shape = (n_win, interval)
    return Aligned(
        al.x[cut:].reshape(shape)[:, -1],
        al.baseline[cut:].reshape(shape).mean(axis=1),
        al.variant[cut:].reshape(shape).mean(axis=1),
    )


def last_improvements(al: Aligned, direction: str, last_n: int) -> list[float]:
    if not len(al):
        return []
    d = improvement_sign(direction) * al.delta
    return [float(x) for x in d[-last_n:]]


def evidence_for(
    res: PairResult, results: Results, reference: PairResult | None = None
) -> PairEvidence:
    g = results.gate
    metric, direction, last_n = g.metric, g.direction, g.last_n
    series = gate_series(res.baseline, res.variant, metric, res.at_matched_tokens(metric))
    imp = last_improvements(series, direction, last_n)
    tail = max(2 * last_n, 6)  # the jitter diagnostic fits a smooth curve through these
    ref_imp = None
    if g.rule == "quality_per_param":
        ref_imp = []
        if reference is not None:
            # improvement of the looped variant over the parameter-matched reference arm
            ref_imp = last_improvements(
                gate_series(reference.variant, res.variant, metric), direction, last_n
            )
    invalid = list(res.invalid_reasons)
    if reference is not None and not reference.valid:
        invalid.append(f"reference pair {reference.pair_id} is INVALID")
    if g.rule == "quality_per_param" and reference is not None:
        fp_bad, _ = results.fingerprint_check(reference.variant, res.variant)
        invalid.extend(f"vs reference: {p}" for p in fp_bad)
    complete, why = res.complete, res.incomplete_reason
    if reference is not None and not reference.complete:
        complete, why = (
            False,
            "; ".join(x for x in (why, f"reference: {reference.incomplete_reason}") if x),
        )
    return PairEvidence(
        pair_id=res.pair_id,
        seed=res.seed,
        valid=not invalid,
        invalid_reasons=invalid,
        complete=complete,
        incomplete_reason=why,
        improvement=imp,
        reference_improvement=ref_imp,
        variant=res.stability["variant"].health,
        baseline=res.stability["baseline"].health,
        overhead=res.overhead,
        series_x=[float(x) for x in series.x[-tail:]],
        series=last_improvements(series, direction, tail),
        curve_x=[float(x) for x in series.x] if g.sequential is not None else [],
        curve=last_improvements(series, direction, len(series)) if g.sequential else [],
        tokens=float(res.variant.entry.tokens),
        gpu_hours=float(res.variant.entry.gpu_hours),
    )


@dataclass
class SizeRow:
    variant: str
    size: str
    estimate: Estimate | None
    outside_noise: bool
    sign: int


def consistency(
    pair_results: Sequence[PairResult],
    results: Results,
    size_order: Sequence[str],
    noise_at: Mapping[str, NoiseSource] | None = None,
) -> tuple[list[SizeRow], dict[str, bool | None]]:
    """Gate-metric improvement per (variant, size) over valid pairs; consistent = same sign and
    the confidence interval excluding zero at every size that has run. A one-seed size has a
    bound only where ``noise_at`` declares its noise (the gate's source, at the stage size);
    elsewhere consistency is unknown (None), not "inconsistent"."""
    g = results.gate
    by: dict[tuple[str, str], list[list[float]]] = {}
    for r in pair_results:
        if not r.valid:
            continue
        imp = last_improvements(
            gate_series(r.baseline, r.variant, g.metric, r.at_matched_tokens(g.metric)),
            g.direction,
            g.last_n,
        )
        if imp:
            by.setdefault((r.variant_name, r.size), []).append(imp)
    order = {s: i for i, s in enumerate(size_order)}
    rows: list[SizeRow] = []
    for (variant, size), points in sorted(
        by.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99))
    ):
        est = estimate(points, g.confidence, (noise_at or {}).get(size))
        outside = bool(est and (est.lower > 0 or est.upper < 0))
        sign = 0 if est is None or est.mean == 0 else (1 if est.mean > 0 else -1)
        rows.append(SizeRow(variant, size, est, outside, sign))
    verdict: dict[str, bool | None] = {}
    for variant in sorted({r.variant for r in rows}):
        mine = [r for r in rows if r.variant == variant]
        unknown = any(r.estimate is None or not math.isfinite(r.estimate.se) for r in mine)
        if len(mine) < 2 or unknown:
            verdict[variant] = None
        else:
            verdict[variant] = (
                all(r.outside_noise for r in mine) and len({r.sign for r in mine}) == 1
            )
    return rows, verdict
