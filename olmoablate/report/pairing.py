"""Whether two plan entries still form a valid pair, ran the same execution, and what they cost.

The report recomputes the pairing certificate (:mod:`olmoablate.plan.identity`, the hash ``plan``
wrote) because plan.json can be edited after planning; a pair differing beyond the declared
architecture measures the wrong thing, so it is INVALID and out of the gate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from olmoablate.plan import metrics as names
from olmoablate.plan.identity import differences, shared_settings
from olmoablate.plan.names import RunState
from olmoablate.plan.planfile import RunEntry
from olmoablate.report.collect import WALL, Results, RunData
from olmoablate.run.files import ProofRecord, RunSummary


def certificate_problems(baseline: RunEntry, variant: RunEntry, budget_match: str) -> list[str]:
    """Why the two entries do not form a valid pair under the budget rule (empty = valid), and
    whether each still matches the certificate recorded for it (plan.json edited after planning)."""
    problems: list[str] = []
    if baseline.certificate_now(budget_match) != variant.certificate_now(budget_match):
        diff = differences(
            shared_settings(baseline.as_json(), budget_match),
            shared_settings(variant.as_json(), budget_match),
        )
        diff = _allow_reference_depth(diff, baseline, variant)
        if diff:
            problems.append(f"settings differ beyond the architecture: {', '.join(diff[:8])}")
    for who, entry in (("baseline", baseline), ("variant", variant)):
        if entry.certificate and entry.certificate != entry.certificate_now():
            problems.append(
                f"{who} {entry.run_id}: plan entry no longer matches its recorded "
                "certificate (plan.json edited after planning?)"
            )
    return problems


def proof_problems(entry: RunEntry, record: ProofRecord | None) -> tuple[list[str], list[str]]:
    """(problems, notes) from proof.json: a run that trained other block code or another parameter
    count than planned is not the planned arm; a run without a record (a job from before proofs) is
    compared, with a note that its costs are unverified."""
    if record is None:
        return [], [f"{entry.run_id}: costs not verified at job start (no proof.json)"]
    problems = []
    planned = {k: v.sha256 for k, v in (entry.code or {}).items()}
    if entry.code is not None and record.code != planned:
        problems.append(f"{entry.run_id}: trained block code other than the plan recorded")
    if record.unique_params != entry.unique_params:
        problems.append(
            f"{entry.run_id}: built {record.unique_params:,} unique parameters, the plan says "
            f"{entry.unique_params:,}"
        )
    return problems, []


def _allow_reference_depth(diff: list[str], baseline: RunEntry, variant: RunEntry) -> list[str]:
    """A `layers:` reference arm is declared to change the depth; that difference is allowed."""
    if variant.architecture.layers is not None or baseline.architecture.layers is not None:
        return [d for d in diff if d != "size_dims.n_layers"]
    return diff


def token_shortfall(arm: str, run: Any) -> str | None:
    """Why a *completed* arm (``run``: RunData) cannot be matched at its planned tokens: its metrics
    end early (truncated or partly copied), so the gate would compare different points of the
    schedules. None when it can, or while the run trains (incomplete, not inconsistent)."""
    planned = int(run.entry.tokens)
    logged = float(run.max_tokens)
    if run.state != RunState.COMPLETED or logged >= planned:
        return None
    return (
        f"{arm} {run.run_id} is completed but its metrics end at {logged:,.0f} of "
        f"{planned:,} planned tokens (metrics.jsonl truncated?); out of the gate unless "
        "gate.allow_partial_pairs"
    )


# Execution parity: the certificate fixes what the plan asked for, summary.json's ``execution``
# block what ran (``attention_backend: auto`` resolves per node). A kernel, dtype, compile or
# world-size difference would be charged to the variant's cost: it keeps the cost out of the gate.

#: The fields of ``summary.json``'s ``execution`` block that must be equal in both arms of a
#: pair for their measured cost (step time, tokens/s, memory, decode) to be compared.
PARITY_KEYS = (
    "device", "world_size", "data_parallel", "param_dtype", "autocast_dtype", "compute_dtype",
    "attention_backend", "compile", "gpu_model",
)  # fmt: skip


def execution_of(summary: RunSummary | None) -> Mapping[str, Any] | None:
    """The ``execution`` block of a run's summary.json (None when the run has none yet), as
    recorded: a field the job did not write stays absent (``not recorded``)."""
    block = summary.execution if summary is not None else None
    return block.as_json() if block is not None else None


def execution_mismatch(
    baseline: Mapping[str, Any] | None, variant: Mapping[str, Any] | None
) -> list[str]:
    """What differs between the arms' execution records (empty: comparable). Neither recorded yet:
    nothing to compare; one only: a difference; a field one record lacks: ``not recorded``."""
    if baseline is None and variant is None:
        return []
    if baseline is None or variant is None:
        who = "baseline" if baseline is None else "variant"
        return [f"the {who} recorded no execution block (summary.json), the other arm did"]
    out = []
    for key in PARITY_KEYS:
        b, v = baseline.get(key, _MISSING), variant.get(key, _MISSING)
        if b != v:
            out.append(f"{key}: baseline {_show(b)}, variant {_show(v)}")
    return out


_MISSING = object()


def _show(value: Any) -> str:
    if value is _MISSING:
        return "not recorded"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={value[k]}" for k in sorted(value)) + "}"
    return str(value)


def parity_note(problems: list[str]) -> str:
    """The report's one line for a pair whose arms ran different executions."""
    return (
        "arms ran different executions (" + "; ".join(problems) + "): measured cost not "
        "comparable, kept out of the gate"
    )


