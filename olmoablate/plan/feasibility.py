"""Will the plan run as asked? Per-device memory, wall time, eval points, gate metrics and paths
checked against what the spec says it has (`validate`, `plan`; warnings, errors under ``--strict``),
each finding with its fix. The estimates are `olmoablate.plan.accounting`'s: memory is a labelled
estimate, time is training compute at the spec's peak and MFU, evaluation excluded.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from olmoablate.plan import accounting as acc
from olmoablate.plan import checks as downstream
from olmoablate.plan import checks as spec_paths
from olmoablate.plan.gate import MIN_FLOOR_PAIRS, Gate, SequentialDesign
from olmoablate.plan.load import LoadedSpec, Problem
from olmoablate.plan.metrics import downstream_suffixes, is_eval, split_downstream
from olmoablate.plan.planfile import GateRegistration, Plan, RunEntry
from olmoablate.plan.schema import computes_in_bf16
from olmoablate.plan.sizes import gpu_memory_gb
from olmoablate.stats import (
    BROWNIAN,
    FUTILITY_POWER_COST,
    INTERIM_MODELS,
    POWER_PROMISED,
    FutilityDraws,
    PowerDesign,
    calibrated_futility,
    design_for,
    design_mde,
    futility_draws,
    futility_outcome,
    t_stage_levels,
)


@dataclass
class Findings:
    """Warnings (each with its fix) and notes (what was not checked here, and why)."""

    warnings: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: What cannot run as planned whatever the flags (`validate` and `plan` refuse the spec):
    #: a memory estimate above the device's memory that no change of topology brings under it.
    errors: list[Problem] = field(default_factory=list)


def check(ls: LoadedSpec, plan: Plan, *, check_paths: bool = True) -> Findings:
    out = Findings()
    firsts: dict[tuple[str, str], RunEntry] = {}
    for r in plan.runs:  # seeds share every setting checked here: one run per (size, arm)
        firsts.setdefault((r.size, r.arm), r)
    for run in firsts.values():
        _memory(ls, run, out)
    # one line per field: the other arms of a size that does not fit say the same
    seen: set[tuple[int, str]] = set()
    out.errors = [e for e in out.errors if not ((e.line, e.field) in seen or seen.add((e.line, e.field)))]
    for size in ls.spec.sizes:
        runs = [r for (s, _), r in firsts.items() if s == size]
        if runs:
            _time(ls, max(runs, key=lambda r: r.total_train_flops), out)
    _eval_points(ls, plan, out)
    _gate_metrics(ls, out)
    if check_paths:
        _paths(ls, out)
    else:
        out.notes.append("paths not checked (--skip-paths)")
    return out


def _warn(out: Findings, ls: LoadedSpec, path: tuple[str | int, ...], size: str | None, msg: str) -> None:
    out.warnings.append(ls.problem(path, f"warning: {msg}", size))


def host_memory_gb() -> float | None:
    """This machine's physical memory in GB (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        return None


def _cpu_memory(ls: LoadedSpec, run: RunEntry, out: Findings) -> None:
    """A CPU run's ranks share one node's memory: ``slurm.mem_gb`` when the spec gives it, else
    this machine's (where a local `submit` trains). An estimate above it is refused: the job
    would die allocating (``can't allocate memory``) after the plan was written and queued."""
    topo = run.topology
    need = run.peak_memory_gb * topo.ranks_per_node
    if run.slurm.mem_gb is not None:
        have, source = float(run.slurm.mem_gb), "slurm.mem_gb"
    else:
        got = host_memory_gb()
        if got is None:
            out.notes.append(f"size {run.size}: CPU memory not checked: this machine's is unknown")
            return
        have, source = got, "this machine's memory; set slurm.mem_gb for other nodes"
    if need <= have:
        return
    ranks = f" x {topo.ranks_per_node} processes" if topo.ranks_per_node > 1 else ""
    out.errors.append(ls.problem(
        ("topology", "gpus_per_node"),
        f"size {run.size}, arm {run.arm}: estimated {run.peak_memory_gb:.3g} GB per process"
        f"{ranks} (plan.json peak_memory_gb) > {have:.3g} GB per node ({source}); allowed: an "
        "estimate that fits (a smaller size, training.microbatch_size, "
        "topology.activation_checkpointing: full, or GPUs)",
        run.size,
    ))  # fmt: skip


