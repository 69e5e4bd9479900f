"""Load one results folder: ``plan.json`` plus each run's files, tolerating every gap.

Results are often copied off a cluster and reported on a laptop, so nothing here touches Slurm,
W&B or the spec beyond an optional re-read of the gate block (:mod:`.prereg`). Missing runs and
files, truncated lines and requeue duplicates become data issues, never an exception.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from olmoablate.errors import UserError
from olmoablate.io import read_json
from olmoablate.plan import metrics as names
from olmoablate.plan.gate import Gate
from olmoablate.plan.layout import ResultsDir, RunDir, resolve_results
from olmoablate.plan.names import RunState
from olmoablate.plan.planfile import Pair, Plan, RunEntry
from olmoablate.report import fingerprints
from olmoablate.report.prereg import check_gate_unchanged, resolve_gate, reuse_problems
from olmoablate.run import columnar
from olmoablate.run.files import RunFile, RunStatus, RunSummary
from olmoablate.run.metricsfile import Metrics, append, read_metrics, read_part


@dataclass
class Curve:
    """y(x) of one arm, finite points only, sorted by x: built once per metric of a run
    (:meth:`RunData.curve`), read by every comparison."""

    x: np.ndarray
    y: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray | None, y: np.ndarray | None) -> Curve:
        if x is None or y is None:
            return cls(np.empty(0), np.empty(0))
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        keep = np.isfinite(x) & np.isfinite(y)
        if not keep.all():
            x, y = x[keep], y[keep]
        if x.size > 1 and not np.all(x[1:] >= x[:-1]):  # metrics are sorted by step already
            order = np.argsort(x, kind="stable")
            x, y = x[order], y[order]
        return cls(x, y)

    def __len__(self) -> int:
        return int(self.x.size)


def cumulative_flops(
    tokens: np.ndarray, flops_per_token: float | None, petaflops: np.ndarray | None
) -> tuple[np.ndarray | None, str]:
    """Cumulative training FLOPs per metrics row and how they were obtained: OLMo-core's total
    petaflops (exact under a loop curriculum), else tokens x the plan's FLOPs/token. The one
    FLOPs axis of the comparisons and the notebook frames."""
    if petaflops is not None and np.isfinite(petaflops).sum() >= 2:
        pf = np.asarray(petaflops, dtype=float) * 1e15
        # fill rows without the metric (SpeedMonitor starts at step 2) by tokens-proportional
        ok = np.isfinite(pf)
        if not ok.all():
            pf = np.interp(tokens, tokens[ok], pf[ok])
        return pf, "measured (throughput/total petaflops)"
    if flops_per_token:
        return np.asarray(tokens, dtype=float) * float(flops_per_token), (
            "estimated (tokens x plan train_flops_per_token)"
        )
    return None, "unavailable"


#: The job's per-step timing columns (named in plan.metrics): wall time, process CPU time, and the
#: step's index within its attempt (1 after a resume); the overhead statistic reads them back.
WALL, CPU, ATTEMPT = names.STEP_TIME, names.STEP_CPU_TIME, names.STEP_IN_ATTEMPT


# The metrics store: each metrics.jsonl is read through its one cache, the job's columnar copy
# (olmoablate.run.columnar), plus only the rows appended since; a stale or far-behind copy is
# rebuilt for the next reader. Every answer equals read_metrics of the whole file.


#: One metrics file to load: (run id, metrics.jsonl, wanted keys, wanted key prefixes).
Job = tuple[str, Path, tuple[str, ...], tuple[str, ...]]
Want = Callable[[str], bool]

#: Rows appended after the copy up to this many (twice what a running job leaves between its
#: updates: a few ms to parse) are parsed on each read; more (a job that died, or one of a
#: release without copies) and the copy is brought up to date once. Below this, a report of a
#: ladder in training never rewrites the copies the jobs are keeping.
REFRESH_ROWS = 2 * columnar.ROWS_PER_UPDATE
#: Appended bytes up to this size are parsed in the main process (no pool start-up).
_INCREMENTAL_MAX = 8 * 2**20


def wanted(keys: tuple[str, ...], prefixes: tuple[str, ...]) -> Want:
    """The filter of a job's keys: the named keys and every key starting with a prefix."""
    keep = frozenset(keys)
    return lambda k: k in keep or k.startswith(prefixes)


