"""Step-time overhead of a variant as a ratio with a confidence interval, from per-step times.

A point ratio near the limit flips on noise, and per-step times are autocorrelated (thermal state,
page cache, neighbours), so steps are not iid: each arm's steady-state steps are cut into batches
of ``BATCH_TAU`` integrated autocorrelation times and only the batch means are treated as
independent; the log ratio of means gets a delta-method se, Welch dof and a t bound. Runs too
short for that (several pairs): the pairs' ratios of run means are the replicates.
Steady state drops the LR warm-up, each attempt's first steps, and eval and checkpoint steps with
the step after each. CPU runs use process CPU time when both arms have it (their wall time
includes whatever else ran), GPU runs wall time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from olmoablate.plan.gate import Gate
from olmoablate.plan.metrics import ATTEMPT_WARMUP_STEPS
from olmoablate.plan.names import INCONCLUSIVE, STOP
from olmoablate.plan.planfile import RunEntry
from olmoablate.report.collect import ATTEMPT, CPU, WALL
from olmoablate.run.files import RunStatus, RunSummary
from olmoablate.stats import t_ppf

MIN_BLOCKS, MIN_BLOCK_LEN = 4, 3


@dataclass
class ArmTiming:
    """Steady-state step times of one arm and the conditions they were taken under."""

    run_id: str
    times: np.ndarray  # seconds per steady-state step (in step order)
    column: str
    host: str | None = None
    executor: str | None = None
    excluded: int = 0


def steady_steps(
    steps: np.ndarray,
    times: np.ndarray,
    in_attempt: np.ndarray | None = None,
    *,
    warmup_steps: int = 0,
    intervals: Sequence[int] = (),
) -> tuple[np.ndarray, int]:
    """Times of steady-state steps (see the module docstring) and how many steps were dropped;
    ``in_attempt``: metrics' ``step_in_attempt``; ``intervals``: eval and checkpoint intervals."""
    warm = warmup_steps
    s = np.asarray(steps, dtype=np.int64)
    t = np.asarray(times, dtype=float)
    drop = (s <= max(1, warm)) | ~np.isfinite(t) | (t <= 0)
    if in_attempt is not None:
        drop |= (
            np.nan_to_num(np.asarray(in_attempt, dtype=float), nan=np.inf) <= ATTEMPT_WARMUP_STEPS
        )
    for every in intervals:
        if every > 0:
            drop |= (s % every == 0) | ((s - 1) % every == 0)
    return t[~drop], int(drop.sum())


def _centred(x: np.ndarray) -> np.ndarray | float:
    """``x`` minus its mean, or the autocorrelation time where it is fixed: too short (inf) or
    constant (1)."""
    if x.size < 4:
        return math.inf
    if np.ptp(x) == 0:
        return 1.0
    y = x - x.mean()
    return y if float(y @ y) != 0 else 1.0


