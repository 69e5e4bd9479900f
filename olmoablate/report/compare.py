"""Per-pair comparisons at matched tokens: curves, final deltas, stability, cost, looped extras,
the pairing-certificate check, and consistency across sizes.

Why the certificate check lives here: a pair whose arms saw different data, or differ in anything
but the declared architecture, measures the wrong thing. It is marked INVALID and kept out of the
gate, and the report says so loudly, instead of silently producing a delta.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from olmoablate.contract.certificate import certificate_of, differences, shared_settings
from olmoablate.report.align import (
    Aligned,
    Curve,
    common_grid,
    cumulative_flops,
    ema,
    interp_points,
    loss_spikes,
    match_points,
)
from olmoablate.report.collect import Results, RunData
from olmoablate.report.gate import ArmHealth, Estimate, PairEvidence, estimate
from olmoablate.report.noise import NoiseSource

LOSS = "train/CE loss"
_LOOP_EVAL = re.compile(r"^(eval/lm/.+/CE loss) \(loops=(\d+)\)$")
_H_NORM = re.compile(r"^train/H norm \(loop (\d+)\)$")


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


# ----------------------------------------------------------------------------------------------
# certificates and fingerprints
# ----------------------------------------------------------------------------------------------


def certificate_problems(
    baseline: Mapping[str, Any], variant: Mapping[str, Any], budget_match: str
) -> list[str]:
    """Why the two plan entries do not form a valid pair (empty list = valid).

    Recomputes the pairing certificate (`olmoablate.contract.certificate`, the same hash `plan`
    wrote) of both arms under the pair's budget rule, and checks each entry still matches the
    certificate recorded for it (a plan.json edited after planning is caught here).
    """
    problems: list[str] = []
    cb = certificate_of(baseline, budget_match)
    cv = certificate_of(variant, budget_match)
    if cb != cv:
        diff = differences(
            shared_settings(baseline, budget_match), shared_settings(variant, budget_match)
        )
        diff = _allow_reference_depth(diff, baseline, variant)
        if diff:
            problems.append(f"settings differ beyond the architecture: {', '.join(diff[:8])}")
    for who, entry in (("baseline", baseline), ("variant", variant)):
        recorded = entry.get("certificate")
        if recorded and recorded != certificate_of(entry):
            problems.append(
                f"{who} {entry.get('run_id')}: plan entry no longer matches its recorded "
                "certificate (plan.json edited after planning?)"
            )
    return problems


def _allow_reference_depth(
    diff: list[str], baseline: Mapping[str, Any], variant: Mapping[str, Any]
) -> list[str]:
    """A `layers:` reference arm is declared to change the depth; that difference is allowed."""
    if "layers" in (variant.get("architecture") or {}) or "layers" in (
        baseline.get("architecture") or {}
    ):
        return [d for d in diff if d != "size_dims.n_layers"]
    return diff


def fingerprint_problems(a: bytes | None, b: bytes | None) -> tuple[list[str], str]:
    """Compare two fingerprints.jsonl contents per common step; (problems, note)."""
    if a is None or b is None:
        which = "baseline" if a is None else "variant"
        return [], f"data order unverified: {which} has no fingerprints.jsonl"
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    if long_.startswith(short):  # identical or one arm further along: every common step matches
        n_common = short.count(b"\n")
        if n_common == 0:
            return [], "data order unverified: no common fingerprint steps yet"
        return [], f"data fingerprints match on {n_common} common steps"
    fa, fb = _fingerprint_map(a), _fingerprint_map(b)
    common = sorted(set(fa) & set(fb))
    bad = [s for s in common if fa[s] != fb[s]]
    if bad:
        return (
            [
                f"data fingerprints differ at {len(bad)} of {len(common)} common steps "
                f"(first at step {bad[0]}): the arms did not see the same batches"
            ],
            "",
        )
    return [], f"data fingerprints match on {len(common)} common steps"


def _fingerprint_map(data: bytes) -> dict[int, str]:
    import json

    out: dict[int, str] = {}
    for line in data.splitlines():
        try:
            row = json.loads(line)
            out[int(row["step"])] = str(row["sha256"])  # last row of a step wins
        except (ValueError, KeyError, TypeError):
            continue
    return out


# ----------------------------------------------------------------------------------------------
# one pair
# ----------------------------------------------------------------------------------------------


@dataclass
class ArmStats:
    health: ArmHealth
    spike_steps: list[int]
    skipped_steps: int
    job_spikes: int | None


@dataclass
class PairResult:
    pair: dict[str, Any]
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
    complete: bool = False
    incomplete_reason: str = ""

    @property
    def pair_id(self) -> str:
        return str(self.pair.get("pair_id"))

    @property
    def size(self) -> str:
        return str(self.pair.get("size"))

    @property
    def variant_name(self) -> str:
        return str(self.pair.get("variant"))

    @property
    def seed(self) -> int:
        return int(self.pair.get("seed") or 0)


def _curve(run: RunData, key: str, x: str = "tokens") -> Curve:
    """``key`` against ``x`` (finite points), computed once per run: a baseline serves every
    variant of its (size, seed), and each pair asks for the same curves several times."""
    memo_key = f"curve:{x}:{key}"
    if memo_key not in run.memo:
        run.memo[memo_key] = Curve.of(run.column(x), run.column(key))
    return run.memo[memo_key]


def _span_alpha(n: int) -> float:
    span = max(5, n // 100)
    return 2.0 / (span + 1.0)


def _smoothed(run: RunData, key: str) -> Curve:
    memo_key = f"ema:{key}"
    if memo_key not in run.memo:
        c = _curve(run, key)
        run.memo[memo_key] = Curve(c.x, ema(c.y, _span_alpha(len(c))))
    return run.memo[memo_key]


def _arm_stats(run: RunData) -> ArmStats:
    if "arm_stats" not in run.memo:
        run.memo["arm_stats"] = _compute_arm_stats(run)
    return run.memo["arm_stats"]


def _compute_arm_stats(run: RunData) -> ArmStats:
    stab = ((run.entry.get("training") or {}).get("stability")) or {}
    window = int(stab.get("spike_window") or 50)
    factor = float(stab.get("spike_factor") or 3.0)
    min_jump = float(stab.get("min_relative_jump", 0.05))
    loss = run.column(LOSS)
    steps = run.metrics.steps if run.metrics is not None else np.empty(0, np.int64)
    spikes = (
        loss_spikes(loss, window, factor, min_jump) if loss is not None else np.empty(0, np.int64)
    )
    nonfinite = False
    gmax = None
    skipped = 0
    if run.metrics is not None:
        nonfinite = any(run.metrics.nonfinite.get(k, 0) for k in (LOSS, "optim/total grad norm"))
        g = run.column("optim/total grad norm")
        if g is not None and np.isfinite(g).any():
            gmax = float(np.nanmax(np.where(np.isfinite(g), g, np.nan)))
        sk = run.column("optim/step skipped")
        if sk is not None:
            skipped = int(np.nansum(sk > 0))
    status = run.status or {}
    diverged = run.state == "diverged" or status.get("diverged_at_step") is not None
    job_spikes = (run.summary or {}).get("loss_spikes")
    return ArmStats(
        ArmHealth(int(spikes.size), bool(nonfinite), bool(diverged), gmax, run.state),
        [int(steps[i]) for i in spikes[:50]],
        skipped,
        int(job_spikes) if isinstance(job_spikes, int | float) else None,
    )


def _measured(run: RunData) -> dict[str, float | None]:
    """Measured cost of one arm: summary.json first, metrics as the fallback."""
    s = run.summary or {}

    def col_stat(key: str, fn: Any) -> float | None:
        c = run.column(key)
        if c is None or not np.isfinite(c).any():
            return None
        return float(fn(c[np.isfinite(c)]))

    step_time = s.get("mean_step_time_s")
    if step_time is None:
        step_time = col_stat("step_time_s", lambda a: np.median(a[1:] if a.size > 1 else a))
    peak = s.get("peak_memory_gb")
    if peak is None:
        peak = col_stat("peak_memory_gb", np.max)
    tps = s.get("tokens_per_s")
    if tps is None:
        tps = col_stat("throughput/device/TPS", np.median)
    opt = s.get("optimizer_state_bytes")
    gpus = (run.entry.get("topology") or {}).get("gpus_per_node") or 0
    nodes = (run.entry.get("topology") or {}).get("nodes") or 1
    wall = s.get("wall_time_s")
    return {
        "step_time_s": _num(step_time),
        "peak_memory_gb": _num(peak),
        "tokens_per_s": _num(tps),
        "optimizer_state_gb": _num(opt / 1e9) if isinstance(opt, int | float) else None,
        "gpu_hours": _num(wall * gpus * nodes / 3600.0) if wall and gpus else None,
        "decode_latency_s": _num(s.get("decode_latency_s")),
        "kv_cache_bytes": _num(s.get("kv_cache_bytes")),
        "params": _num(s.get("params")),
        "unique_params": _num(s.get("unique_params")),
    }


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _ratio(b: float | None, v: float | None) -> float | None:
    if b is None or v is None or b == 0:
        return None
    return v / b


def _cost_rows(base: RunData, var: RunData) -> tuple[list[dict[str, Any]], dict[str, float | None]]:
    mb, mv = _measured(base), _measured(var)
    rows: list[dict[str, Any]] = []

    def add(name: str, b: float | None, v: float | None, source: str) -> None:
        rows.append(
            {"cost": name, "baseline": b, "variant": v, "ratio": _ratio(b, v), "source": source}
        )

    for key, label in (
        ("params", "params"),
        ("unique_params", "unique params"),
        ("train_flops_per_token", "train FLOPs/token"),
        ("total_train_flops", "total train FLOPs"),
    ):
        add(label, _num(base.entry.get(key)), _num(var.entry.get(key)), "plan")
    add("tokens/s", mb["tokens_per_s"], mv["tokens_per_s"], "measured")
    add("step time (s)", mb["step_time_s"], mv["step_time_s"], "measured")
    add("peak memory (GB)", mb["peak_memory_gb"], mv["peak_memory_gb"], "measured")
    add("optimizer state (GB)", mb["optimizer_state_gb"], mv["optimizer_state_gb"], "measured")
    add(
        "optimizer state (GB, plan)",
        _num(base.entry.get("optimizer_state_gb")),
        _num(var.entry.get("optimizer_state_gb")),
        "plan",
    )
    add("GPU-hours", mb["gpu_hours"], mv["gpu_hours"], "measured")
    add(
        "GPU-hours (plan)",
        _num(base.entry.get("gpu_hours")),
        _num(var.entry.get("gpu_hours")),
        "plan",
    )
    if mb["decode_latency_s"] is not None or mv["decode_latency_s"] is not None:
        add("decode latency (s)", mb["decode_latency_s"], mv["decode_latency_s"], "measured")
    if mb["kv_cache_bytes"] is not None or mv["kv_cache_bytes"] is not None:
        add("KV-cache bytes", mb["kv_cache_bytes"], mv["kv_cache_bytes"], "measured")

    def over(key: str) -> float | None:
        r = _ratio(mb[key], mv[key])
        return None if r is None else r - 1.0

    overhead = {
        "step_time": over("step_time_s"),
        "peak_memory": over("peak_memory_gb"),
        "decode_latency": over("decode_latency_s"),
    }
    return rows, overhead


def _eval_keys(run: RunData) -> list[str]:
    if run.metrics is None:
        return []
    return sorted(k for k in run.metrics.columns if k.startswith("eval/"))


def _looped(var: RunData, base: RunData, evals: Mapping[str, Aligned]) -> dict[str, Any] | None:
    arch = var.entry.get("architecture") or {}
    if "looped" not in arch or var.metrics is None:
        return None
    trained_b = int((arch.get("looped") or {}).get("loops") or 0)
    per_set: dict[str, dict[int, float]] = {}
    for key, col in var.metrics.columns.items():
        m = _LOOP_EVAL.match(key)
        if not m:
            continue
        ok = np.isfinite(col)
        if ok.any():
            per_set.setdefault(m.group(1), {})[int(m.group(2))] = float(col[ok][-1])
    sets: dict[str, Any] = {}
    for base_key, by_loop in per_set.items():
        loops = sorted(by_loop)
        at_b = by_loop.get(trained_b)
        if at_b is None:
            plain = evals.get(base_key)
            at_b = float(plain.variant[-1]) if plain is not None and len(plain) else None
        post = by_loop[loops[-1]] - at_b if at_b is not None and loops[-1] > trained_b else None
        base_ref = evals.get(base_key)
        sets[base_key] = {
            "loops": loops,
            "loss": [by_loop[n] for n in loops],
            "at_trained": at_b,
            "post_horizon_divergence": post,
            "baseline_final": float(base_ref.baseline[-1])
            if base_ref is not None and len(base_ref)
            else None,
        }
    hnorm: dict[int, float] = {}
    for key, col in var.metrics.columns.items():
        m = _H_NORM.match(key)
        ok = np.isfinite(col)
        if m and ok.any():
            tail = col[ok][-max(1, int(ok.sum()) // 10) :]
            hnorm[int(m.group(1))] = float(np.mean(tail))
    return {
        "trained_loops": trained_b,
        "sets": sets,
        "h_norm": dict(sorted(hnorm.items())),
        "unique_params": {
            "baseline": _num(base.entry.get("unique_params")),
            "variant": _num(var.entry.get("unique_params")),
        },
        "train_flops": {
            "baseline": _num(base.entry.get("total_train_flops")),
            "variant": _num(var.entry.get("total_train_flops")),
        },
    }


def compare_pair(results: Results, pair: Mapping[str, Any]) -> PairResult | None:
    """All comparisons of one pair (None when the plan does not know one of its runs)."""
    base = results.runs.get(str(pair.get("baseline_run")))
    var = results.runs.get(str(pair.get("variant_run")))
    if base is None or var is None:
        return None
    notes: list[str] = []
    budget = results.budget_match
    if "tokens" in (pair.get("differs") or []):
        budget = "flops"
    invalid = certificate_problems(base.entry, var.entry, budget)
    fp_bad, fp_note = results.fingerprint_check(base, var)
    invalid.extend(fp_bad)
    if fp_note:
        notes.append(fp_note)
    matched = min(base.max_tokens, var.max_tokens)
    train = common_grid(_curve(base, LOSS), _curve(var, LOSS))
    train_s = common_grid(_smoothed(base, LOSS), _smoothed(var, LOSS))
    evals: dict[str, Aligned] = {}
    for key in sorted(set(_eval_keys(base)) | set(_eval_keys(var))):
        if _LOOP_EVAL.match(key):
            continue
        al = match_points(_curve(base, key), _curve(var, key))
        if len(al):
            evals[key] = al
    res = PairResult(
        dict(pair), base, var, not invalid, invalid, notes, matched, train, train_s, evals
    )
    # FLOPs axis (budget matched on FLOPs: the arms train different token counts)
    if budget == "flops":
        fb, lb = cumulative_flops(
            base.tokens if base.tokens is not None else np.empty(0),
            _num(base.entry.get("train_flops_per_token")),
            base.column("throughput/total petaflops"),
        )
        fv, lv = cumulative_flops(
            var.tokens if var.tokens is not None else np.empty(0),
            _num(var.entry.get("train_flops_per_token")),
            var.column("throughput/total petaflops"),
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
    res.cost, res.overhead = _cost_rows(base, var)
    res.looped = _looped(var, base, evals)
    res.complete, res.incomplete_reason = _completeness(base, var)
    return res


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
        planned = _num(run.entry.get("tokens")) or _num(
            (run.entry.get("training") or {}).get("tokens")
        )
        if run.state == "completed":
            continue
        if planned and run.max_tokens >= planned:
            continue
        have = f"{run.max_tokens:.3g}" + (f"/{planned:.3g}" if planned else "")
        parts.append(f"{who} {run.run_id} is {run.state} at {have} tokens")
    return (not parts, "; ".join(parts))


# ----------------------------------------------------------------------------------------------
# gate evidence and consistency
# ----------------------------------------------------------------------------------------------


def gate_series(run_b: RunData, run_v: RunData, metric: str) -> Aligned:
    """The gate metric of two runs at identical token counts, one point per evaluation.

    Eval metrics are logged once per evaluation: their points are used as they are. A per-step
    metric (``train/CE loss``) is averaged over windows of ``evaluation.interval`` steps ending at
    the last common step, so that "the last n points" means the last n eval intervals, not the
    last n (very noisy) single steps.
    """
    al = match_points(_curve(run_b, metric), _curve(run_v, metric))
    if metric.startswith("eval/") or len(al) < 2:
        return al
    interval = int((run_b.entry.get("evaluation") or {}).get("interval") or 0)
    if interval <= 0:
        interval = max(1, len(al) // 20)
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
    metric, direction, last_n = str(g["metric"]), str(g["direction"]), int(g["last_n"])
    series = gate_series(res.baseline, res.variant, metric)
    imp = last_improvements(series, direction, last_n)
    tail = max(2 * last_n, 6)  # the jitter diagnostic fits a smooth curve through these
    ref_imp = None
    if g["rule"] == "quality_per_param":
        ref_imp = []
        if reference is not None:
            # improvement of the looped variant over the parameter-matched reference arm
            ref_imp = last_improvements(
                gate_series(reference.variant, res.variant, metric), direction, last_n
            )
    invalid = list(res.invalid_reasons)
    if reference is not None and not reference.valid:
        invalid.append(f"reference pair {reference.pair_id} is INVALID")
    if g["rule"] == "quality_per_param" and reference is not None:
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
            gate_series(r.baseline, r.variant, str(g["metric"])),
            str(g["direction"]),
            int(g["last_n"]),
        )
        if imp:
            by.setdefault((r.variant_name, r.size), []).append(imp)
    order = {s: i for i, s in enumerate(size_order)}
    rows: list[SizeRow] = []
    for (variant, size), points in sorted(
        by.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99))
    ):
        est = estimate(points, float(g["confidence"]), (noise_at or {}).get(size))
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
