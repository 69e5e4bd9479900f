"""Per-pair comparisons at matched tokens: curves, final deltas, stability, cost, looped extras.

Why one comparison object per pair (`PairResult`): every renderer, the gate evidence
(:mod:`olmoablate.report.gate.evidence`) and the notebook API read the same aligned curves, so a
plot, a table and the verdict can never disagree about what was compared. Validity comes from
the pairing certificate (:mod:`olmoablate.report.compare.pairing`) and the data fingerprints
(:mod:`olmoablate.report.read.fingerprints`): an INVALID pair is kept out of the gate and said loudly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from olmoablate.contract import metrics as names
from olmoablate.contract.plan import Pair
from olmoablate.contract.proof import ProofRecord
from olmoablate.contract.runfiles import RunStatus, RunSummary
from olmoablate.contract.runstates import RunState
from olmoablate.report.compare.align import (
    Aligned,
    Curve,
    common_grid,
    ema,
    interp_points,
    loss_spikes,
    match_points,
)
from olmoablate.report.compare.cost import cost_rows
from olmoablate.report.compare.execution import execution_mismatch, execution_of, parity_note
from olmoablate.report.compare.looped import is_loop_eval, looped_summary
from olmoablate.report.compare.pairing import certificate_problems, proof_problems, token_shortfall
from olmoablate.report.read.collect import Results, RunData
from olmoablate.report.read.curve import cumulative_flops
from olmoablate.report.read.reuse import pair_identity_problems

LOSS = names.CE_LOSS


def metric_direction(name: str) -> str | None:
    """'lower' / 'higher' is better, from the metric name; None when unknown."""
    low = name.lower()
    if any(s in low for s in ("loss", "ppl", "perplexity", "bpb", "bits per byte")):
        return "lower"
    if any(s in low for s in ("acc", "f1", "exact match", "/em", "score", "pass@")):
        return "higher"
    return None


def improvement_sign(direction: str) -> float:
    """Multiply (variant - baseline) by this to get an improvement (positive = variant better)."""
    return -1.0 if direction == "lower" else 1.0


@dataclass
class ArmHealth:
    """Stability facts about one arm at the stage (from metrics and status)."""

    spikes: int = 0
    nonfinite: bool = False
    diverged: bool = False
    max_grad_norm: float | None = None
    state: str | None = None


@dataclass
class ArmStats:
    health: ArmHealth
    skipped_steps: int
    job_spikes: int | None


@dataclass(frozen=True)
class PairChecks:
    """What the checks of a pair found, in the order the report lists them: problems before the
    token-shortfall check (certificate, identity, reuse), the shortfalls (a problem unless the
    gate allows partial pairs), problems after it (proof, data order), and the notes."""

    before: tuple[str, ...] = ()
    short: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def for_gate(res: PairResult, allow_partial_pairs: bool) -> PairResult:
    """``res`` under one gate: a new result whose validity and notes follow the gate's
    ``allow_partial_pairs``; the curves, alignments and cost are the same objects."""
    c = res.checks
    if c is None:
        return res
    invalid = [*c.before, *(() if allow_partial_pairs else c.short), *c.after]
    notes = [f"partial pair allowed (gate.allow_partial_pairs): {w}" for w in c.short]
    notes = [*(notes if allow_partial_pairs else []), *c.notes]
    return dataclasses.replace(res, valid=not invalid, invalid_reasons=invalid, notes=notes)


@dataclass
class PairResult:
    pair: Pair
    baseline: RunData
    variant: RunData
    valid: bool
    invalid_reasons: list[str]
    notes: list[str]
    matched_tokens: float
    train: Aligned
    train_smooth: Aligned
    evals: dict[str, Aligned]
    flops_label: str = ""
    train_flops: Aligned | None = None
    evals_flops: dict[str, Aligned] = field(default_factory=dict)
    final: list[dict[str, Any]] = field(default_factory=list)
    stability: dict[str, ArmStats] = field(default_factory=dict)
    divergence: float | None = None
    cost: list[dict[str, Any]] = field(default_factory=list)
    overhead: dict[str, float | None] = field(default_factory=dict)
    looped: dict[str, Any] | None = None
    #: What differs between the arms' summary.json execution blocks (report.compare.execution); when
    #: non-empty the measured cost is shown but not compared and stays out of the gate.
    execution_mismatch: list[str] = field(default_factory=list)
    complete: bool = False
    incomplete_reason: str = ""
    #: The pair's checks, apart from the gate: :func:`for_gate` turns them into ``valid``,
    #: ``invalid_reasons`` and ``notes`` under one gate's ``allow_partial_pairs``.
    checks: PairChecks | None = None
    #: metric -> both arms at matched tokens (:meth:`at_matched_tokens`), shared by the copies
    #: :func:`for_gate` makes, so every gate reads one alignment per pair and metric.
    by_metric: dict[str, Aligned] = field(default_factory=dict)

    def at_matched_tokens(self, metric: str) -> Aligned:
        """``metric`` of both arms at identical token counts (computed once per pair)."""
        al = self.by_metric.get(metric)
        if al is None:
            al = self.evals.get(metric)
            if al is None:
                al = match_points(self.baseline.curve(metric), self.variant.curve(metric))
            self.by_metric[metric] = al
        return al

    @property
    def pair_id(self) -> str:
        return self.pair.pair_id

    @property
    def size(self) -> str:
        return self.pair.size

    @property
    def variant_name(self) -> str:
        return self.pair.variant

    @property
    def seed(self) -> int:
        return self.pair.seed


def _span_alpha(n: int) -> float:
    span = max(5, n // 100)
    return 2.0 / (span + 1.0)


def _smoothed(run: RunData, key: str) -> Curve:
    memo_key = f"ema:{key}"
    if memo_key not in run.memo:
        c = run.curve(key)
        run.memo[memo_key] = Curve(c.x, ema(c.y, _span_alpha(len(c))))
    return run.memo[memo_key]


def _arm_stats(run: RunData) -> ArmStats:
    if "arm_stats" not in run.memo:
        run.memo["arm_stats"] = _compute_arm_stats(run)
    return run.memo["arm_stats"]


def _compute_arm_stats(run: RunData) -> ArmStats:
    stab = run.entry.training.stability
    loss = run.column(LOSS)
    spikes = (
        loss_spikes(loss, stab.spike_window, stab.spike_factor, stab.min_relative_jump)
        if loss is not None
        else np.empty(0, np.int64)
    )
    nonfinite = False
    gmax = None
    skipped = 0
    if run.metrics is not None:
        nonfinite = any(run.metrics.nonfinite.get(k, 0) for k in (LOSS, names.GRAD_NORM))
        g = run.column(names.GRAD_NORM)
        if g is not None and np.isfinite(g).any():
            gmax = float(np.nanmax(np.where(np.isfinite(g), g, np.nan)))
        sk = run.column(names.STEP_SKIPPED)
        if sk is not None:
            skipped = int(np.nansum(sk > 0))
    status = run.status or RunStatus()
    diverged = run.state == RunState.DIVERGED or status.diverged_at_step is not None
    job_spikes = (run.summary or RunSummary()).loss_spikes
    return ArmStats(
        ArmHealth(int(spikes.size), bool(nonfinite), bool(diverged), gmax, run.state),
        skipped,
        int(job_spikes) if isinstance(job_spikes, int | float) else None,
    )


def _eval_keys(run: RunData) -> list[str]:
    if run.metrics is None:
        return []
    return sorted(k for k in run.metrics.columns if names.is_eval(k))


def compare_pair(results: Results, pair: Pair) -> PairResult | None:
    """All comparisons of one pair under ``results.gate`` (None when the plan does not know one
    of its runs): :func:`measure_pair` then :func:`for_gate`."""
    res = measure_pair(results, pair)
    if res is None:
        return None
    return for_gate(res, bool(getattr(results.gate, "allow_partial_pairs", False)))


def measure_all(results: Results) -> list[PairResult]:
    """Every pair of the plan measured once (gate-independent; :func:`for_gate` per gate)."""
    out = []
    for p in results.pairs:
        r = measure_pair(results, p)
        if r is not None:
            out.append(r)
    return out


def measure_pair(results: Results, pair: Pair) -> PairResult | None:
    """The gate-independent comparison of one pair: checks, alignments, stability and cost."""
    base = results.runs.get(pair.baseline_run)
    var = results.runs.get(pair.variant_run)
    if base is None or var is None:
        return None
    notes: list[str] = []
    budget = results.budget_match
    if "tokens" in pair.differs:
        budget = "flops"
    before = certificate_problems(base.entry, var.entry, budget)
    before.extend(pair_identity_problems(results.plan, pair, budget))
    for run in (base, var):
        before.extend(results.reuse_problems.get(run.run_id, []))
    short = [w for w in (token_shortfall("baseline", base), token_shortfall("variant", var)) if w]
    invalid: list[str] = []
    for arm in (base, var) if var.entry.code is not None else ():  # a plan with code identities
        if arm.metrics is not None:  # what the job proved before its first step
            bad, unverified = proof_problems(arm.entry, ProofRecord.read(arm.dir.proof))
            invalid.extend(bad)
            notes.extend(unverified)
    fp_bad, fp_note = results.fingerprint_check(base, var)
    invalid.extend(fp_bad)
    if fp_note:
        notes.append(fp_note)
    matched = min(base.max_tokens, var.max_tokens)
    train = common_grid(base.curve(LOSS), var.curve(LOSS))
    train_s = common_grid(_smoothed(base, LOSS), _smoothed(var, LOSS))
    evals: dict[str, Aligned] = {}
    for key in sorted(set(_eval_keys(base)) | set(_eval_keys(var))):
        if is_loop_eval(key):
            continue
        al = match_points(base.curve(key), var.curve(key))
        if len(al):
            evals[key] = al
    res = PairResult(pair, base, var, True, [], [], matched, train, train_s, evals)
    # FLOPs axis (budget matched on FLOPs: the arms train different token counts)
    if budget == "flops":
        fb, lb = cumulative_flops(
            base.tokens if base.tokens is not None else np.empty(0),
            float(base.entry.train_flops_per_token),
            base.column(names.TOTAL_PFLOPS),
        )
        fv, lv = cumulative_flops(
            var.tokens if var.tokens is not None else np.empty(0),
            float(var.entry.train_flops_per_token),
            var.column(names.TOTAL_PFLOPS),
        )
        if fb is not None and fv is not None:
            res.flops_label = f"baseline {lb}; variant {lv}"
            res.train_flops = common_grid(
                Curve.of(fb, base.column(LOSS)), Curve.of(fv, var.column(LOSS))
            )
            for key in evals:
                res.evals_flops[key] = interp_points(
                    Curve.of(fb, base.column(key)), Curve.of(fv, var.column(key))
                )
    # final deltas at the last matched token count
    for key, al in evals.items():
        res.final.append(_final_row(key, al, "eval"))
    if len(train_s):
        res.final.append(
            _final_row(
                LOSS + " (EMA)",
                Aligned(train_s.x[-1:], train_s.baseline[-1:], train_s.variant[-1:]),
                "train",
            )
        )
    res.stability = {"baseline": _arm_stats(base), "variant": _arm_stats(var)}
    if len(train_s):
        res.divergence = float(np.max(train_s.delta))
    res.cost, res.overhead = cost_rows(base, var)
    res.execution_mismatch = execution_mismatch(
        execution_of(base.summary), execution_of(var.summary)
    )
    if res.execution_mismatch:
        notes.append(parity_note(res.execution_mismatch))
        res.overhead = dict.fromkeys(res.overhead)
        for row in res.cost:
            if row["source"] == "measured":
                row["ratio"], row["source"] = None, "measured (executions differ)"
    res.looped = looped_summary(var, base, evals)
    res.complete, res.incomplete_reason = _completeness(base, var)
    res.checks = PairChecks(tuple(before), tuple(short), tuple(invalid), tuple(notes))
    return for_gate(res, allow_partial_pairs=False)


def _final_row(key: str, al: Aligned, kind: str) -> dict[str, Any]:
    b, v = float(al.baseline[-1]), float(al.variant[-1])
    direction = metric_direction(key)
    better = None
    if direction is not None and v != b:
        better = "variant" if (v < b) == (direction == "lower") else "baseline"
    return {
        "metric": key,
        "kind": kind,
        "tokens": float(al.x[-1]),
        "baseline": b,
        "variant": v,
        "delta": v - b,
        "relative": (v - b) / abs(b) if b else None,
        "direction": direction,
        "better": better,
    }


def _completeness(base: RunData, var: RunData) -> tuple[bool, str]:
    parts = []
    for who, run in (("baseline", base), ("variant", var)):
        planned = float(run.entry.tokens)
        if run.state == RunState.COMPLETED:
            continue
        if planned and run.max_tokens >= planned:
            continue
        have = f"{run.max_tokens:.3g}" + (f"/{planned:.3g}" if planned else "")
        parts.append(f"{who} {run.run_id} is {run.state} at {have} tokens")
    return (not parts, "; ".join(parts))