def _measured(run: RunData) -> dict[str, float | None]:
    """Measured cost of one arm: summary.json first, metrics as the fallback."""
    s = run.summary or RunSummary()

    def or_metrics(value: float | None, key: str, fn: Any) -> float | None:
        c = run.column(key)
        if value is not None or c is None or not np.isfinite(c).any():
            return value
        return float(fn(c[np.isfinite(c)]))

    def median_past_first(a: np.ndarray) -> Any:
        return np.median(a[1:] if a.size > 1 else a)

    opt = s.optimizer_state_bytes
    gpus, nodes = run.entry.topology.gpus_per_node, run.entry.topology.nodes
    wall = s.wall_time_s
    return {
        names.STEP_TIME: num(or_metrics(s.mean_step_time_s, WALL, median_past_first)),
        "peak_memory_gb": num(or_metrics(s.peak_memory_gb, names.PEAK_MEMORY_GB, np.max)),
        "tokens_per_s": num(or_metrics(s.tokens_per_s, names.DEVICE_TPS, np.median)),
        "optimizer_state_gb": num(opt / 1e9) if isinstance(opt, int | float) else None,
        "gpu_hours": num(wall * gpus * nodes / 3600.0) if wall and gpus else None,
        "decode_latency_s": num(s.decode_latency_s),
        "kv_cache_bytes": num(s.kv_cache_bytes),
        "params": num(s.params),
        "unique_params": num(s.unique_params),
    }


def num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _ratio(b: float | None, v: float | None) -> float | None:
    if b is None or v is None or b == 0:
        return None
    return v / b


def cost_rows(base: RunData, var: RunData) -> tuple[list[dict[str, Any]], dict[str, float | None]]:
    """Planned costs (plan.json: exact FLOPs and parameters) beside measured ones (what the
    overhead limits are about), each row naming its source; and the measured overheads."""
    mb, mv = _measured(base), _measured(var)
    rows: list[dict[str, Any]] = []

    def add(name: str, b: float | None, v: float | None, source: str) -> None:
        rows.append(
            {"cost": name, "baseline": b, "variant": v, "ratio": _ratio(b, v), "source": source}
        )

    be, ve = base.entry, var.entry
    for label, b, v in (
        ("params", be.params, ve.params),
        ("unique params", be.unique_params, ve.unique_params),
        ("train FLOPs/token", be.train_flops_per_token, ve.train_flops_per_token),
        ("total train FLOPs", be.total_train_flops, ve.total_train_flops),
    ):
        add(label, num(b), num(v), "plan")
    add("tokens/s", mb["tokens_per_s"], mv["tokens_per_s"], "measured")
    add("step time (s)", mb[names.STEP_TIME], mv[names.STEP_TIME], "measured")
    add("peak memory (GB)", mb["peak_memory_gb"], mv["peak_memory_gb"], "measured")
    add("optimizer state (GB)", mb["optimizer_state_gb"], mv["optimizer_state_gb"], "measured")
    opt_plan = num(be.optimizer_state_gb), num(ve.optimizer_state_gb)
    add("optimizer state (GB, plan)", *opt_plan, "plan")
    add("GPU-hours", mb["gpu_hours"], mv["gpu_hours"], "measured")
    add("GPU-hours (plan)", num(be.gpu_hours), num(ve.gpu_hours), "plan")
    if mb["decode_latency_s"] is not None or mv["decode_latency_s"] is not None:
        add("decode latency (s)", mb["decode_latency_s"], mv["decode_latency_s"], "measured")
    if mb["kv_cache_bytes"] is not None or mv["kv_cache_bytes"] is not None:
        add("KV-cache bytes", mb["kv_cache_bytes"], mv["kv_cache_bytes"], "measured")

    def over(key: str) -> float | None:
        r = _ratio(mb[key], mv[key])
        return None if r is None else r - 1.0

    overhead = {
        "step_time": over(names.STEP_TIME),
        "peak_memory": over("peak_memory_gb"),
        "decode_latency": over("decode_latency_s"),
    }
    return rows, overhead


