"""Load one results folder: ``plan.json`` plus each run's files, tolerating every gap.

Why only these files: results are often copied off a cluster (``rsync results/demo``) and reported
on a laptop, so nothing here touches Slurm, W&B or the spec beyond an optional re-read of the
gate block (:mod:`olmoablate.report.read.prereg`). Missing runs, missing files, truncated lines and
requeue duplicates become "data issues" in the report, never an exception. Metrics files are
read through the metrics store (:mod:`olmoablate.report.read.metrics_store`), and pairs' data
fingerprints compared through their cache (:mod:`olmoablate.report.read.fingerprints`), so re-running
the report while runs train parses only what was appended since the last report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from olmoablate.contract import metrics as names
from olmoablate.contract.layout import ResultsDir, RunDir, resolve_results
from olmoablate.contract.metricsfile import Metrics
from olmoablate.contract.plan import Pair, Plan, RunEntry
from olmoablate.contract.runfiles import RunFile, RunStatus, RunSummary
from olmoablate.contract.runstates import RunState
from olmoablate.contract.schema import Gate
from olmoablate.errors import UserError
from olmoablate.io import read_json
from olmoablate.report.read import fingerprints
from olmoablate.report.read.curve import Curve
from olmoablate.report.read.metrics_store import Job, load_metrics_many
from olmoablate.report.read.prereg import check_gate_unchanged, resolve_gate
from olmoablate.report.read.reuse import reuse_problems
from olmoablate.report.read.timing import ATTEMPT, CPU, WALL

#: Metrics every run needs; eval, H-norm and loop keys are matched by prefix.
BASE_KEYS = (
    "tokens",
    names.CE_LOSS,
    names.GRAD_NORM,
    names.STEP_SKIPPED,
    names.TOTAL_PFLOPS,
    names.LOOPS,
)
PREFIXES = (names.EVAL_PREFIX, names.H_NORM_PREFIX)
#: Always read: steady-state step times give the step-time overhead its interval.
STEP_TIME_KEYS = (WALL, CPU, ATTEMPT)


@dataclass
class RunData:
    """One run of the plan and whatever exists of its files."""

    entry: RunEntry
    dir: RunDir
    metrics: Metrics | None = None
    status: RunStatus | None = None
    summary: RunSummary | None = None
    issues: list[str] = field(default_factory=list)
    #: per-run results computed once even when the run serves several pairs (a baseline)
    memo: dict[str, Any] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.entry.run_id

    @property
    def directory(self) -> Path:
        return self.dir.path

    @property
    def state(self) -> str:
        if self.status and self.status.state:
            return self.status.state
        return RunState.MISSING if self.metrics is None else RunState.UNKNOWN

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


@dataclass
class Results:
    """A results folder as the report reads it: the typed plan, the gate being decided, and
    every planned run with its files."""

    layout: ResultsDir
    plan: Plan
    gate: Gate
    runs: dict[str, RunData]
    issues: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cache_dir: Path | None = None
    #: fingerprint comparisons by the identity of both files (`report.read.fingerprints`)
    fp_cache: dict[str, list[Any]] = field(default_factory=dict)
    #: fingerprint files read by this report (each read once: `report.read.fingerprints.Reads`)
    fp_reads: fingerprints.Reads = field(default_factory=fingerprints.Reads)
    #: Why no verdict can be given (the pre-registered gate cannot be recovered), else None.
    prereg_broken: str | None = None
    #: variants decided by another gate of the plan (`gates:`): not exploratory here
    other_gated: list[str] = field(default_factory=list)
    #: run_id -> why the run reused from another spec cannot stand for it (`report.read.reuse`)
    reuse_problems: dict[str, list[str]] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.layout.root

    @property
    def pairs(self) -> list[Pair]:
        return self.plan.pairs

    def fingerprint_check(self, base: RunData, var: RunData) -> tuple[list[str], str]:
        """(problems, note) of the two arms' data fingerprints, cached across reports."""
        return fingerprints.check_cached(
            self.fp_cache, base.dir.fingerprints, var.dir.fingerprints, self.fp_reads
        )

    def save_cache(self) -> None:
        fingerprints.save_cache(self.cache_dir, self.fp_cache)

    @property
    def spec_name(self) -> str:
        return self.plan.spec_name

    @property
    def budget_match(self) -> str:
        return self.plan.budget.match