def _memory(ls: LoadedSpec, run: RunEntry, out: Findings) -> None:
    topo = run.topology
    if not topo.on_gpu:
        _cpu_memory(ls, run, out)
        return
    settings = ls.per_size[run.size]
    gb, source = gpu_memory_gb(
        settings.topology.gpu_memory_gb, run.slurm.constraint, topo.gpu_type
    )
    if gb is None:
        note = f"size {run.size}: per-device memory not checked: {source}"
        if note not in out.notes:
            out.notes.append(note)
        return
    if run.peak_memory_gb <= gb:
        return
    dims = ls.dims[run.size]
    t = run.training
    kw: dict[str, Any] = dict(
        seq_len=t.sequence_length,
        microbatch_tokens=t.microbatch_size,
        world_size=topo.world_size,
        sharded=topo.data_parallel != "ddp",
        bf16=computes_in_bf16(t.precision, topo),
        activation_checkpointing=topo.activation_checkpointing == "full",
    )

    def est(**change: Any) -> float:
        return acc.memory_estimate_gb(dims, run.architecture, **{**kw, **change})[0]

    ws, ac_now, mb_now = topo.world_size, topo.activation_checkpointing == "full", t.microbatch_size
    mbs = [mb_now]  # smaller micro-batches: halvings down to one sequence
    while mbs[-1] > t.sequence_length:
        mbs.append(max(t.sequence_length, mbs[-1] // 2))
    mbs = mbs[1:]

    def more_gpus(ac: bool, mb: int) -> tuple[int, float] | None:
        for mult in (2, 4, 8, 16, 32, 64):  # only the sharded states shrink with more GPUs
            e = est(world_size=ws * mult, sharded=True, activation_checkpointing=ac,
                    microbatch_tokens=mb)  # fmt: skip
            if e <= gb:
                return ws * mult, e
        return None

    g = more_gpus(ac_now, mb_now)
    fixes = [
        f"more GPUs (world size {g[0]}, est. {g[1]:.0f} GB)" if g else
        f"more GPUs (world size {ws * 64}: est. {est(world_size=ws * 64, sharded=True):.0f} GB, "
        "not enough alone)"
    ]  # fmt: skip
    alone = g is not None
    # one change alone: activation checkpointing, the largest micro-batch that fits (or the least)
    singles = []
    if not ac_now:
        e = est(activation_checkpointing=True)
        singles.append(("topology.activation_checkpointing: full (", e))
    if mbs:
        mb = next((m for m in mbs if est(microbatch_tokens=m) <= gb), mbs[-1])
        text = f"a smaller micro-batch (training.microbatch_size: {mb}, "
        singles.append((text, est(microbatch_tokens=mb)))
    for text, e in singles:
        alone |= e <= gb
        fixes.append(f"{text}est. {e:.0f} GB" + (")" if e <= gb else ", not enough alone)"))
    combos = [(ac, mb) for ac in sorted({ac_now, True}) for mb in [mb_now, *mbs]]
    for ac, mb in [] if alone else combos:
        e = est(activation_checkpointing=ac, microbatch_tokens=mb)
        g = (ws, e) if e <= gb else more_gpus(ac, mb)
        if g is not None:
            parts = [f"world size {g[0]}"] if g[0] != ws else []
            parts += ["activation_checkpointing: full"] if ac and not ac_now else []
            parts += [f"microbatch_size: {mb}"] if mb != mb_now else []
            fixes.append(f"together: {' + '.join(parts)} (est. {g[1]:.0f} GB)")
            break
    what = (
        f"size {run.size}, arm {run.arm}: estimated {run.peak_memory_gb:.0f} GB per device "
        f"(plan.json peak_memory_gb) > {gb:g} GB per GPU ({source})"
    )
    if not alone and len(fixes) == 1 + len(singles):  # nothing above fits, nor together
        # not an estimate's error margin: no topology of this spec trains it (refused)
        out.errors.append(ls.problem(("topology", "gpus_per_node"), f"{what}; no fix fits: "
                                     + "; ".join(fixes), run.size))  # fmt: skip
        return
    _warn(
        out, ls, ("topology", "gpus_per_node"), run.size,
        f"{what}; fix: " + ("; or ".join(fixes) if fixes else "a larger GPU (topology.gpu_memory_gb)"),
    )  # fmt: skip


def wall_hours(run: RunEntry) -> float | None:
    """Training wall time at the spec's peak and MFU (None on CPU: no throughput model)."""
    topo = run.topology
    if not topo.on_gpu:
        return None
    return run.total_train_flops / (topo.world_size * topo.gpu_peak_tflops * 1e12 * topo.assumed_mfu) / 3600


def _time(ls: LoadedSpec, run: RunEntry, out: Findings) -> None:
    hours = wall_hours(run)
    if hours is None:
        out.notes.append(f"size {run.size}: wall time not checked (CPU topology: no throughput model)")
        return
    limit = run.slurm.time_min
    attempts = run.slurm.max_num_timeout + 1
    need = hours * 60
    if need <= limit * attempts:
        return
    _warn(
        out, ls, ("slurm", "time"), run.size,
        f"size {run.size}: {run.run_id} needs ~{_dur(need)} of training (at "
        f"{run.topology.gpu_peak_tflops:g} TFLOPS x MFU {run.topology.assumed_mfu:g} on "
        f"{run.topology.world_size} GPUs) but gets {_dur(limit)} x {attempts} attempt(s) "
        f"(slurm.time x (max_num_timeout + 1)); fix: slurm.time >= {math.ceil(need / attempts)} "
        f"minutes, or slurm.max_num_timeout >= {math.ceil(need / limit) - 1} (each requeue "
        "resumes from the last checkpoint)",
    )  # fmt: skip


def _dur(minutes: float) -> str:
    if minutes < 120:
        return f"{minutes:.0f} min"
    return f"{minutes / 60:.1f} h"


def eval_points(steps: int, interval: int) -> int:
    """Eval points of a run: every ``interval`` steps and at the end (OLMo-core's evaluator)."""
    return steps // interval + (1 if steps % interval else 0)


def _interim_short(gate: Any, steps: int, interval: int) -> list[str]:
    """Interim looks the eval schedule cannot serve: fewer than ``last_n`` eval points by the
    fraction, or the last well before it (the report then decides on earlier data)."""
    seq = getattr(gate, "sequential", None)
    short = []
    for frac in getattr(seq, "interim", None) or []:
        have = int(frac * steps) // interval
        if have < gate.last_n or have * interval < 0.9 * frac * steps:
            short.append(f"{frac:.0%}")
    return short


def _interim_fix(gate: Any, steps: int) -> int:
    """The largest evaluation.interval that serves every interim look (1 always does)."""
    return next((i for i in range(steps, 1, -1) if not _interim_short(gate, steps, i)), 1)


def _eval_points(ls: LoadedSpec, plan: Plan, out: Findings) -> None:
    for name, gate, where in ls.spec.all_gates():
        # a multiplier gate reads the metric's last points at every rung, the others at the stage
        lad = ls.ladders.get(name)
        for size in lad.rungs if lad is not None else [gate.stage]:
            _eval_points_at(ls, plan, name, gate, where, size, out)


def _eval_points_at(
    ls: LoadedSpec, plan: Plan, name: str, gate: Any, where: tuple[str | int, ...], size: str,
    out: Findings,
) -> None:  # fmt: skip
    if not is_eval(gate.metric) or size not in ls.per_size:
        return
    runs = [r for r in plan.runs if r.size == size]
    if not runs:
        return
    run = min(runs, key=lambda r: r.steps)
    interval = run.evaluation.interval
    points = eval_points(run.steps, interval)
    label = "the gate" if where == ("gate",) else "gate " + name
    short = _interim_short(gate, run.steps, interval)
    if short:
        _warn(
            out, ls, ("evaluation", "interval"), size,
            f"{label}'s interim looks at {', '.join(short)} of tokens need {gate.last_n} eval "
            f"points of {gate.metric!r} at or just before each, but {run.run_id} evaluates every "
            f"{interval} of {run.steps} steps; fix: evaluation.interval <= {_interim_fix(gate, run.steps)}",
        )  # fmt: skip
    need = gate.last_n
    if points >= need:
        return
    last_n = "gate.last_n" if where == ("gate",) else ".".join(map(str, where)) + ".last_n"
    _warn(
        out, ls, ("evaluation", "interval"), size,
        f"{label} averages the last {need} eval points of {gate.metric!r}, but {run.run_id} "
        f"has {points} ({run.steps} steps, evaluation.interval {interval}); fix: "
        f"evaluation.interval <= {max(1, run.steps // need)} (or {last_n} <= {points})",
    )  # fmt: skip


def _gate_metrics(ls: LoadedSpec, out: Findings) -> None:
    """A downstream gate metric must name a task of the stage size and a suffix it records."""
    for _name, gate, where in ls.spec.all_gates():
        parts = split_downstream(gate.metric)
        settings = ls.per_size.get(gate.stage)
        if settings is None or not gate.metric.startswith("eval/downstream/"):
            continue
        tasks = settings.evaluation.downstream
        if parts is None or parts[0] not in tasks:
            _warn(
                out, ls, (*where, "metric"), None,
                f"{gate.metric!r} is not 'eval/downstream/<task> (<metric>)' for a task of size "
                f"{gate.stage} (tasks: {', '.join(tasks)}); no run would record it",
            )  # fmt: skip
            continue
        task, suffix = parts
        allowed = downstream_suffixes(downstream.metric_type(task))
        if suffix not in allowed:
            _warn(
                out, ls, (*where, "metric"), None,
                f"task {task} records no metric '({suffix})'; fix: one of "
                + ", ".join(f"'eval/downstream/{task} ({a})'" for a in allowed),
            )


def _paths(ls: LoadedSpec, out: Findings) -> None:
    seen: set[tuple[str, str]] = set()
    for size, settings in ls.per_size.items():
        for found in spec_paths.check_settings(settings):
            key = (str(found.where), found.warning or found.note or "")
            if key in seen:
                continue
            seen.add(key)
            if found.warning:
                _warn(out, ls, found.where, size, found.warning)
            elif found.note and found.note not in out.notes:
                out.notes.append(found.note)


# What a planned gate can resolve, said before GPU time is spent: the noise source the report will
# use and the minimum detectable effect of the design actually registered (seed stages, spending,
# alpha split across variants, the t's dof; olmoablate.stats.design_mde): a true effect of
# ``min_effect + MDE`` gives proceed with probability ``POWER`` (exact for one look, simulated for
# seed stages and A/A sources; bench/power_calibration.py checks it through the report's code).

POWER = 0.8


def _hours(plan: Plan, size: str, arm: str, aa: bool = False) -> float:
    runs = (r for r in plan.runs if (r.size, r.arm, r.is_aa) == (size, arm, aa))
    return next((r.gpu_hours for r in runs), 0.0)


def _cost(runs: int, hours: float) -> str:
    """Extra runs and their GPU-hours (CPU runs have none)."""
    return f"+{runs} run(s), {hours:.4g} GPU-h" if hours else f"+{runs} run(s)"


def gated_variants(plan: Plan) -> list[str]:
    """Variants the gate decides on at its stage: the primary, or every non-reference one."""
    g = plan.gate
    if g is None:
        return []
    at = list(dict.fromkeys(p.variant for p in plan.pairs if p.size == g.stage))
    if g.variant:
        return [g.variant] if g.variant in at else []
    return [v for v in at if v != g.reference]


#: Within-seed correlations of the two arms' run noise at which the A/A MDE is shown.
RHOS = (0.0, 0.5, 0.9)


def aa_mde_text(k: int, confidence: float, variants: int = 1) -> str:
    """The A/A gate's MDE in sd_d (the sd of one seed's paired delta), as a function of the
    within-seed correlation rho of the two arms: the gate bounds with sqrt(2) sd_run, while
    sd_d = sqrt(2 (1 - rho)) sd_run, and the pair's baseline is one of the k + 1 baselines whose
    spread is measured (simulated: :func:`olmoablate.stats.design_mde`)."""
    alpha = 1.0 - confidence
    vals = " / ".join(
        f"{design_mde(design_for([1], alpha, variants=variants, aa_seeds=k, rho=r), POWER):.3g}"
        for r in RHOS
    )
    rhos = " / ".join(f"{r:g}" for r in RHOS)
    return f"MDE {vals} x sd_d at within-seed correlation {rhos}"


def _mde_how(d: PowerDesign, variants: int, spending: str | None) -> str:
    """What the MDE was computed for: the looks, the level per variant and the method."""
    alpha = sum(d.levels) if len(d.levels) == 1 else None
    looks = (
        f"seed stages {list(d.stages)}, {spending} spending"
        if len(d.stages) > 1
        else f"one look at one-sided level {alpha:.3g}"
    )
    split = f" = alpha / {variants} variants" if variants > 1 else ""
    return f"{looks}{split}; {d.how()}"


def design_lines(
    design: SequentialDesign,
    n: int,
    bar: float,
    alpha: float,
    m: int,
    floor_dof: float = math.inf,
    variant_h: float = 0.0,
    simulate: bool = False,
) -> list[str]:
    """The pre-registered looks and their boundaries, before any GPU time is spent; with
    ``simulate`` (`plan`), what the futility looks cost under both interim models.
    ``floor_dof``: the one-seed noise source's dof; ``variant_h``: the GPU-hours of every
    variant arm the fixed design would train."""
    stages = list(design.seed_stages) or [n]
    a = alpha / max(1, m)
    levels = t_stage_levels(stages, a, design.spending)
    one = stages[0] == 1
    futile = bool(design.interim) or len(stages) > 1
    fq = design.futility_confidence
    if simulate and futile and stages[0] >= 1:
        fq = calibrated_futility(
            tuple(stages), tuple(design.interim), a, design.spending,
            floor_dof if one else math.inf, design.futility_confidence,
        )  # fmt: skip
    bound = f"the {fq:.1%} upper bound" if simulate else f"the upper bound (>= {fq:.0%})"
    looks = [
        f"interim at {f:.0%} of tokens ({stages[0]} seed(s)): stop for futility if "
        f"{bound} < {bar:g}"
        + (f" (noise: the floor's sd / sqrt({f:g}))" if one else "")
        + ", never proceed"
        for f in design.interim
    ]
    looks += [
        f"full budget, {k} seed(s): proceed if the one-sided p <= {lv:.3g} "
        + (f"(t, {k - 1} dof)" if k >= 2 else "(with the one-seed noise source)")
        for k, lv in zip(stages, levels, strict=True)
    ]
    head = (
        f"sequential design ({design.spending} spending of alpha {a:.3g}"
        + (f" = {alpha:.3g} / {m} variants" if m > 1 else "")
        + "; futility is non-binding: `olmoablate watch SPEC` cancels, resuming is allowed): "
    )
    out = [head + "; ".join(f"look {i} of {len(looks)}: {t}" for i, t in enumerate(looks, 1))]
    if simulate and futile and stages[0] >= 1:
        out.append(futility_line(design, stages, a, floor_dof, fq, variant_h))
    return out


#: Draws per cell of `plan`'s futility statement (MC SE about 0.3 points).
PLAN_REPS = 20_000


def futility_line(
    design: SequentialDesign,
    stages: list[int],
    alpha: float,
    floor_dof: float,
    fq: float,
    variant_h: float,
) -> str:
    """What the futility looks cost under both interim models (docs/gate-statistics.md, "Futility
    under two interim models"): power lost at bar + MDE (the effect where the design without
    futility proceeds 80% of the time), and the share of the fixed design's variant-arm tokens
    (and GPU-hours) a variant exactly at the bar (the costliest null) spends. Why both: the
    futility bound is chosen under the Brownian model (an interim delta at fraction f has sd
    1/sqrt(f) of the final one's); the optimistic model (as precise as the final) is what the
    older "at no power cost" claim assumed. Fixed-seed simulations: the same numbers each run."""
    nk, fr, kind = stages[-1], tuple(design.interim), design.spending
    declared = design.futility_confidence
    dof = floor_dof if stages[0] == 1 else math.inf

    def draws(effect: float, model: str, seed: int) -> FutilityDraws:
        rng = np.random.default_rng(seed)
        return futility_draws(stages, fr, alpha, kind, dof, effect, model, PLAN_REPS, rng)

    lo, hi = 0.0, 40.0 / math.sqrt(nk)  # the MDE effect (sd_d above the bar), by bisection
    for _ in range(16):
        mid = 0.5 * (lo + hi)
        p = float(futility_outcome(draws(mid, BROWNIAN, 7), None)[0].mean())
        lo, hi = (mid, hi) if p < POWER_PROMISED else (lo, mid)
    eff = hi
    parts, toks = [], []
    for model in INTERIM_MODELS:
        dr = draws(eff, model, 8)
        base, now = futility_outcome(dr, None)[0], futility_outcome(dr, fq, declared)[0]
        parts.append(f"{model} {100 * float((base & ~now).mean()):.1f}")
        tok = float(futility_outcome(draws(0.0, model, 9), fq, declared)[1].mean())
        toks.append(f"{model} {tok:.0%}" + (f" ({tok * variant_h:.4g} GPU-h)" if variant_h else ""))
    raised = (
        ""
        if fq == design.futility_confidence
        else f", raised from the declared {design.futility_confidence:.0%}"
    )
    return (
        f"futility looks (upper bound at {fq:.1%}{raised}; chosen so they cost <= "
        f"{FUTILITY_POWER_COST:.0%} of power wherever the design has >= {POWER_PROMISED:.0%}, "
        f"under the Brownian interim model): power lost at bar + MDE ({eff:.3g} sd_d above the "
        f"bar, {POWER_PROMISED:.0%} without futility), in points: {', '.join(parts)}; a variant "
        f"exactly at the bar spends {', '.join(toks)} of the fixed design's variant-arm tokens"
        + (f" ({variant_h:.4g} GPU-h)" if variant_h else "")
        + " (interim models: precise = as precise as the final delta, optimistic; brownian = "
        "sd 1/sqrt(f) at fraction f, conservative)"
    )


def gate_lines(
    plan: Plan, *, simulate: bool = False, info: bool = True
) -> tuple[list[str], list[str]]:
    """(information lines, warnings) about the planned gate's statistics and their costs.
    ``simulate``: a multiplier gate's expected interval width too (`plan` prints it); ``info``:
    False for the warnings alone (`validate` reads only those and stays fast: the design's MDE
    is simulated and imports scipy)."""
    g = plan.gate
    if g is None:
        return [], []
    if g.rule == "multiplier":
        return ladder_lines(plan, simulate=simulate)
    stage, conf = g.stage, g.confidence
    floor, fdof = g.noise.floor_sd, g.noise.floor_dof
    k = g.noise.measure.aa_seeds if g.noise.measure is not None else 0
    variants = gated_variants(plan)
    n = len({p.seed for p in plan.pairs if p.size == stage and p.variant in variants})
    base_h = _hours(plan, stage, "baseline")
    pair_h = base_h + sum(_hours(plan, stage, v) for v in variants)
    lines: list[str] = []
    warnings: list[str] = []
    me = g.min_effect
    alpha = 1.0 - conf
    unit = "sd_d (the sd of one seed's paired delta)"
    # the report's split of alpha: Holm (fixed) or Bonferroni (designs) over the gated variants;
    # a complementary gate decides one factorial claim at its own level
    fam = 1 if g.rule == "complementary" else max(1, len(variants))
    seq = g.sequential
    fut = seq.futility_confidence if seq is not None else 0.5
    if n >= 2 and k:
        warnings.append(
            f"gate.noise.measure (A/A) is ignored: the stage {stage} has {n} seed pairs, whose "
            "spread is the gate's noise; no A/A runs are planned (drop noise.measure)"
        )
    if n >= 2 and info:
        stages = (list(seq.seed_stages) if seq is not None else []) or [n]
        spending = seq.spending if seq is not None else None
        d = design_for(stages, alpha, spending, fam, futility_confidence=fut)
        z = design_mde(d, POWER)
        src = f"noise: paired seeds ({n} seeds at {stage}, Student t with {n - 1} dof)"
        if floor is not None:
            m = z * floor
            src += f"; MDE with the declared floor {floor:g}: {m:.3g} (proceeds at {me + m:.3g})"
        else:
            src += f"; MDE = {z:.3g} x {unit}"
        src += (
            f": a true effect min_effect + MDE proceeds with {POWER:.0%} probability under the "
            f"registered design ({_mde_how(d, fam, spending)})"
        )
        lines.append(src)
    elif n == 1 and floor is not None:
        pairs = fdof + 1
        if math.isfinite(fdof) and pairs < MIN_FLOOR_PAIRS:
            warnings.append(
                f"gate.noise.floor is measured from only {pairs:g} seed pairs (fewer than "
                f"{MIN_FLOOR_PAIRS}): the gate's {1 - conf:.0%} false-proceed rate is an average "
                "over floor measurements; given one floor it can be far higher, and every gate "
                f"using this floor errs together (the report shows the range); re-measure it "
                f"from >= {MIN_FLOOR_PAIRS} seed pairs"
            )
        d = design_for([1], alpha, variants=fam, noise_dof=fdof)
        m = design_mde(d, POWER) * floor if info else math.nan
        how = "known: normal bound" if math.isinf(fdof) else f"t bound with {fdof:g} dof"
        lines.append(
            f"noise: declared floor sd_d = {floor:g} (one seed, {how}); MDE {m:.3g}: a "
            f"true effect of {me + m:.3g} proceeds with {POWER:.0%} probability "
            f"({_mde_how(d, fam, None)}"
            + ("" if math.isinf(fdof) else "; averaged over the error of a floor measured that way")
            + ")"
        )
    elif n == 1 and k:
        if info:
            lines.append(
                f"noise: A/A baselines: {k} extra baseline(s) at {stage} with seeds "
                f"{', '.join(str(r.seed) for r in plan.runs if r.is_aa)} "
                f"({_cost(k, k * base_h)}), run-level sd sd_run with {k} dof (t bound, "
                f"conservative); {aa_mde_text(k, conf, fam)} ({POWER:.0%} power, simulated)"
            )
    elif n == 1:
        warnings.append(
            f"gate at {stage} has one seed pair and no gate.noise source: it cannot resolve "
            "(the report will say inconclusive whatever the runs show); add "
            "gate.noise.floor (measured earlier), gate.noise.measure: {aa_seeds: k}, or a seed"
        )
    if n == 1 and info:
        z = design_mde(design_for([1], alpha, variants=fam, noise_dof=2.0), POWER)
        opts = [f"floor from 3 seed pairs: free if measured earlier (MDE {z:.3g} x sd_d)"]
        for kk in (1, 2, 4):
            opts.append(
                f"aa_seeds {kk}: {_cost(kk, kk * base_h)} ({aa_mde_text(kk, conf, fam)})"
            )
        two = design_mde(design_for([2], alpha, variants=fam), POWER)
        opts.append(
            f"one more seed pair: {_cost(1 + len(variants), pair_h)} (MDE {two:.3g} x sd_d)"
        )
        lines.append("noise choices for one seed: " + "; ".join(opts))
    if g.sequential is not None and info:
        one_dof = fdof if floor is not None else (float(k) if k else math.inf)
        lines.extend(
            design_lines(
                g.sequential, n, g.min_effect, 1.0 - conf, len(variants), one_dof,
                n * sum(_hours(plan, stage, v) for v in variants), simulate,
            )
        )  # fmt: skip
    if g.rule == "complementary":
        lines.append(
            f"factorial: one verdict on {g.combined} from the per-seed interaction and margins "
            f"(paired-seed t with {n - 1} dof; docs/gate-statistics.md, 'Factorial verdicts'); "
            "no Holm across the variants, the claims' own levels apply"
        )
    elif len(variants) > 1:
        lines.append(
            f"several gated variants ({', '.join(variants)}) and no gate.variant: Holm "
            f"family-wise correction at {1 - conf:.3g} (the best one is tested at "
            f"{(1 - conf) / len(variants):.3g}); set gate.variant to let one primary decide"
        )
    elif g.variant:
        others = [v for v in plan.variants if v not in (g.variant, g.reference)]
        if others:
            lines.append(
                f"primary variant {g.variant} decides; {', '.join(others)}: exploratory "
                "(shown uncorrected, never promoted)"
            )
    return lines, warnings


# A multiplier gate before spending (docs/scaling.md): what its ladder costs beside one pair at
# each target, where its noise comes from, and how wide the projected interval is expected to be,
# by simulating the design under the spec's declared assumptions (`gate.planning`) through the
# same estimator the report uses (`olmoablate.scaling`, imported only when simulating).

#: The anchor of the cost line: the OLMo ladder paper (Bhagia et al. 2024) predicted 7B/13B task
#: accuracy from a ladder costing about 1% of the target's compute.
LADDER_ANCHOR = 0.01
#: Simulated ladders behind the expected-width line (seeded: `plan` prints the same numbers).
SIM_DRAWS = 100


def _sci(x: float) -> str:
    return f"{x:.3g}".replace("e+", "e")


def ladder_runs(plan: Plan) -> list[RunEntry]:
    """The runs of the viewed multiplier gate's ladder: both arms at every rung, every seed."""
    g, entry = plan.gate, plan.gate_entry()
    if g is None or entry is None or entry.ladder is None:
        return []
    rungs = set(entry.ladder.rungs)
    return [
        r for r in plan.runs if r.size in rungs and r.arm in ("baseline", g.variant) and not r.is_aa
    ]


def ladder_lines(plan: Plan, *, simulate: bool = False) -> tuple[list[str], list[str]]:
    """The multiplier gate's plan-time lines (see above) and its warnings."""
    g, entry = plan.gate, plan.gate_entry()
    assert g is not None and entry is not None
    lad = entry.ladder
    if lad is None:  # a plan.json written before the ladder record: nothing priced to say
        return ["ladder: not recorded in this plan.json (re-plan to price it)"], []
    runs = ladder_runs(plan)
    reused = plan.identity.reused if plan.identity is not None else {}
    seeds = sorted({r.seed for r in runs})
    n = len(seeds)
    total = sum(r.total_train_flops for r in runs)
    shared = [r for r in runs if r.run_id in reused]
    new = total - sum(r.total_train_flops for r in shared)
    cost = (
        f"ladder: {len(lad.rungs)} rungs ({', '.join(lad.rungs)}) x 2 arms x {n} seed(s) = "
        f"{len(runs)} runs, {_sci(total)} training FLOPs"
    )
    if shared:
        cost += f" ({len(shared)} reused from the store: {_sci(new)} FLOPs new)"
    shares = [
        f"{t.size} {total / (t.flops_b + t.flops_v):.2%} of its pair ({_sci(t.flops_b + t.flops_v)})"
        for t in lad.targets
    ]
    cost += (
        "; as a share of one target pair (both arms at the planned tokens): "
        + ", ".join(shares)
        + f" (the OLMo ladder paper's ladder cost ~{LADDER_ANCHOR:.0%} of its target)"
    )
    lines, warnings = [cost], []
    top = max((r.total_train_flops for r in runs if r.arm == g.variant), default=0)
    inside = [t.size for t in lad.targets if t.flops_v <= top]
    if inside:
        lines.append(
            f"target(s) {', '.join(inside)} within the ladder's compute (at or below the "
            "largest rung's): read off the fit, not projected beyond it"
        )
    floor, fdof = g.noise.floor_sd, g.noise.floor_dof
    if n >= 2:
        dof = len(lad.rungs) * (n - 1)
        lines.append(
            f"noise: paired seeds ({n} per rung, pooled over {len(lad.rungs)} rungs: {dof} dof)"
            + (f"; noise.floor {floor:g} is not used" if floor is not None else "")
        )
    elif floor is not None:
        how = "known exactly" if math.isinf(fdof) else f"{fdof:g} dof"
        lines.append(f"noise: declared floor sd_d = {floor:g} ({how}; one seed per rung)")
    else:
        warnings.append(
            "multiplier gate with one seed per rung and no gate.noise.floor: the noise cannot "
            "be estimated, so the report will refuse the projection (inconclusive whatever the "
            "runs show); add a seed, or gate.noise.floor measured earlier"
        )
    if simulate:
        lines.extend(_expected_width(plan, n))
    return lines, warnings


def _expected_width(plan: Plan, n: int) -> list[str]:
    """The projected interval a ladder like this one gives, by simulation under
    ``gate.planning`` (one line); without it, what to declare."""
    g, entry = plan.gate, plan.gate_entry()
    assert g is not None and entry is not None and entry.ladder is not None
    p = g.planning
    if p is None:
        return [
            "expected interval width: not simulated; declare gate.planning: {sd_delta, sd_mean, "
            "law: {E, A, alpha}} (the paired-delta and pair-mean seed sd at a rung and the "
            "baseline law, e.g. from an earlier ladder) to see it before spending"
        ]
    floor = g.noise.floor_sd
    if n < 2 and floor is None:
        return ["expected interval width: not simulated (one seed per rung and no noise.floor)"]
    import numpy as np

    try:
        from olmoablate import scaling as sc
    except ImportError as err:  # a light install (the CI template's --no-deps) has no scipy
        return [f"expected interval width: not simulated ({err}; it needs scipy: pip install scipy)"]

    by = {(r.size, r.arm): r for r in sorted(ladder_runs(plan), key=lambda r: r.seed, reverse=True)}
    design = []
    for size in entry.ladder.rungs:
        b, v = by.get((size, "baseline")), by.get((size, g.variant))
        if b is None or v is None:
            return [f"expected interval width: not simulated (no pair at rung {size} in this view)"]
        design.append(
            sc.Rung(size, float(b.total_train_flops), float(v.total_train_flops), float(b.tokens),
                    float(v.tokens), float(b.unique_params), float(v.unique_params), {}, {})
        )  # fmt: skip
    targets = [
        sc.Target(t.size, float(t.flops_v), float(t.tokens_v), float(t.params_v))
        for t in entry.ladder.targets
    ]
    m0 = p.multiplier if p.multiplier is not None else g.min_multiplier
    assert m0 is not None and g.min_multiplier is not None  # checked by load
    truth = sc.Truth(
        law=sc.Law(p.law.E, p.law.A, p.law.alpha), m0=m0, gamma=0.0, c_ref=design[-1].flops_v,
        sd_delta=p.sd_delta, sd_mean=p.sd_mean,
    )  # fmt: skip
    declared = sc.DeclaredNoise(floor, g.noise.floor_dof) if floor is not None else None
    rng = np.random.default_rng(0)
    widths: dict[str, list[float]] = {t.size: [] for t in targets}
    resolved = refused = 0
    failed: list[str] = []
    for _ in range(SIM_DRAWS):
        try:
            fit = sc.fit_ladder(
                sc.simulate(truth, design, n, rng), targets, unit=g.unit,
                level=2 * g.confidence - 1, declared=declared,
            )  # fmt: skip
        except (ArithmeticError, ValueError) as err:
            # the estimator is meant to refuse, not raise; `plan` says so instead of a traceback
            failed.append(f"{type(err).__name__}: {err}")
            continue
        refused += bool(fit.refused)
        for proj in fit.projections:
            widths[proj.size].append(proj.multiplier.upper / proj.multiplier.lower)
        resolved += sc.decide(fit, g.min_multiplier)[0] != sc.UNDECIDED
    per = [
        f"{s} {_sci(float(np.median(w)))}x" if w else f"{s} - (never projected)"
        for s, w in widths.items()
    ]
    said = (
        "gate.planning.multiplier" if p.multiplier is not None
        else "min_multiplier, where either decision is an error; set gate.planning.multiplier "
        "to the one you expect"
    )  # fmt: skip
    return [
        f"expected interval width at each target (median upper/lower of {SIM_DRAWS} ladders "
        f"simulated under gate.planning, {n} seed(s)): " + ", ".join(per)
        + f"; with a true multiplier of {m0:g} in FLOPs at every size ({said}), the gate "
        f"resolves (proceed or stop) in {resolved / SIM_DRAWS:.0%} of draws under the planning "
        "assumptions"
        + (f"; projection refused in {refused / SIM_DRAWS:.0%}" if refused else "")
        + (f"; the estimator failed in {len(failed)} draw(s) ({failed[0]})" if failed else "")
    ]


def carry_registrations(old: Any, plan: Plan, after_runs: bool = True) -> Plan:
    """``plan`` with each gate's earlier registrations from the plan.json it replaces (``old``,
    parsed, unvalidated), so a gate changed by ``plan --replan`` stays visible to the report. Kept
    when seeds or gate hash differ, with the block it registered and ``after_runs`` (whether runs
    had started: a look was possible); an old plan without design records has top-level
    ``seeds``."""
    if not isinstance(old, dict) or not isinstance(old.get("gates"), list):
        return plan
    prior = {g.get("name"): g for g in old["gates"] if isinstance(g, dict)}
    entries = []
    for e in plan.gates:
        o = prior.get(e.name)
        hist = list(e.history)
        if isinstance(o, dict):
            hist = [GateRegistration.model_validate(h) for h in o.get("history") or []] + hist
            seeds = o.get("seeds", old.get("seeds"))
            if seeds != e.seeds or o.get("gate_sha256") != e.gate_sha256:
                hist.append(
                    GateRegistration(
                        created=str(old.get("created", "")),
                        seeds=list(seeds) if isinstance(seeds, list) else None,
                        gate_sha256=o.get("gate_sha256"),
                        gate=_recorded_gate(o.get("gate")),
                        after_runs=after_runs,
                    )
                )
        entries.append(e.model_copy(update={"history": hist}))
    return plan.model_copy(update={"gates": entries})


def _recorded_gate(block: Any) -> Gate | None:
    """The replaced plan's gate block as the schema's model (None when it no longer validates:
    the report then treats the registration's gate as unknown)."""
    try:
        return Gate.model_validate(block) if isinstance(block, dict) else None
    except ValueError:
        return None
