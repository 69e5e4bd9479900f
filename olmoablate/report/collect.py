"""Load one results folder: ``plan.json`` plus each run's files, tolerating every gap.

Why only these files: results are often copied off a cluster (``rsync results/demo``) and reported
on a laptop, so nothing here touches Slurm, W&B or the spec beyond an optional re-read of the
gate block. Missing runs, missing files, truncated lines and requeue duplicates become "data
issues" in the report, never an exception. Metrics files are parsed in parallel (one process per
core) and cached per run in ``.report-cache/`` keyed by file identity, so re-running the report
while training continues only re-reads files that changed.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from olmoablate.errors import UserError
from olmoablate.io import read_json, sha256_of, write_bytes_atomic
from olmoablate.report.gate import gate_config
from olmoablate.report.jsonl import Metrics, read_metrics

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
#: Read from metrics only when summary.json lacks the measured value.
COST_KEYS = ("step_time_s", "peak_memory_gb", "throughput/device/TPS")
_CACHE_VERSION = 1


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

    @property
    def tokens(self) -> np.ndarray | None:
        return self.column("tokens")

    @property
    def max_tokens(self) -> float:
        tok = self.tokens
        if tok is None or not np.isfinite(tok).any():
            return 0.0
        return float(np.nanmax(tok))

    def fingerprint_identity(self) -> list[int] | None:
        """(size, mtime, inode) of fingerprints.jsonl: the key of cached comparisons."""
        path = self.directory / "fingerprints.jsonl"
        try:
            st = path.stat()
        except OSError:
            return None
        return [st.st_size, st.st_mtime_ns, st.st_ino]

    def fingerprint_bytes(self) -> bytes | None:
        """Complete lines of fingerprints.jsonl (a torn last line is dropped), or None."""
        path = self.directory / "fingerprints.jsonl"
        if not path.is_file():
            return None
        data = path.read_bytes()
        return data[: data.rfind(b"\n") + 1]


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
    #: fingerprint comparisons by the identity of both files: [problems, note]
    fp_cache: dict[str, list[Any]] = field(default_factory=dict)

    def fingerprint_check(self, base: RunData, var: RunData) -> tuple[list[str], str]:
        """Compare two arms' data fingerprints, reusing the cached answer for unchanged files
        (each file is ~100 bytes per step, and a baseline serves several pairs)."""
        from olmoablate.report.compare import fingerprint_problems

        ib, iv = base.fingerprint_identity(), var.fingerprint_identity()
        key = sha256_of([_CACHE_VERSION, ib, iv])
        if ib is not None and iv is not None and key in self.fp_cache:
            problems, note = self.fp_cache[key]
            return list(problems), str(note)
        problems, note = fingerprint_problems(base.fingerprint_bytes(), var.fingerprint_bytes())
        if ib is not None and iv is not None:
            self.fp_cache[key] = [problems, note]
        return problems, note

    def save_cache(self) -> None:
        if self.cache_dir is None:
            return
        try:
            write_bytes_atomic(
                self.cache_dir / "fingerprints.json", json.dumps(self.fp_cache).encode("utf-8")
            )
        except OSError:
            pass

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
    if s.get("mean_step_time_s") is None:
        keys.append("step_time_s")
    if s.get("peak_memory_gb") is None:
        keys.append("peak_memory_gb")
    if s.get("tokens_per_s") is None:
        keys.append("throughput/device/TPS")
    return tuple(sorted(set(keys))), PREFIXES


def _parse_job(path: str, keys: tuple[str, ...], prefixes: tuple[str, ...]) -> Metrics:
    wanted = frozenset(keys)
    return read_metrics(path, lambda k: k in wanted or k.startswith(prefixes))


def _cache_key(path: Path, keys: tuple[str, ...], prefixes: tuple[str, ...]) -> str:
    st = path.stat()
    return sha256_of([_CACHE_VERSION, st.st_size, st.st_mtime_ns, st.st_ino, keys, prefixes])


def _cache_load(cache: Path, key: str) -> Metrics | None:
    try:
        with np.load(cache, allow_pickle=False) as z:
            meta = json.loads(str(z["__meta__"]))
            if meta.get("key") != key:
                return None
            cols = {name: z[f"c{i}"] for i, name in enumerate(meta["columns"])}
            return Metrics(
                z["steps"],
                cols,
                list(meta["issues"]),
                int(meta["rows_read"]),
                int(meta["duplicate_rows"]),
                dict(meta["nonfinite"]),
            )
    except (OSError, KeyError, ValueError):
        return None


def _cache_store(cache: Path, key: str, m: Metrics) -> None:
    names = sorted(m.columns)
    meta = {
        "key": key,
        "columns": names,
        "issues": m.issues,
        "rows_read": m.rows_read,
        "duplicate_rows": m.duplicate_rows,
        "nonfinite": m.nonfinite,
    }
    buf = io.BytesIO()
    arrays = {f"c{i}": m.columns[n] for i, n in enumerate(names)}
    np.savez(buf, steps=m.steps, __meta__=np.array(json.dumps(meta)), **arrays)
    try:
        write_bytes_atomic(cache, buf.getvalue())
    except OSError:
        pass  # a read-only results copy still gets its report


def load_metrics_many(
    jobs: list[tuple[str, Path, tuple[str, ...], tuple[str, ...]]],
    cache_dir: Path | None,
    workers: int | None = None,
    min_parallel_bytes: int = 32 * 2**20,
) -> dict[str, Metrics]:
    """Parse many metrics files; cached results are reused, the rest run in a process pool."""
    out: dict[str, Metrics] = {}
    todo: list[tuple[str, Path, tuple[str, ...], tuple[str, ...], str]] = []
    for run_id, path, keys, prefixes in jobs:
        key = _cache_key(path, keys, prefixes)
        hit = _cache_load(cache_dir / f"{run_id}.npz", key) if cache_dir else None
        if hit is not None:
            out[run_id] = hit
        else:
            todo.append((run_id, path, keys, prefixes, key))
    n_workers = workers if workers is not None else min(len(todo), os.cpu_count() or 1, 8)
    total = sum(t[1].stat().st_size for t in todo)
    if n_workers > 1 and len(todo) > 1 and total >= min_parallel_bytes:
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx) as pool:
            futures = {t[0]: pool.submit(_parse_job, str(t[1]), t[2], t[3]) for t in todo}
            parsed = {rid: f.result() for rid, f in futures.items()}
    else:
        parsed = {t[0]: _parse_job(str(t[1]), t[2], t[3]) for t in todo}
    for run_id, _path, _k, _p, key in todo:
        out[run_id] = parsed[run_id]
        if cache_dir is not None:
            _cache_store(cache_dir / f"{run_id}.npz", key, parsed[run_id])
    return out


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


def check_gate_unchanged(plan: Mapping[str, Any], root: Path) -> list[str]:
    """Loud warnings when the gate was edited after planning (pre-registration lock)."""
    out: list[str] = []
    gate = plan.get("gate")
    if gate is not None and plan.get("gate_sha256") and sha256_of(gate) != plan["gate_sha256"]:
        out.append(
            "GATE CHANGED: plan.json's gate block does not match its recorded gate_sha256 "
            "(plan.json was edited after planning)"
        )
    spec_path = plan.get("spec_path")
    if not spec_path:
        return out
    candidates = [Path(spec_path)]
    if plan.get("workdir"):
        candidates.insert(0, Path(plan["workdir"]) / spec_path)
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        return out
    try:
        import yaml

        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except Exception as err:  # noqa: BLE001 - reported, never fatal
        out.append(f"spec {path}: could not re-read to check the gate ({err.__class__.__name__})")
        return out
    raw = doc.get("gate") if isinstance(doc, dict) else None
    if plan.get("gate_raw_sha256"):
        changed = sha256_of(raw) != plan["gate_raw_sha256"]
    elif plan.get("gate_sha256") and sha256_of(raw) == plan["gate_sha256"]:
        changed = False
    else:
        changed = gate_config(raw if isinstance(raw, dict) else {}) != gate_config(gate or {})
    if changed:
        out.append(
            f"GATE CHANGED AFTER PLANNING: the gate block in {path} differs from the one recorded "
            "in plan.json; this report uses the recorded (pre-registered) gate"
        )
    return out


def collect(root: Path, *, use_cache: bool = True, workers: int | None = None) -> Results:
    """Everything the report needs from ``root`` (= results/<spec>)."""
    plan = load_plan(root)
    gate = gate_config(plan.get("gate"))
    issues: list[str] = []
    runs: dict[str, RunData] = {}
    jobs: list[tuple[str, Path, tuple[str, ...], tuple[str, ...]]] = []
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
    warnings = check_gate_unchanged(plan, root)
    fp_cache: dict[str, list[Any]] = {}
    if cache_dir is not None and (cache_dir / "fingerprints.json").is_file():
        try:
            loaded = json.loads((cache_dir / "fingerprints.json").read_text(encoding="utf-8"))
            fp_cache = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            fp_cache = {}
    return Results(root, plan, gate, runs, pairs, issues, warnings, cache_dir, fp_cache)


def iter_pairs(results: Results, sizes: Iterable[str] | None = None) -> list[dict[str, Any]]:
    wanted = set(sizes) if sizes is not None else None
    return [p for p in results.pairs if wanted is None or p.get("size") in wanted]
