"""Gate evidence of a compared pair, and the consistency of the improvement across sizes.

What the gate sees (the sign-adjusted improvement over the last eval intervals) is defined here,
in one place, apart from what the report shows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from olmoablate.plan import metrics as names
from olmoablate.plan.gate import Gate
from olmoablate.report.collect import ATTEMPT, CPU, WALL, Results, RunData
from olmoablate.report.compare import Aligned, PairResult, improvement_sign, match_points
from olmoablate.report.noise import (
    Estimate,
    NoiseSource,
    aa_source,
    estimate,
    floor_source,
    run_level_values,
)
from olmoablate.report.overhead import ArmTiming, arm_timing
from olmoablate.report.verdict import PairEvidence


def gate_series(
    run_b: RunData, run_v: RunData, metric: str, matched: Aligned | None = None
) -> Aligned:
    """The gate metric of two runs at identical token counts, one point per evaluation: a per-step
    metric is averaged over windows of ``evaluation.interval`` steps ending at the last common step,
    so "the last n points" are the last n eval intervals. ``matched``: already aligned."""
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
    ref_x: list[float] = []
    ref_tail: list[float] = []
    if g.rule == "quality_per_param":
        ref_imp = []
        if reference is not None:
            # improvement of the looped variant over the parameter-matched reference arm
            ref_series = gate_series(reference.variant, res.variant, metric)
            ref_imp = last_improvements(ref_series, direction, last_n)
            ref_x = [float(x) for x in ref_series.x[-tail:]]
            ref_tail = last_improvements(ref_series, direction, tail)
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
    seq = g.sequential is not None  # a design's looks read the whole series
    return PairEvidence(
        res.pair_id, res.seed, not invalid, invalid, complete, why, imp, ref_imp,
        res.stability["variant"].health, res.stability["baseline"].health, res.overhead,
        series_x=[float(x) for x in series.x[-tail:]],
        series=last_improvements(series, direction, tail),
        curve_x=[float(x) for x in series.x] if seq else [],
        curve=last_improvements(series, direction, len(series)) if seq else [],
        tokens=float(res.variant.entry.tokens),
        gpu_hours=float(res.variant.entry.gpu_hours),
        reference_series_x=ref_x,
        reference_series=ref_tail,
    )  # fmt: skip


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
    """Improvement per (variant, size) over valid pairs; consistent = one sign and the interval
    excluding zero at every size run. Unknown (None, not "inconsistent") where a one-seed size has
    no noise source (``noise_at``)."""
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


# From the results folder to the gate's numbers (so the gate stays a pure function of numbers):
# the noise source, the cheapest way out of a one-seed gate, and each pair's step times.


def stage_baselines(results: Results, stage: str) -> list[RunData]:
    """Every baseline run at the stage size: the pairs' baselines and the A/A ones."""
    return [rd for rd in results.runs.values() if rd.entry.size == stage and rd.entry.is_baseline]


def noise_source(results: Results, cfg: Gate) -> tuple[NoiseSource | None, list[str]]:
    """The declared one-seed noise source (floor, or A/A baselines measured now) and notes."""
    notes: list[str] = []
    if cfg.noise.floor is not None:
        return floor_source(cfg.noise.floor), notes
    measure = cfg.noise.measure
    if measure is None:
        return None, notes
    stage, metric = cfg.stage, cfg.metric
    runs = [rd for rd in stage_baselines(results, stage) if len(rd.curve(metric))]
    want = measure.aa_seeds + 1
    have = len(stage_baselines(results, stage))
    if runs:  # matched tokens: only baselines that reached the furthest eval point
        last = max(float(rd.curve(metric).x[-1]) for rd in runs)
        behind = [rd.run_id for rd in runs if float(rd.curve(metric).x[-1]) < last]
        if behind:
            notes.append(
                f"A/A noise: {', '.join(behind)} not yet at {last:.4g} tokens; left out so the "
                "baselines are compared at matched tokens"
            )
        runs = [rd for rd in runs if rd.run_id not in behind]
    if len(runs) < 2:
        notes.append(
            f"A/A noise: only {len(runs)} of {max(want, have)} stage baselines have {metric!r} "
            "points yet; the run-to-run sd needs at least 2"
        )
        return None, notes
    window = 0 if names.is_eval(metric) else runs[0].entry.evaluation.interval
    curves = [(rd.curve(metric).x, rd.curve(metric).y) for rd in runs]
    values = run_level_values(curves, cfg.last_n, window)
    src = aa_source(values, [rd.run_id for rd in runs])
    if src is not None and len(runs) < have:
        notes.append(f"A/A noise: {len(runs)} of {have} stage baselines have the metric so far")
    return src, notes


def _gpu_hours(results: Results, stage: str, arm: str) -> float | None:
    hours = [r.gpu_hours for r in results.plan.runs if r.size == stage and r.arm == arm]
    return hours[0] if hours else None


def way_out(results: Results, cfg: Gate, variants: list[str]) -> str:
    """The cheapest ways to make a one-seed gate resolvable, priced from the plan."""
    stage = cfg.stage
    base = _gpu_hours(results, stage, "baseline")
    var = sum(h for h in (_gpu_hours(results, stage, v) for v in variants) if h is not None)
    aa = f"+1 run, {base:.4g} GPU-h" if base else "+1 run"
    n_pair = 1 + len(variants)
    pair = f"+{n_pair} runs, {base + var:.4g} GPU-h" if base else f"+{n_pair} runs"
    return (
        f"cheapest ways out: an A/A pair (gate.noise.measure: {{aa_seeds: 1}}, one more baseline "
        f"at {stage} with another seed, {aa}; 1 dof, so wide: more A/A seeds tighten it), or one "
        f"more seed pair (add a seed: {pair}), or gate.noise.floor if the paired-delta sd of "
        "this recipe was measured earlier (free); each needs a deliberate re-plan"
    )


def _timing(rd: RunData, use_cpu: bool) -> ArmTiming | None:
    if rd.metrics is None:
        return None
    cols = {k: rd.column(k) for k in (WALL, CPU, ATTEMPT)}
    return arm_timing(rd.run_id, rd.metrics.steps, cols, rd.entry, use_cpu, (rd.summary, rd.status))


def pair_timing(res: PairResult) -> tuple[ArmTiming, ArmTiming] | None:
    """Both arms' steady-state step times; CPU time on CPU runs when both arms recorded it."""
    both_cpu = all(r.column(CPU) is not None for r in (res.baseline, res.variant))
    use_cpu = not res.baseline.entry.topology.on_gpu and both_cpu
    b = res.baseline.once(f"timing:{use_cpu}", lambda: _timing(res.baseline, use_cpu))
    v = res.variant.once(f"timing:{use_cpu}", lambda: _timing(res.variant, use_cpu))
    if b is None or v is None or not (b.times.size and v.times.size):
        return None
    if not math.isfinite(float(b.times.mean())):
        return None
    return b, v