def autocorr_time(x: np.ndarray) -> float:
    """Integrated autocorrelation time tau = 1 + 2 sum_k rho_k (Geyer's initial positive sequence).
    Batch means are nearly independent only when a batch is several tau long."""
    y = _centred(x)
    if isinstance(y, float):
        return y
    n = x.size
    var = float(y @ y) / n
    f = np.fft.rfft(y, 2 * n)
    acf = np.fft.irfft(f * np.conj(f))[:n] / (n * var)
    tau = 1.0
    for k in range(1, n // 2 - 1, 2):
        pair = acf[k] + acf[k + 1]
        if pair <= 0:
            break
        tau += 2.0 * pair
    return float(tau)


#: A batch spans at least this many integrated autocorrelation times.
BATCH_TAU = 8.0


def ar1_time(x: np.ndarray) -> float:
    """tau of an AR(1) fitted to the series, lag-1 autocorrelation corrected for its downward
    small-sample bias (about (1 + 3 phi) / n): a second, less optimistic estimate."""
    y = _centred(x)
    if isinstance(y, float):
        return y
    r1 = float(y[1:] @ y[:-1]) / float(y @ y)
    phi = min(0.995, r1 + (1.0 + 3.0 * max(0.0, r1)) / x.size)
    return (1.0 + phi) / (1.0 - phi) if phi > 0 else 1.0


def batch_length(x: np.ndarray) -> int:
    """Steps per batch: 1 + BATCH_TAU (tau - 1) for the larger of two autocorrelation-time
    estimates (about BATCH_TAU tau when autocorrelated, short when iid), and at least
    1 / (2 MIN_BLOCKS) of the series (batch means need long batches more than many)."""
    tau = max(autocorr_time(x), ar1_time(x))
    if not math.isfinite(tau):
        return x.size
    long_enough = 1.0 + BATCH_TAU * (tau - 1.0)  # iid (tau = 1): any length will do
    return max(MIN_BLOCK_LEN, int(math.ceil(long_enough)), x.size // (2 * MIN_BLOCKS))


def batch_means(x: np.ndarray) -> np.ndarray:
    """Means of contiguous batches of :func:`batch_length` steps (oldest remainder dropped);
    empty when fewer than MIN_BLOCKS batches fit (too short for its autocorrelation)."""
    size = batch_length(x)
    n_blocks = x.size // size if size else 0
    if n_blocks < MIN_BLOCKS:
        return np.empty(0)
    return x[x.size - n_blocks * size :].reshape(n_blocks, size).mean(axis=1)


def too_short(x: np.ndarray) -> str:
    """Why a series has no batch-means interval ("" when it has one)."""
    if batch_means(x).size:
        return ""
    tau = autocorr_time(x)
    return (
        f"{x.size} steady-state steps with integrated autocorrelation time {tau:.3g} steps give "
        f"fewer than {MIN_BLOCKS} batches of {BATCH_TAU:g} x tau: too short for an interval"
    )


def arm_timing(
    run_id: str,
    steps: np.ndarray | None,
    columns: Mapping[str, np.ndarray | None],
    entry: RunEntry,
    use_cpu: bool,
    info: tuple[RunSummary | None, RunStatus | None] = (None, None),
) -> ArmTiming | None:
    """One arm's steady-state times (None without per-step times); ``info``: the run's own
    summary.json and status.json, which say its node and executor (never launch's ledger)."""
    col = CPU if use_cpu and columns.get(CPU) is not None else WALL
    times = columns.get(col)
    if steps is None or times is None:
        return None
    t, dropped = steady_steps(
        steps,
        times,
        columns.get(ATTEMPT),
        warmup_steps=entry.training.schedule.warmup_steps,
        intervals=(entry.evaluation.interval, entry.training.checkpoint_interval),
    )
    summary, status = info
    host = (summary.hostname if summary else None) or (status.host if status else None)
    executor = (summary.executor if summary else None) or (status.executor if status else None)
    return ArmTiming(run_id, t, col, host, executor, dropped)


@dataclass
class RatioInterval:
    ratio: float  # variant / baseline mean step time
    lower: float
    upper: float
    log_se: float
    dof: float
    blocks: tuple[int, int]


def ratio_interval(base: np.ndarray, var: np.ndarray, confidence: float) -> RatioInterval | None:
    """Ratio of mean step times with one-sided ``confidence`` bounds (batch means, log scale)."""
    mb, mv = batch_means(base), batch_means(var)
    if mb.size < 2 or mv.size < 2 or mb.mean() <= 0 or mv.mean() <= 0:
        return None
    # delta method: Var(log mean) ~ Var(batch mean) / (B * mean^2)
    vb = float(mb.var(ddof=1)) / (mb.size * mb.mean() ** 2)
    vv = float(mv.var(ddof=1)) / (mv.size * mv.mean() ** 2)
    log_ratio = math.log(mv.mean() / mb.mean())
    se = math.sqrt(vb + vv)
    if se == 0:
        dof = math.inf
    else:
        dof = (vb + vv) ** 2 / (
            (vb**2 / (mb.size - 1) if vb else 0.0) + (vv**2 / (mv.size - 1) if vv else 0.0)
        )
    q = t_ppf(confidence, dof)
    lo, hi = math.exp(log_ratio - q * se), math.exp(log_ratio + q * se)
    return RatioInterval(math.exp(log_ratio), lo, hi, se, dof, (int(mb.size), int(mv.size)))


@dataclass
class OverheadCheck:
    """Step-time overhead over all pairs of a variant: pass | stop | inconclusive."""

    outcome: str
    reason: str
    overhead: float | None = None  # ratio - 1
    lower: float | None = None
    upper: float | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def conditions(base: ArmTiming, var: ArmTiming) -> list[str]:
    """Why the two arms' times may not be comparable (said in the report, not hidden)."""
    out: list[str] = []
    if base.host and var.host and base.host != var.host:
        out.append(
            f"arms timed on different nodes ({base.run_id} on {base.host}, {var.run_id} on "
            f"{var.host}): node-to-node speed differences enter the ratio"
        )
    if "local" in (base.executor, var.executor):
        how = "CPU time per step is used" if base.column == CPU else "wall time is used"
        out.append(
            f"local runs: they may have shared the machine's cores with neighbouring runs ({how})"
        )
    return out


def _pair_mean_logs(timings: Sequence[tuple[str, ArmTiming, ArmTiming]]) -> list[float]:
    """log(variant mean / baseline mean) of each pair whose arms both have steady-state steps."""
    out = []
    for _pid, b, v in timings:
        if b.times.size >= MIN_BLOCK_LEN and v.times.size >= MIN_BLOCK_LEN:
            mb, mv = float(b.times.mean()), float(v.times.mean())
            if mb > 0 and mv > 0:
                out.append(math.log(mv / mb))
    return out


def step_time_check(
    timings: Sequence[tuple[str, ArmTiming, ArmTiming]], limit: float | None, confidence: float
) -> OverheadCheck | None:
    """Combine the pairs' log-ratios; ``stop`` only if the lower bound exceeds ``limit``. The se
    is the larger of the pooled within-pair and the between-pair se (node heterogeneity is never
    hidden); runs too short for batch means, several pairs: their run-mean ratios are the replicates
    (t, k - 1 dof). None without per-step times or without a limit."""
    if limit is None:
        return None
    per: list[tuple[str, RatioInterval]] = []
    notes: list[str] = []
    short: list[str] = []
    for pid, b, v in timings:
        ri = ratio_interval(b.times, v.times, confidence)
        notes.extend(f"pair {pid}: {c}" for c in conditions(b, v))
        if ri is not None:
            per.append((pid, ri))
        else:
            why = "; ".join(f"{t.run_id}: {w}" for t in (b, v) if (w := too_short(t.times)))
            short.append(f"pair {pid}: {why or 'no usable batch means'}")
    col = timings[0][1].column if timings else WALL
    means = _pair_mean_logs(timings) if short else []
    if len(means) >= 2:
        logs = np.array(means)
        se, dof = float(logs.std(ddof=1)) / math.sqrt(logs.size), float(logs.size - 1)
        how = (
            f"spread of {logs.size} pairs' run-mean ratios, t with {logs.size - 1} dof (runs too "
            "short for within-run batch means)"
        )
    elif not per:
        if not short:
            return None
        return OverheadCheck(
            INCONCLUSIVE,
            "step time overhead: no interval that holds under the steps' autocorrelation ("
            + "; ".join(short)
            + "); longer runs or more seeds give one",
            notes=notes,
        )
    else:
        logs = np.array([math.log(r.ratio) for _, r in per])
        within = math.sqrt(sum(r.log_se**2 for _, r in per)) / len(per)
        dof = min(r.dof for _, r in per)
        se = within
        if len(per) >= 2:
            between = float(logs.std(ddof=1)) / math.sqrt(len(per))
            if between > within:
                se, dof = between, float(len(per) - 1)
        how = f"batch means over {len(per)} pair(s)"
    q = t_ppf(confidence, dof) if se > 0 else 0.0
    mean = float(logs.mean())
    lo, hi = math.exp(mean - q * se) - 1.0, math.exp(mean + q * se) - 1.0
    desc = (
        f"step time overhead {math.exp(mean) - 1:+.1%} (one-sided {confidence:.0%} bounds "
        f"[{lo:+.1%}, {hi:+.1%}], {col} of steady-state steps, {how})"
    )
    if lo > limit:
        outcome, reason = STOP, f"{desc} > limit {limit:.0%} (whole interval above it)"
    elif hi <= limit:
        outcome, reason = "pass", f"{desc} within limit {limit:.0%}"
    else:
        outcome, reason = (
            INCONCLUSIVE,
            f"{desc} straddles the limit {limit:.0%}: cannot tell whether it exceeds it "
            "(longer runs or a quieter machine narrow the interval)",
        )
    return OverheadCheck(outcome, reason, math.exp(mean) - 1.0, lo, hi, notes)


def overhead_checks(
    pairs: Sequence[tuple[str, tuple[ArmTiming, ArmTiming] | None, Mapping[str, float | None]]],
    cfg: Gate,
) -> tuple[list[str], list[str], OverheadCheck | None]:
    """(hard stops, blockers, the step-time check). Without per-step times a point ratio over the
    limit blocks proceed but cannot stop. Peak memory and decode latency are one deterministic
    measurement per run: point ratios, mean over seeds."""
    stops: list[str] = []
    blockers: list[str] = []
    conf = cfg.confidence
    limit = cfg.max_step_time_overhead
    timed = [(pid, *timing) for pid, timing, _ in pairs if timing is not None]
    check = step_time_check(timed, limit, conf)
    if check is not None:
        if check.outcome == STOP:
            stops.append(check.reason)
        elif check.outcome == INCONCLUSIVE:
            blockers.append(check.reason)
    elif limit is not None:
        vals = [o.get("step_time") for _, _, o in pairs]
        vals = [v for v in vals if v is not None and math.isfinite(v)]
        if vals and float(np.mean(vals)) > limit:
            blockers.append(
                f"step time overhead {float(np.mean(vals)):+.1%} (point ratio of mean step "
                f"times; no per-step times for an interval) > limit {limit:.0%}: cannot tell "
                "noise from overhead"
            )
    point_limits = (
        ("peak_memory", cfg.max_peak_memory_overhead, "peak memory"),
        ("decode_latency", cfg.max_decode_latency_overhead, "decode latency"),
    )
    for key, lim, label in point_limits:
        vals = [o.get(key) for _, _, o in pairs]
        vals = [v for v in vals if v is not None and math.isfinite(v)]
        if lim is None or not vals:
            continue
        mean = float(np.mean(vals))
        if mean > lim:
            stops.append(f"{label} overhead {mean:+.1%} over baseline > limit {lim:.0%}")
    return stops, blockers, check
