"""What the gate needs from a results folder beyond the pairs: its noise source, the cheapest way
out of an unresolvable one-seed gate, and each pair's steady-state step times.

Why separate from `olmoablate.report.gate.verdict`: the gate stays a pure function of numbers; this
module reads runs (A/A baselines, ledger, summaries) and turns them into those numbers.
"""

from __future__ import annotations

import math

from olmoablate.contract import metrics as names
from olmoablate.contract.schema import Gate
from olmoablate.report.compare.pair import PairResult
from olmoablate.report.gate.noise import NoiseSource, aa_source, floor_source, run_level_values
from olmoablate.report.gate.overhead import ATTEMPT, CPU, WALL, ArmTiming, arm_timing
from olmoablate.report.read.collect import Results, RunData


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
    window = 0
    if not names.is_eval(metric):
        window = runs[0].entry.evaluation.interval
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


def _timing(results: Results, rd: RunData, use_cpu: bool) -> ArmTiming | None:
    """One arm's steady-state times, computed once per run: a baseline serves every variant
    of its (size, seed)."""
    memo_key = f"timing:{use_cpu}"
    if memo_key not in rd.memo:
        rd.memo[memo_key] = _compute_timing(results, rd, use_cpu)
    return rd.memo[memo_key]


def _compute_timing(results: Results, rd: RunData, use_cpu: bool) -> ArmTiming | None:
    if rd.metrics is None:
        return None
    cols = {k: rd.column(k) for k in (WALL, CPU, ATTEMPT)}
    return arm_timing(
        rd.run_id,
        rd.metrics.steps,
        cols,
        rd.entry,
        use_cpu,
        (rd.summary, rd.status),
    )


def pair_timing(results: Results, res: PairResult) -> tuple[ArmTiming, ArmTiming] | None:
    """Both arms' steady-state step times; CPU time on CPU runs when both arms recorded it."""
    both_cpu = all(r.column(CPU) is not None for r in (res.baseline, res.variant))
    use_cpu = not res.baseline.entry.topology.on_gpu and both_cpu
    b = _timing(results, res.baseline, use_cpu)
    v = _timing(results, res.variant, use_cpu)
    if b is None or v is None or not (b.times.size and v.times.size):
        return None
    if not math.isfinite(float(b.times.mean())):
        return None
    return b, v