def select(m: Metrics, want: Want | None) -> Metrics:
    """``m`` with only the wanted columns (what a parse with ``want`` gives)."""
    if want is None:
        return m
    cols = {k: v for k, v in m.columns.items() if want(k)}
    nonfinite = {k: v for k, v in m.nonfinite.items() if want(k)}
    return Metrics(m.steps, cols, m.issues, m.rows_read, m.duplicate_rows, nonfinite)


def _joined(path: Path, want: Want | None, body: Metrics, tail: Metrics) -> Metrics:
    """Body + unterminated last line; a last line that repeats a step needs the full parse."""
    out = append(body, tail)
    return out if out is not None else read_metrics(path, want)


def from_copy(path: Path, want: Want | None) -> Metrics | None:
    """The wanted columns of ``path`` from its copy plus the rows appended after it, or None
    when only a full parse is exact or cheap (no valid copy, a large or overlapping tail)."""
    copy = columnar.load_copy(path, want)
    if copy is None:
        return None
    body, offset, lines = copy
    try:
        if path.stat().st_size - offset > _INCREMENTAL_MAX:
            return None
    except OSError:
        return None
    part = read_part(path, want, offset, lines)
    grown = append(body, part.body)
    if grown is None:
        return None
    if part.lines > REFRESH_ROWS:
        # far behind (a job of an older release left it, or the job died): bring it up to date
        # once, rather than parse the same rows on every read
        columnar.refresh(path)
    return _joined(path, want, grown, part.tail)


def rebuild(path: Path, want: Want | None) -> Metrics:
    """Parse the whole file (every key), write its copy, answer the wanted columns."""
    if not columnar.available():  # no copy to be had here: parse only what is wanted
        return read_metrics(path, want)
    part = columnar.refresh(path)
    return _joined(path, want, select(part.body, want), select(part.tail, want))


def load_run(path: Path, want: Want | None = None, *, use_cache: bool = True) -> Metrics:
    """One run's metrics (the wanted keys): from the copy where it is current, else parsed."""
    if not use_cache:
        return read_metrics(path, want)
    got = from_copy(path, want)
    return got if got is not None else rebuild(path, want)


def _parse_job(path: str, keys: tuple[str, ...], prefixes: tuple[str, ...]) -> Metrics:
    return read_metrics(path, wanted(keys, prefixes))


def _rebuild_job(path: str, keys: tuple[str, ...], prefixes: tuple[str, ...]) -> Metrics:
    return rebuild(Path(path), wanted(keys, prefixes))


def load_metrics_many(
    jobs: list[Job],
    use_cache: bool = True,
    workers: int | None = None,
    min_parallel_bytes: int = 32 * 2**20,
) -> dict[str, Metrics]:
    """Many runs' metrics (the report's read): copies reused and extended; files parsed from
    scratch (all of them with ``use_cache=False``, no copy written) go through a process pool."""
    out: dict[str, Metrics] = {}
    todo: list[Job] = []
    for run_id, path, keys, prefixes in jobs:
        got = from_copy(path, wanted(keys, prefixes)) if use_cache else None
        if got is not None:
            out[run_id] = got
        else:
            todo.append((run_id, path, keys, prefixes))
    n_workers = workers if workers is not None else min(len(todo), os.cpu_count() or 1, 8)
    total = sum(t[1].stat().st_size for t in todo)
    fn = _rebuild_job if use_cache else _parse_job
    if n_workers > 1 and len(todo) > 1 and total >= min_parallel_bytes:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx) as pool:
            futures = {t[0]: pool.submit(fn, str(t[1]), t[2], t[3]) for t in todo}
            out.update({rid: f.result() for rid, f in futures.items()})
    else:
        out.update({t[0]: fn(str(t[1]), t[2], t[3]) for t in todo})
    return {run_id: out[run_id] for run_id, *_ in jobs}


