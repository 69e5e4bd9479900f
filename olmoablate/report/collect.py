"""Load one results folder: ``plan.json`` plus each run's files, tolerating every gap.

Why only these files: results are often copied off a cluster (``rsync results/demo``) and reported
on a laptop, so nothing here touches Slurm, W&B or the spec beyond an optional re-read of the
gate block (:mod:`olmoablate.report.prereg`). Missing runs, missing files, truncated lines and
requeue duplicates become "data issues" in the report, never an exception. Metrics files are
parsed through the report's parse cache (:mod:`olmoablate.report.metric_cache`), and pairs' data
fingerprints compared through their cache (:mod:`olmoablate.report.fingerprints`), so re-running
the report while runs train parses only what was appended since the last report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from olmoablate.contract.gates import gate_entries, gate_views
from olmoablate.contract.metricsfile import Metrics
from olmoablate.errors import UserError
from olmoablate.io import read_json
from olmoablate.report import fingerprints
from olmoablate.report.align import Curve
from olmoablate.report.gate import gate_config
from olmoablate.report.metric_cache import Job, load_metrics_many
from olmoablate.report.prereg import check_gate_unchanged, resolve_gate

#: Metrics every run needs; eval, H-norm and loop keys are matched by prefix.
BASE_KEYS = (
    "tokens",
    "train/CE loss",
    "optim/total grad norm",
    "optim/step skipped",
    "throughput/total petaflops",
    "train/loops",
)
PREFIXES = ("eval/", "train/H norm")
#: Always read: steady-state step times give the step-time overhead its interval.
STEP_TIME_KEYS = ("step_time_s", "step_cpu_time_s", "step_in_attempt")


@dataclass
class RunData:
    """One run of the plan and whatever exists of its files."""

    run_id: str
    entry: dict[str, Any]
    directory: Path
    metrics: Metrics | None = None
    status: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    issues: list[str] = field(default_factory=list)
    #: per-run results computed once even when the run serves several pairs (a baseline)
    memo: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> str:
        if self.status and self.status.get("state"):
            return str(self.status["state"])
        return "missing" if self.metrics is None else "unknown"

    def column(self, key: str) -> np.ndarray | None:
        return None if self.metrics is None else self.metrics.get(key)

    def curve(self, key: str, x: str = "tokens") -> Curve:
        """``key`` against ``x`` (finite points), computed once per run: a baseline serves every
        variant of its (size, seed), and each pair asks for the same curves several times."""
        memo_key = f"curve:{x}:{key}"
        if memo_key not in self.memo:
            self.memo[memo_key] = Curve.of(self.column(x), self.column(key))
        return self.memo[memo_key]

    @property
    def tokens(self) -> np.ndarray | None:
        return self.column("tokens")

    @property
    def max_tokens(self) -> float:
        tok = self.tokens
        if tok is None or not np.isfinite(tok).any():
            return 0.0
        return float(np.nanmax(tok))

    @property
    def fingerprints_path(self) -> Path:
        return self.directory / "fingerprints.jsonl"


@dataclass
class Results:
    root: Path
    plan: dict[str, Any]
    gate: dict[str, Any]
    runs: dict[str, RunData]
    pairs: list[dict[str, Any]]
    issues: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cache_dir: Path | None = None
    #: fingerprint comparisons by the identity of both files (`report.fingerprints`)
    fp_cache: dict[str, list[Any]] = field(default_factory=dict)
    #: Why no verdict can be given (the pre-registered gate cannot be recovered), else None.
    prereg_broken: str | None = None
    #: variants decided by another gate of the plan (`gates:`): not exploratory here
    other_gated: list[str] = field(default_factory=list)

    def fingerprint_check(self, base: RunData, var: RunData) -> tuple[list[str], str]:
        """(problems, note) of the two arms' data fingerprints, cached across reports."""
        return fingerprints.check_cached(
            self.fp_cache, base.fingerprints_path, var.fingerprints_path
        )

    def save_cache(self) -> None:
        fingerprints.save_cache(self.cache_dir, self.fp_cache)

    @property
    def spec_name(self) -> str:
        return str(self.plan.get("spec_name") or self.root.name)

    @property
    def budget_match(self) -> str:
        return str((self.plan.get("budget") or {}).get("match") or "tokens")