def resolve_results_dir(spec: str, results_root: str | Path = "results") -> ResultsDir:
    """SPEC (a results folder, plan.json, spec file or spec name) -> its results folder, with a
    one-line error (naming what to run) when it holds no plan yet."""
    layout = resolve_results(spec, results_root)
    if not layout.plan_path.is_file():
        raise UserError(
            f"{layout.plan_path}: not found (SPEC {spec!r} is not a results folder, and no plan "
            f"under --results-root {results_root}); run `olmoablate plan {spec}` first"
        )
    return layout


def _want_spec(
    entry: RunEntry,
    summary: RunSummary | None,
    gate_metric: str,
    budget_match: str = "tokens",
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    keys = [k for k in BASE_KEYS if k != names.TOTAL_PFLOPS] + [gate_metric]
    if budget_match == "flops" or entry.architecture.looped is not None:
        keys.append(names.TOTAL_PFLOPS)  # FLOPs axis: only where it is used
    s = summary or RunSummary()
    keys.extend(STEP_TIME_KEYS)  # per-step times: the gate's step-time overhead interval
    if s.peak_memory_gb is None:
        keys.append(names.PEAK_MEMORY_GB)
    if s.tokens_per_s is None:
        keys.append(names.DEVICE_TPS)
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


def _read_typed(model: type[RunFile], path: Path, issues: list[str]) -> Any:
    """A run file typed by the contract; a bad one is a data issue, never an exception."""
    try:
        return model.of(_read_optional_json(path, issues), str(path))
    except UserError as err:
        issues.append(f"{err}; ignored")
        return None


#: The gate of a plan without one (a spec may leave `gate:` out): the schema's defaults at
#: stage 1B, what the report has always used there.
UNGATED = Gate(stage="1B")


def collect(
    root: Path | ResultsDir, *, use_cache: bool = True, workers: int | None = None
) -> Results:
    """Everything the report needs from ``root`` (= results/<spec>)."""
    layout = root if isinstance(root, ResultsDir) else ResultsDir(root)
    plan = layout.plan
    views = plan.gate_views()
    first = views[0][1] if views else plan  # the first gate (of `gates:`), where `gate:` is
    prereg = resolve_gate(first)
    gate = prereg.gate or UNGATED
    other_metrics = {e.gate.metric for e in plan.gates[1:]}
    issues: list[str] = []
    runs: dict[str, RunData] = {}
    jobs: list[Job] = []
    for entry in plan.runs:
        rid = entry.run_id
        rd = RunData(entry, layout.run(rid))
        rd.status = _read_typed(RunStatus, rd.dir.status, rd.issues)
        rd.summary = _read_typed(RunSummary, rd.dir.summary, rd.issues)
        if rd.dir.metrics.is_file():
            keys, prefixes = _want_spec(entry, rd.summary, gate.metric, plan.budget.match)
            keys = tuple(sorted(set(keys) | other_metrics))  # the metrics of further gates
            jobs.append((rid, rd.dir.metrics, keys, prefixes))
        elif rd.directory.is_dir():
            rd.issues.append(f"{rid}: no metrics.jsonl yet (state {rd.state})")
        else:
            rd.issues.append(f"{rid}: run directory missing (not submitted or not copied)")
        runs[rid] = rd
    cache_dir = layout.report_cache if use_cache else None
    fp_cache = fingerprints.load_cache(cache_dir)
    # the pairs' data-order checks read ~100 bytes per step of both arms: done meanwhile
    background = fingerprints.Background(
        fp_cache,
        [
            (layout.run(p.baseline_run).fingerprints, layout.run(p.variant_run).fingerprints)
            for p in plan.pairs
        ],
    )
    for rid, m in load_metrics_many(jobs, use_cache, workers).items():
        runs[rid].metrics = m
        runs[rid].issues.extend(f"{rid}: {i}" for i in m.issues)
    for p in plan.pairs:
        for arm, rid in (("baseline_run", p.baseline_run), ("variant_run", p.variant_run)):
            if rid not in runs:
                issues.append(f"pair {p.pair_id}: {arm} {rid!r} is not in plan runs")
    for rd in runs.values():
        issues.extend(rd.issues)
    warnings = check_gate_unchanged(first) + prereg.warnings
    background.merge_into(fp_cache)
    out = Results(layout, plan, gate, runs, issues, warnings, cache_dir, fp_cache)
    out.prereg_broken = prereg.broken
    out.reuse_problems = reuse_problems(layout, plan)
    out.issues.extend(f"{rid}: {p}" for rid, ps in out.reuse_problems.items() for p in ps)
    return out