@dataclass
class ArmCoverage:
    """One (size, arm, set): final CE per seed and the token counts its eval points scored."""

    size: str
    arm: str
    eval_set: str
    final_ce: list[float] = field(default_factory=list)
    tokens_per_point: set[int] = field(default_factory=set)
    points: int = 0
    missing_tokens: bool = False  # a run without the tokens metric (older olmoablate)


def coverage(results: Results) -> list[ArmCoverage]:
    """Per (size, arm, set), from every run with metrics, in plan order."""
    out: dict[tuple[str, str, str], ArmCoverage] = {}
    for rd in results.runs.values():
        if rd.metrics is None:
            continue
        size, arm = rd.entry.size, rd.entry.arm
        for name in rd.entry.evaluation.lm_sets:
            cov = out.setdefault((size, arm, name), ArmCoverage(size, arm, name))
            ce = rd.column(names.lm_eval(name, "CE loss"))
            if ce is None:
                continue
            ok = np.isfinite(ce)
            if not ok.any():
                continue
            cov.final_ce.append(float(ce[ok][-1]))
            cov.points += int(ok.sum())
            tok = rd.column(names.lm_eval(name, "tokens"))
            if tok is None or not np.isfinite(tok[ok]).all():
                cov.missing_tokens = True
            else:
                cov.tokens_per_point |= {int(t) for t in tok[ok]}
    return list(out.values())


def coverage_lines(results: Results) -> list[str]:
    """Eval coverage for the terminal and the markdown report: a held-out CE needs how many tokens
    it averages and the set's unigram entropy (the CE of token frequencies alone), both recorded
    by the plan; arms whose eval points scored different token counts are flagged (their CEs
    average different text) in lines starting with WARNING."""
    facts = results.plan.eval_sets
    lines: list[str] = []
    warnings: list[str] = []
    rows = coverage(results)
    for cov in rows:
        # measured at plan time; a plan from before eval_sets existed has none
        sets = facts[cov.size] if cov.size in facts else {}
        fact = sets[cov.eval_set] if cov.eval_set in sets else None
        scorable = fact.scored_tokens if fact is not None else None
        entropy = fact.unigram_entropy_nats if fact is not None else None
        if not cov.final_ce:
            continue
        ce = sum(cov.final_ce) / len(cov.final_ce)
        seeds = f"{len(cov.final_ce)} seed{'s' if len(cov.final_ce) != 1 else ''}"
        parts = [f"final CE {ce:.3f} ({seeds})"]
        if isinstance(entropy, (int, float)) and math.isfinite(entropy):
            parts.append(f"held-out unigram entropy {entropy:.3f} ({entropy - ce:+.2f} nats below)")
        if cov.missing_tokens:
            parts.append("eval tokens per point not recorded")
        else:
            toks = sorted(cov.tokens_per_point)
            txt = "/".join(f"{t:,}" for t in toks)
            if isinstance(scorable, int) and scorable:
                txt += f" of {scorable:,} scorable ({100 * toks[0] / scorable:.1f}%" + (
                    ")" if len(toks) == 1 else f"-{100 * toks[-1] / scorable:.1f}%)"
                )
            parts.append(f"eval tokens per point {txt}")
            if len(toks) > 1:
                warnings.append(
                    f"WARNING: {cov.size} {cov.arm} {cov.eval_set}: eval points scored different "
                    f"token counts ({txt}); CEs average different text"
                )
        lines.append(f"eval {cov.eval_set} @ {cov.size} {cov.arm}: " + "; ".join(parts))
    by_set: dict[tuple[str, str], dict[str, frozenset[int]]] = {}
    for cov in rows:
        if cov.final_ce and not cov.missing_tokens:
            by_set.setdefault((cov.size, cov.eval_set), {})[cov.arm] = frozenset(
                cov.tokens_per_point
            )
    for (size, name), arms in by_set.items():
        if len(set(arms.values())) > 1:
            detail = ", ".join(
                f"{a} {'/'.join(f'{t:,}' for t in sorted(v))}" for a, v in arms.items()
            )
            warnings.append(
                f"WARNING: {size} {name}: arms scored different eval token counts ({detail}); "
                "their CEs are not on the same text"
            )
    return warnings + lines