def resolve_results_dir(spec: str, results_root: str | Path = "results") -> Path:
    """SPEC may be a results folder, a spec YAML file, or a spec name under ``results_root``."""
    p = Path(spec)
    if p.is_dir() and (p / "plan.json").is_file():
        return p
    name = spec
    if p.is_file():
        name = p.stem
        try:
            import yaml

            doc = yaml.safe_load(p.read_text(encoding="utf-8"))
            if isinstance(doc, dict) and isinstance(doc.get("name"), str):
                name = doc["name"]
        except Exception:  # noqa: BLE001 - an unreadable spec only loses the name lookup
            pass
    root = Path(results_root) / name
    if not (root / "plan.json").is_file():
        raise UserError(
            f"{root / 'plan.json'}: not found (SPEC {spec!r} is not a results folder, and no plan "
            f"under --results-root {results_root}); run `olmoablate plan {spec}` first"
        )
    return root


def load_plan(root: Path) -> dict[str, Any]:
    path = root / "plan.json"
    try:
        plan = read_json(path)
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: unreadable plan ({err.__class__.__name__}: {err})") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("runs"), list):
        raise UserError(f"{path}: field `runs` missing or not a list (not an olmoablate plan)")
    if not isinstance(plan.get("pairs", []), list):
        raise UserError(f"{path}: field `pairs` must be a list")
    return plan


def _want_spec(
    entry: Mapping[str, Any],
    summary: Mapping[str, Any] | None,
    gate_metric: str,
    budget_match: str = "tokens",
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    keys = [k for k in BASE_KEYS if k != "throughput/total petaflops"] + [gate_metric]
    if budget_match == "flops" or "looped" in (entry.get("architecture") or {}):
        keys.append("throughput/total petaflops")  # FLOPs axis: only where it is used
    s = summary or {}
    keys.extend(STEP_TIME_KEYS)  # per-step times: the gate's step-time overhead interval
    if s.get("peak_memory_gb") is None:
        keys.append("peak_memory_gb")
    if s.get("tokens_per_s") is None:
        keys.append("throughput/device/TPS")
    return tuple(sorted(set(keys))), PREFIXES


def _read_optional_json(path: Path, issues: list[str]) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        obj = read_json(path)
    except (OSError, ValueError) as err:
        issues.append(f"{path}: unreadable ({err.__class__.__name__}); ignored")
        return None
    if not isinstance(obj, dict):
        issues.append(f"{path}: not a JSON object; ignored")
        return None
    return obj


def collect(root: Path, *, use_cache: bool = True, workers: int | None = None) -> Results:
    """Everything the report needs from ``root`` (= results/<spec>)."""
    plan = load_plan(root)
    views = gate_views(plan)
    first = views[0][1] if views else plan  # the first gate (of `gates:`), where `gate:` is
    prereg = resolve_gate(first, root)
    gate = gate_config(prereg.gate)
    other_metrics = {str(gate_config(e.get("gate"))["metric"]) for e in gate_entries(plan)[1:]}
    issues: list[str] = []
    runs: dict[str, RunData] = {}
    jobs: list[Job] = []
    for entry in plan["runs"]:
        if not isinstance(entry, dict) or not entry.get("run_id"):
            issues.append("plan.json: a run entry without run_id was skipped")
            continue
        rid = str(entry["run_id"])
        rd = RunData(rid, entry, root / "runs" / rid)
        rd.status = _read_optional_json(rd.directory / "status.json", rd.issues)
        rd.summary = _read_optional_json(rd.directory / "summary.json", rd.issues)
        mpath = rd.directory / "metrics.jsonl"
        if mpath.is_file():
            budget = str((plan.get("budget") or {}).get("match") or "tokens")
            keys, prefixes = _want_spec(entry, rd.summary, str(gate["metric"]), budget)
            keys = tuple(sorted(set(keys) | other_metrics))  # the metrics of further gates
            jobs.append((rid, mpath, keys, prefixes))
        elif rd.directory.is_dir():
            rd.issues.append(f"{rid}: no metrics.jsonl yet (state {rd.state})")
        else:
            rd.issues.append(f"{rid}: run directory missing (not submitted or not copied)")
        runs[rid] = rd
    cache_dir = root / ".report-cache" if use_cache else None
    for rid, m in load_metrics_many(jobs, cache_dir, workers).items():
        runs[rid].metrics = m
        runs[rid].issues.extend(f"{rid}: {i}" for i in m.issues)
    pairs = [p for p in plan.get("pairs", []) if isinstance(p, dict)]
    for p in pairs:
        for arm in ("baseline_run", "variant_run"):
            if p.get(arm) not in runs:
                issues.append(f"pair {p.get('pair_id')}: {arm} {p.get(arm)!r} is not in plan runs")
    for rd in runs.values():
        issues.extend(rd.issues)
    warnings = check_gate_unchanged(first, root) + prereg.warnings
    fp_cache = fingerprints.load_cache(cache_dir)
    out = Results(root, plan, gate, runs, pairs, issues, warnings, cache_dir, fp_cache)
    out.prereg_broken = prereg.broken
    return out
