"""Will the plan run as asked? Per-device memory, wall time, eval points and paths, checked
against what the spec says it has (`validate` and `plan`; warnings, errors under ``--strict``).

Why: `plan` computes every number a user needs and used to compare none of them with anything —
a 7B arm estimated at 203 GB per device on 80 GB GPUs, a 29-minute run under a 5-minute limit that
is never requeued, a gate averaging the last three eval points of runs that have one, paths that
exist only on another machine, a gate metric no run records. Each finding names the fix; the
estimates are the plan's own (`olmoablate.contract.accounting`: memory is a labelled estimate,
time is training compute at the spec's stated peak and MFU, evaluation excluded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from olmoablate.contract import accounting as acc
from olmoablate.contract.gpus import gpu_memory_gb
from olmoablate.contract.metrics import downstream_suffixes, is_eval, split_downstream
from olmoablate.contract.plan import Plan, RunEntry
from olmoablate.contract.schema import computes_in_bf16
from olmoablate.spec import paths as spec_paths
from olmoablate.spec.load import LoadedSpec, Problem


@dataclass
class Findings:
    """Warnings (each with its fix) and notes (what was not checked here, and why)."""

    warnings: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check(ls: LoadedSpec, plan: Plan, *, check_paths: bool = True) -> Findings:
    out = Findings()
    firsts: dict[tuple[str, str], RunEntry] = {}
    for r in plan.runs:  # seeds share every setting checked here: one run per (size, arm)
        firsts.setdefault((r.size, r.arm), r)
    for run in firsts.values():
        _memory(ls, run, out)
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


def _memory(ls: LoadedSpec, run: RunEntry, out: Findings) -> None:
    topo = run.topology
    if not topo.on_gpu:
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
    mbs = []  # smaller micro-batches: halvings down to one sequence
    mb = mb_now
    while mb > t.sequence_length:
        mb = max(t.sequence_length, mb // 2)
        mbs.append(mb)

    def more_gpus(ac: bool, mb: int) -> tuple[int, float] | None:
        for mult in (2, 4, 8, 16, 32, 64):  # only the sharded states shrink with more GPUs
            e = est(world_size=ws * mult, sharded=True, activation_checkpointing=ac,
                    microbatch_tokens=mb)  # fmt: skip
            if e <= gb:
                return ws * mult, e
        return None

    fixes: list[str] = []
    g = more_gpus(ac_now, mb_now)
    fixes.append(
        f"more GPUs (world size {g[0]}, est. {g[1]:.0f} GB)" if g else
        f"more GPUs (world size {ws * 64}: est. {est(world_size=ws * 64, sharded=True):.0f} GB, "
        "not enough alone)"
    )  # fmt: skip
    alone = g is not None
    if not ac_now:
        e = est(activation_checkpointing=True)
        alone |= e <= gb
        fixes.append(f"topology.activation_checkpointing: full (est. {e:.0f} GB"
                     + (")" if e <= gb else ", not enough alone)"))  # fmt: skip
    for mb in mbs:
        e = est(microbatch_tokens=mb)
        if e <= gb or mb == mbs[-1]:
            alone |= e <= gb
            fixes.append(f"a smaller micro-batch (training.microbatch_size: {mb}, est. {e:.0f} GB"
                         + (")" if e <= gb else ", not enough alone)"))  # fmt: skip
            break
    if not alone:
        for ac in sorted({ac_now, True}):
            for mb in [mb_now, *mbs]:
                e = est(activation_checkpointing=ac, microbatch_tokens=mb)
                g = (ws, e) if e <= gb else more_gpus(ac, mb)
                if g is None:
                    continue
                parts = ([f"world size {g[0]}"] if g[0] != ws else []) + (
                    ["activation_checkpointing: full"] if ac and not ac_now else []
                ) + ([f"microbatch_size: {mb}"] if mb != mb_now else [])
                fixes.append(f"together: {' + '.join(parts)} (est. {g[1]:.0f} GB)")
                break
            else:
                continue
            break
    _warn(
        out, ls, ("topology", "gpus_per_node"), run.size,
        f"size {run.size}, arm {run.arm}: estimated {run.peak_memory_gb:.0f} GB per device "
        f"(plan.json peak_memory_gb) > {gb:g} GB per GPU ({source}); fix: "
        + ("; or ".join(fixes) if fixes else "a larger GPU (topology.gpu_memory_gb)"),
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
    time_for = math.ceil(need / attempts)
    requeues = math.ceil(need / limit) - 1
    _warn(
        out, ls, ("slurm", "time"), run.size,
        f"size {run.size}: {run.run_id} needs ~{_dur(need)} of training (at "
        f"{run.topology.gpu_peak_tflops:g} TFLOPS x MFU {run.topology.assumed_mfu:g} on "
        f"{run.topology.world_size} GPUs) but gets {_dur(limit)} x {attempts} attempt(s) "
        f"(slurm.time x (max_num_timeout + 1)); fix: slurm.time >= {time_for} minutes, or "
        f"slurm.max_num_timeout >= {requeues} (each requeue resumes from the last checkpoint)",
    )  # fmt: skip


def _dur(minutes: float) -> str:
    if minutes < 120:
        return f"{minutes:.0f} min"
    return f"{minutes / 60:.1f} h"


def eval_points(steps: int, interval: int) -> int:
    """Eval points of a run: every ``interval`` steps and at the end (OLMo-core's evaluator)."""
    return steps // interval + (1 if steps % interval else 0)


def _interim_short(gate: Any, steps: int, interval: int) -> list[str]:
    """The sequential design's interim looks (fractions of the budget) that the eval schedule
    cannot serve: fewer than ``last_n`` eval points at or before the fraction, or the last one
    well before it (report/gate/sequential.py then decides on earlier data, losing power)."""
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
        if not is_eval(gate.metric) or gate.stage not in ls.per_size:
            continue
        runs = [r for r in plan.runs if r.size == gate.stage]
        if not runs:
            continue
        run = min(runs, key=lambda r: r.steps)
        interval = run.evaluation.interval
        points = eval_points(run.steps, interval)
        label = "the gate" if where == ("gate",) else "gate " + name
        short = _interim_short(gate, run.steps, interval)
        if short:
            _warn(
                out, ls, ("evaluation", "interval"), gate.stage,
                f"{label}'s interim looks at {', '.join(short)} of tokens need {gate.last_n} eval "
                f"points of {gate.metric!r} at or just before each, but {run.run_id} evaluates every "
                f"{interval} of {run.steps} steps; fix: evaluation.interval <= {_interim_fix(gate, run.steps)}",
            )  # fmt: skip
        need = gate.last_n
        if points >= need:
            continue
        why = f"averages the last {gate.last_n}"
        _warn(
            out, ls, ("evaluation", "interval"), gate.stage,
            f"{label} {why} eval points of {gate.metric!r}, but {run.run_id} has {points} "
            f"({run.steps} steps, evaluation.interval {interval}); fix: evaluation.interval <= "
            f"{max(1, run.steps // need)} (or {'gate.last_n' if where == ('gate',) else '.'.join(map(str, where)) + '.last_n'} <= {points})",
        )  # fmt: skip


def _gate_metrics(ls: LoadedSpec, out: Findings) -> None:
    """A downstream gate metric must name a task of the stage size and a suffix it records."""
    from olmoablate.spec import downstream

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
