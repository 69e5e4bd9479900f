"""The cost rows of a pair: planned (plan.json) beside measured (summary.json, else metrics).

Why both: a plan's FLOPs and parameter counts are exact but say nothing about the real step time
or memory; the measured values are what the gate's overhead limits are about. Each row names its
source, so a planned number is never read as a measurement.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from olmoablate.contract import metrics as names
from olmoablate.contract.runfiles import RunSummary
from olmoablate.report.read.collect import RunData
from olmoablate.report.read.timing import WALL


def _measured(run: RunData) -> dict[str, float | None]:
    """Measured cost of one arm: summary.json first, metrics as the fallback."""
    s = run.summary or RunSummary()

    def col_stat(key: str, fn: Any) -> float | None:
        c = run.column(key)
        if c is None or not np.isfinite(c).any():
            return None
        return float(fn(c[np.isfinite(c)]))

    step_time = s.mean_step_time_s
    if step_time is None:
        step_time = col_stat(WALL, lambda a: np.median(a[1:] if a.size > 1 else a))
    peak = s.peak_memory_gb
    if peak is None:
        peak = col_stat(names.PEAK_MEMORY_GB, np.max)
    tps = s.tokens_per_s
    if tps is None:
        tps = col_stat(names.DEVICE_TPS, np.median)
    opt = s.optimizer_state_bytes
    gpus, nodes = run.entry.topology.gpus_per_node, run.entry.topology.nodes
    wall = s.wall_time_s
    return {
        names.STEP_TIME: num(step_time),
        "peak_memory_gb": num(peak),
        "tokens_per_s": num(tps),
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
    add(
        "optimizer state (GB, plan)",
        num(be.optimizer_state_gb),
        num(ve.optimizer_state_gb),
        "plan",
    )
    add("GPU-hours", mb["gpu_hours"], mv["gpu_hours"], "measured")
    add(
        "GPU-hours (plan)",
        num(be.gpu_hours),
        num(ve.gpu_hours),
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
        "step_time": over(names.STEP_TIME),
        "peak_memory": over("peak_memory_gb"),
        "decode_latency": over("decode_latency_s"),
    }
    return rows, overhead
