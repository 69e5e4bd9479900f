"""Per-pair comparisons at matched tokens: curves, final deltas, stability, cost, looped extras.

One comparison object per pair (`PairResult`): every renderer, the gate evidence and the notebook
read the same aligned curves, so a plot, a table and the verdict cannot disagree. A pair failing
its certificate or data fingerprints is INVALID: kept out of the gate and said loudly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from olmoablate.plan import metrics as names
from olmoablate.plan.names import RunState
from olmoablate.plan.planfile import Pair
from olmoablate.report.collect import Curve, Results, RunData, cumulative_flops, nonfinite_evals
from olmoablate.report.pairing import (
    certificate_problems,
    cost_rows,
    execution_mismatch,
    execution_of,
    num,
    parity_note,
    proof_problems,
    token_shortfall,
)
from olmoablate.report.prereg import pair_identity_problems
from olmoablate.run.files import ProofRecord, RunStatus, RunSummary


@dataclass
class Aligned:
    """Two arms on a shared x axis (tokens or FLOPs); ``delta`` = variant - baseline (raw). The
    arms are compared at the same amount of training, never "at the end": train loss on one grid
    that stops where the shorter arm stops, eval points only at identical token counts."""

    x: np.ndarray
    baseline: np.ndarray
    variant: np.ndarray

    @property
    def delta(self) -> np.ndarray:
        return self.variant - self.baseline

    def __len__(self) -> int:
        return int(self.x.size)


def common_grid(b: Curve, v: Curve, points: int = 1000) -> Aligned:
    """Interpolate both curves onto one grid spanning only the x range both arms reached."""
    if len(b) < 2 or len(v) < 2:
        return Aligned(np.empty(0), np.empty(0), np.empty(0))
    lo, hi = max(b.x[0], v.x[0]), min(b.x[-1], v.x[-1])
    if hi <= lo:
        return Aligned(np.empty(0), np.empty(0), np.empty(0))
    grid = np.linspace(lo, hi, points)
    return Aligned(grid, np.interp(grid, b.x, b.y), np.interp(grid, v.x, v.y))


def match_points(b: Curve, v: Curve) -> Aligned:
    """Pair eval points at identical x (tokens): no interpolation."""
    common, ib, iv = np.intersect1d(b.x, v.x, assume_unique=False, return_indices=True)
    return Aligned(common, b.y[ib], v.y[iv])


def interp_points(b: Curve, v: Curve) -> Aligned:
    """The baseline's points with the variant interpolated at the same x (FLOPs axis only, where
    the arms' eval points do not coincide)."""
    if len(v) < 2 or len(b) == 0:
        return Aligned(np.empty(0), np.empty(0), np.empty(0))
    keep = (b.x >= v.x[0]) & (b.x <= v.x[-1])
    x = b.x[keep]
    return Aligned(x, b.y[keep], np.interp(x, v.x, v.y))