#: Metrics every run needs; eval, H-norm and loop keys are matched by prefix.
BASE_KEYS = (
    "tokens", names.CE_LOSS, names.GRAD_NORM, names.STEP_SKIPPED, names.TOTAL_PFLOPS, names.LOOPS,
)  # fmt: skip
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

    def once(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()``, computed once per run: a baseline serves every variant of its (size,
        seed), and each pair asks for the same curves and statistics several times."""
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]

    def curve(self, key: str, x: str = "tokens") -> Curve:
        """``key`` against ``x`` (finite points)."""
        return self.once(f"curve:{x}:{key}", lambda: Curve.of(self.column(x), self.column(key)))

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
    #: fingerprint comparisons by the identity of both files (:mod:`.fingerprints`)
    fp_cache: dict[str, list[Any]] = field(default_factory=dict)
    #: fingerprint files read by this report (each read once)
    fp_reads: fingerprints.Reads = field(default_factory=fingerprints.Reads)
    #: Why no verdict can be given (the pre-registered gate cannot be recovered), else None.
    prereg_broken: str | None = None
    #: variants decided by another gate of the plan (`gates:`): not exploratory here
    other_gated: list[str] = field(default_factory=list)
    #: run_id -> why the run reused from another spec cannot stand for it (:mod:`.prereg`)
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


def nonfinite_evals(m: Metrics) -> dict[str, int]:
    """{eval metric: rows where metrics.jsonl holds it as NaN/inf}, sorted by name: what the
    data issues, the stability table and the gate say of values the curves leave out."""
    return {k: n for k, n in sorted(m.nonfinite.items()) if names.is_eval(k) and n}


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
    fps = [(layout.run(p.baseline_run), layout.run(p.variant_run)) for p in plan.pairs]
    fps = [(b.fingerprints, v.fingerprints) for b, v in fps]
    background = fingerprints.Background(fp_cache, fps)
    for rid, m in load_metrics_many(jobs, use_cache, workers).items():
        runs[rid].metrics = m
        runs[rid].issues.extend(f"{rid}: {i}" for i in m.issues)
        runs[rid].issues.extend(
            f"{rid}: metrics.jsonl holds {key} as NaN/inf at {n} point(s): left out of the "
            "curves; a pair whose gate metric has one is kept out of the gate"
            for key, n in nonfinite_evals(m).items()
        )
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


def wandb_links(results: Results) -> dict[str, dict[str, Any]]:
    """run_id -> the W&B record of that run (runs/<id>/wandb.json, written by the job: the
    report works offline), for runs that logged to W&B."""
    out: dict[str, dict[str, Any]] = {}
    for rid, run in results.runs.items():
        path = run.dir.wandb
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict):
            out[rid] = rec
    return out


def wandb_section(
    results: Results,
) -> tuple[str, str, list[tuple[list[str], list[list[Any]]]]] | None:
    """The report's "W&B runs" section (None when no run logged to W&B)."""
    links = wandb_links(results)
    if not links:
        return None
    rows = []
    for rid, rec in links.items():
        where = rec.get("url") or (
            f"offline: wandb sync {results.runs[rid].directory / 'wandb' / 'wandb'}/offline-run-*"
        )
        rows.append([rid, rec.get("job_type"), rec.get("group"), rec.get("id"), where])
    text = (
        "One W&B run per arm (the same run across requeues); every metric is charted against "
        "tokens, and train FLOPs is logged for a compute axis."
    )
    return ("W&B runs", text, [(["run", "arm", "group", "W&B id", "link"], rows)])