def ema(y: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """Exponential moving average (NaNs carry the previous value) for smoothed plots: pandas'
    ``ewm(alpha, adjust=True, ignore_na=True).mean()`` in numpy (pandas' import costs more)."""
    y = np.asarray(y, dtype=float)
    if y.size == 0:
        return y
    ok = ~np.isnan(y)
    v = y[ok]
    if v.size == 0:
        return np.full(y.size, np.nan)
    beta = 1.0 - float(alpha)
    smooth = v.copy() if beta <= 0.0 else _weighted_mean_blocks(v, beta)
    if v.size == y.size:
        return smooth
    out = np.full(y.size, np.nan)
    out[ok] = smooth
    # a NaN point repeats the last average (forward fill); leading NaNs stay NaN
    idx = np.where(ok, np.arange(y.size), -1)
    np.maximum.accumulate(idx, out=idx)
    have = idx >= 0
    out[have] = out[idx[have]]
    return out


def _weighted_mean_blocks(v: np.ndarray, beta: float) -> np.ndarray:
    """sum_{i<=t} beta**(t-i) v_i / sum_{i<=t} beta**(t-i) for every t without a loop per point:
    blockwise cumsums (short enough that beta**-i < e**30) chained by a scalar loop; log1p/expm1
    keep beta close to 1 precise."""
    n = v.size
    lb = np.log1p(-(1.0 - beta)) if beta < 1.0 else 0.0  # log(beta), accurate near 1
    width = int(min(256, max(1, 30.0 / max(-lb, 1e-300))))
    n_blocks = -(-n // width)
    pad = np.zeros(n_blocks * width)
    pad[:n] = v
    j = np.arange(width, dtype=float)
    decay = np.exp(lb * j)
    local = np.cumsum(pad.reshape(n_blocks, width) * np.exp(-lb * j), axis=1)
    local *= decay  # sums over each block's own points
    carry = np.empty(n_blocks)  # the whole sum just before each block
    total = 0.0
    step = float(np.exp(lb * width))
    for b, end in enumerate(local[:, -1].tolist()):
        carry[b] = total
        total = end + step * total
    local += carry[:, None] * (decay * beta)[None, :]
    t1 = np.arange(1, n + 1, dtype=float)
    weights = -np.expm1(lb * t1) / (1.0 - beta) if beta < 1.0 else t1
    return local.ravel()[:n] / weights


def loss_spikes(
    loss: np.ndarray,
    window: int = names.DEFAULT_WINDOW,
    factor: float = names.DEFAULT_FACTOR,
    min_relative_jump: float = names.DEFAULT_MIN_RELATIVE_JUMP,
) -> np.ndarray:
    """Indices of loss spikes under the project's one rule (`olmoablate.plan.metrics`), the same
    rule the training job's StabilityCallback counts with, so report and job agree."""
    return np.asarray(names.spike_indices(loss, window, factor, min_relative_jump), dtype=np.int64)


def loop_eval(name: str) -> tuple[str, int] | None:
    """(eval set's CE loss name, loop count) of an LM eval scored at another loop count
    (``eval/lm/<set>/CE loss (loops=n)``), None for any other metric."""
    base, loops = names.split_loops(name)
    if loops is None or not names.is_lm_ce(base):
        return None
    return base, loops


def looped_summary(
    var: RunData, base: RunData, evals: Mapping[str, Aligned]
) -> dict[str, Any] | None:
    """A ``looped:`` variant's eval loss against the loop count at eval (below, at and beyond the
    trained count) and its H norms; None for any other variant."""
    looped = var.entry.architecture.looped
    if looped is None or var.metrics is None:
        return None
    trained_b = looped.loops
    per_set: dict[str, dict[int, float]] = {}
    for key, col in var.metrics.columns.items():
        parsed = loop_eval(key)
        if parsed is None:
            continue
        ok = np.isfinite(col)
        if ok.any():
            per_set.setdefault(parsed[0], {})[parsed[1]] = float(col[ok][-1])
    sets: dict[str, Any] = {}
    for base_key, by_loop in per_set.items():
        loops = sorted(by_loop)
        at_b = by_loop.get(trained_b)
        if at_b is None:
            plain = evals.get(base_key)
            at_b = float(plain.variant[-1]) if plain is not None and len(plain) else None
        post = by_loop[loops[-1]] - at_b if at_b is not None and loops[-1] > trained_b else None
        ref = evals.get(base_key)
        sets[base_key] = {
            "loops": loops, "loss": [by_loop[n] for n in loops], "at_trained": at_b,
            "post_horizon_divergence": post,
            "baseline_final": float(ref.baseline[-1]) if ref is not None and len(ref) else None,
        }  # fmt: skip
    hnorm: dict[int, float] = {}
    for key, col in var.metrics.columns.items():
        loop = names.h_norm_loop(key)
        ok = np.isfinite(col)
        if loop is not None and ok.any():
            tail = col[ok][-max(1, int(ok.sum()) // 10) :]
            hnorm[loop] = float(np.mean(tail))
    return {
        "trained_loops": trained_b,
        "sets": sets,
        "h_norm": dict(sorted(hnorm.items())),
        "unique_params": {"baseline": num(base.entry.unique_params),
                          "variant": num(var.entry.unique_params)},
        "train_flops": {"baseline": num(base.entry.total_train_flops),
                        "variant": num(var.entry.total_train_flops)},
    }  # fmt: skip


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
    #: A NaN/inf train loss or grad norm (the gate's stability stop).
    nonfinite: bool = False
    diverged: bool = False
    max_grad_norm: float | None = None
    state: str | None = None
    #: Eval metrics written NaN/inf at some point, with how many: left out of the curves, so the
    #: report says so (data issues, the stability table) and the gate refuses a pair whose gate
    #: metric has one rather than compare earlier points (:func:`.evidence.evidence_for`).
    nonfinite_evals: dict[str, int] = field(default_factory=dict)

    def nonfinite_text(self) -> str | bool:
        """The stability table's non-finite cell: no, yes (loss/grad), or the eval metrics."""
        evals = ", ".join(f"{k} x{n}" for k, n in self.nonfinite_evals.items())
        if not evals:
            return self.nonfinite
        return f"{'loss/grad and ' if self.nonfinite else ''}eval: {evals}"


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
    #: What differs between the arms' execution records (:func:`.pairing.execution_mismatch`):
    #: when non-empty the measured cost is shown but not compared and stays out of the gate.
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


def _smoothed(run: RunData, key: str) -> Curve:
    c = run.curve(key)
    alpha = 2.0 / (max(5, len(c) // 100) + 1.0)  # an EMA span of 1% of the points, at least 5
    return run.once(f"ema:{key}", lambda: Curve(c.x, ema(c.y, alpha)))


def _arm_stats(run: RunData) -> ArmStats:
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
    evals: dict[str, int] = {}
    if run.metrics is not None:
        nonfinite = any(run.metrics.nonfinite.get(k, 0) for k in (LOSS, names.GRAD_NORM))
        evals = nonfinite_evals(run.metrics)
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
        ArmHealth(int(spikes.size), bool(nonfinite), bool(diverged), gmax, run.state, evals),
        skipped,
        int(job_spikes) if isinstance(job_spikes, int | float) else None,
    )


def _eval_keys(run: RunData) -> list[str]:
    if run.metrics is None:
        return []
    return sorted(k for k in run.metrics.columns if names.is_eval(k))


def measure_all(results: Results) -> list[PairResult]:
    """Every pair of the plan measured once (gate-independent; :func:`for_gate` per gate)."""
    return [r for p in results.pairs if (r := measure_pair(results, p)) is not None]


def measure_pair(results: Results, pair: Pair) -> PairResult | None:
    """The gate-independent comparison of one pair: checks, alignments, stability and cost."""
    base = results.runs.get(pair.baseline_run)
    var = results.runs.get(pair.variant_run)
    if base is None or var is None:
        return None
    notes: list[str] = []
    budget = "flops" if "tokens" in pair.differs else results.budget_match
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
        if loop_eval(key) is not None:
            continue
        al = match_points(base.curve(key), var.curve(key))
        if len(al):
            evals[key] = al
    res = PairResult(pair, base, var, True, [], [], matched, train, train_s, evals)
    # FLOPs axis (budget matched on FLOPs: the arms train different token counts)
    if budget == "flops":
        (fb, lb), (fv, lv) = (
            cumulative_flops(
                run.tokens if run.tokens is not None else np.empty(0),
                float(run.entry.train_flops_per_token),
                run.column(names.TOTAL_PFLOPS),
            )
            for run in (base, var)
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
    for key, al in evals.items():
        res.final.append(_final_row(key, al, "eval"))
    if len(train_s):
        last = Aligned(train_s.x[-1:], train_s.baseline[-1:], train_s.variant[-1:])
        res.final.append(_final_row(LOSS + " (EMA)", last, "train"))
    res.stability = {
        "baseline": base.once("arm_stats", lambda: _arm_stats(base)),
        "variant": var.once("arm_stats", lambda: _arm_stats(var)),
    }
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
