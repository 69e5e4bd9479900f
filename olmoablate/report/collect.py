"""Load one results folder: ``plan.json`` plus each run's files, tolerating every gap.

Why only these files: results are often copied off a cluster (``rsync results/demo``) and reported
on a laptop, so nothing here touches Slurm, W&B or the spec beyond an optional re-read of the
gate block. Missing runs, missing files, truncated lines and requeue duplicates become "data
issues" in the report, never an exception. Metrics files are parsed in parallel (one process per
core) and cached per run in ``.report-cache/``; a cold report starts from the columnar copy the
training job keeps (``metrics.parquet``, :mod:`olmoablate.contract.columnar`) when it still matches the
file, so only rows written after it are parsed; since the files are append-only while runs train,
re-running the report parses only the rows (and compares only the data fingerprints) appended
since the last report, with the same numbers as a parse from scratch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from olmoablate.contract.columnar import load_copy
from olmoablate.contract.columnar import probe as _probe
from olmoablate.contract.gates import gate_entries, gate_views
from olmoablate.contract.metricsfile import Metrics, Part, append, read_metrics, read_part
from olmoablate.errors import UserError
from olmoablate.io import read_json, sha256_of, write_bytes_atomic
from olmoablate.report.gate import gate_config
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
#: Read from metrics only when summary.json lacks the measured value.
COST_KEYS = ("step_time_s", "peak_memory_gb", "throughput/device/TPS")
#: Always read: steady-state step times give the step-time overhead its interval.
STEP_TIME_KEYS = ("step_time_s", "step_cpu_time_s", "step_in_attempt")
_CACHE_VERSION = 2


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
    #: Why no verdict can be given (the pre-registered gate cannot be recovered), else None.
    prereg_broken: str | None = None
    #: variants decided by another gate of the plan (`gates:`): not exploratory here
    other_gated: list[str] = field(default_factory=list)

    def fingerprint_check(self, base: RunData, var: RunData) -> tuple[list[str], str]:
        """Compare two arms' data fingerprints, reusing the cached answer for unchanged files
        (each file is ~100 bytes per step, and a baseline serves several pairs), and, while
        runs train, comparing only the lines appended since the last matching check."""
        from olmoablate.report.compare import fingerprint_problems

        ib, iv = base.fingerprint_identity(), var.fingerprint_identity()
        key = sha256_of([_CACHE_VERSION, ib, iv])
        if ib is not None and iv is not None and key in self.fp_cache:
            problems, note = self.fp_cache[key]
            return list(problems), str(note)
        pb = base.directory / "fingerprints.jsonl"
        pv = var.directory / "fingerprints.jsonl"
        prefix_key = sha256_of([_CACHE_VERSION, "prefix", str(pb), str(pv)])
        if ib is not None and iv is not None:
            grown = _fingerprints_grown(pb, pv, self.fp_cache.get(prefix_key))
            if grown is not None:
                n_common, entry = grown
                note = f"data fingerprints match on {n_common} common steps"
                if n_common == 0:
                    note = "data order unverified: no common fingerprint steps yet"
                self.fp_cache[key] = [[], note]
                self.fp_cache[prefix_key] = entry
                return [], note
        data_b, data_v = base.fingerprint_bytes(), var.fingerprint_bytes()
        problems, note = fingerprint_problems(data_b, data_v)
        if ib is not None and iv is not None:
            self.fp_cache[key] = [problems, note]
            self.fp_cache.pop(prefix_key, None)
            if not problems and data_b is not None and data_v is not None:
                entry = _fingerprint_prefix(pb, pv, data_b, data_v)
                if entry is not None:
                    self.fp_cache[prefix_key] = entry
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


def _complete_end(path: Path) -> int:
    """Offset after the last newline of ``path`` (complete lines only)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        pos, width = size, 4096
        while pos > 0:
            lo = max(0, pos - width)
            fh.seek(lo)
            nl = fh.read(pos - lo).rfind(b"\n")
            if nl >= 0:
                return lo + nl + 1
            pos, width = lo, width * 4
    return 0


def _fingerprint_prefix(pb: Path, pv: Path, data_b: bytes, data_v: bytes) -> list[Any] | None:
    """After a full check found no mismatch: how far the two files are byte-identical (the
    shorter one's complete lines, when it is a prefix of the other), with what is needed to
    trust that prefix next time. None when they match per step but not byte for byte."""
    short, long_ = (data_b, data_v) if len(data_b) <= len(data_v) else (data_v, data_b)
    if not long_.startswith(short):
        return None
    try:
        common = len(short)
        ids = [[p.stat().st_dev, p.stat().st_ino] for p in (pb, pv)]
        return [common, short.count(b"\n"), ids, _probe(pb, common), _probe(pv, common)]
    except OSError:
        return None


def _fingerprints_grown(pb: Path, pv: Path, entry: Any) -> tuple[int, list[Any]] | None:
    """(common steps, new entry) when both files still start with the prefix that matched last
    time and their appended complete lines agree too; None when a full check is needed."""
    try:
        common, n_lines, ids, probe_b, probe_v = entry
        if [[p.stat().st_dev, p.stat().st_ino] for p in (pb, pv)] != ids:
            return None
        ends = [_complete_end(pb), _complete_end(pv)]
        if min(ends) < common:
            return None
        if _probe(pb, common) != probe_b or _probe(pv, common) != probe_v:
            return None
        new_common = min(ends)
        with pb.open("rb") as fb, pv.open("rb") as fv:
            fb.seek(common)
            fv.seek(common)
            tail_b = fb.read(new_common - common)
            tail_v = fv.read(new_common - common)
        if tail_b != tail_v:
            return None  # a mismatch (or a requeue rewrite): the full check says where
        n_common = n_lines + tail_b.count(b"\n")
        new_entry = [new_common, n_common, ids, _probe(pb, new_common), _probe(pv, new_common)]
        return n_common, new_entry
    except (OSError, TypeError, ValueError):
        return None


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


def _wanted(keys: tuple[str, ...], prefixes: tuple[str, ...]) -> Callable[[str], bool]:
    wanted = frozenset(keys)
    return lambda k: k in wanted or k.startswith(prefixes)


def _parse_job(path: str, keys: tuple[str, ...], prefixes: tuple[str, ...]) -> Metrics:
    return read_metrics(path, _wanted(keys, prefixes))


def _parse_part_job(path: str, keys: tuple[str, ...], prefixes: tuple[str, ...]) -> Part:
    return read_part(path, _wanted(keys, prefixes))


# ----------------------------------------------------------------------------------------------
# the per-run parse cache
#
# Why incremental: metrics.jsonl is append-only while a run trains (a resumed job rewrites it
# atomically: a new inode), so a cache entry records how far it parsed (the end of the last
# complete line) and the next report parses only the bytes after that, as long as the file is
# the same file (device, inode) and its first and last 4 KiB before that offset are unchanged.
# Rows whose steps do not come strictly after the cached ones (a copied file with requeue
# duplicates) make the whole file be parsed again: per-key last-row-wins needs every row.
# ----------------------------------------------------------------------------------------------


def _encode(name: str, arr: np.ndarray, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Store a column compactly but losslessly: arithmetic progression (``tokens``, ``step``),
    sparse (eval rows: NaN elsewhere) or dense. Decoding recomputes exactly the expression that
    was checked here, so the round trip is bit-identical."""
    n = int(arr.size)
    if n >= 2 and arr.dtype.kind in "fi":
        a0, d = arr[0], arr[1] - arr[0]
        if np.isfinite(a0) and np.isfinite(d):
            prog = a0 + d * np.arange(n, dtype=arr.dtype)
            if prog.tobytes() == np.ascontiguousarray(arr).tobytes():  # bitwise (-0.0 too)
                return {"enc": "range", "dtype": arr.dtype.str, "a0": a0.item(), "d": d.item()}
    if arr.dtype.kind == "f" and n:
        present = ~np.isnan(arr)
        k = int(present.sum())
        if k * 4 < n:
            idx = np.flatnonzero(present)
            arrays[f"{name}_i"] = idx
            arrays[f"{name}_v"] = arr[idx]
            return {"enc": "sparse"}
    arrays[name] = arr
    return {"enc": "dense"}


def _decode(name: str, spec: dict[str, Any], arrays: dict[str, np.ndarray], n: int) -> np.ndarray:
    enc = spec["enc"]
    if enc == "range":
        dt = np.dtype(spec["dtype"])
        return dt.type(spec["a0"]) + dt.type(spec["d"]) * np.arange(n, dtype=dt)
    if enc == "sparse":
        out = np.full(n, np.nan)
        out[arrays[f"{name}_i"]] = arrays[f"{name}_v"]
        return out
    return arrays[name]


_MAGIC = b"OABCACHE"


def _pack(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """One file: magic, header length, JSON header (meta + array table), raw arrays.

    Why not npz: loading a ladder's cache is on the critical path of every report, and zip
    CRC checks and per-member parsing cost more than the data copy itself."""
    table = []
    blobs = []
    pos = 0
    for name, arr in arrays.items():
        a = np.ascontiguousarray(arr)
        table.append([name, a.dtype.str, int(a.size), pos])
        blobs.append(a.tobytes())
        pos += a.nbytes
    head = json.dumps({"meta": meta, "arrays": table}).encode("utf-8")
    return b"".join([_MAGIC, len(head).to_bytes(8, "little"), head, *blobs])


def _unpack(data: bytearray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    if bytes(data[:8]) != _MAGIC:
        raise ValueError("not a cache file")
    n = int.from_bytes(data[8:16], "little")
    head = json.loads(bytes(data[16 : 16 + n]))
    base = 16 + n
    arrays = {}
    for name, dtype, count, pos in head["arrays"]:
        arrays[name] = np.frombuffer(data, dtype=dtype, count=count, offset=base + pos)
    return head["meta"], arrays


@dataclass
class _Cached:
    body: Metrics
    offset: int
    lines: int


def _cache_load(
    cache: Path, path: Path, keys: tuple[str, ...], prefixes: tuple[str, ...]
) -> _Cached | None:
    """The cached body of ``path`` if it is still a prefix of the file, else None."""
    try:
        st = path.stat()
        with cache.open("rb") as fh:
            data = bytearray(os.fstat(fh.fileno()).st_size)
            fh.readinto(data)  # a bytearray: the arrays are writable views, no copy
        meta, arrays = _unpack(data)
        if (
            meta.get("version") != _CACHE_VERSION
            or tuple(meta["prefixes"]) != prefixes
            or not set(keys) <= set(meta["keys"])
            or [meta["dev"], meta["ino"]] != [st.st_dev, st.st_ino]
            or st.st_size < int(meta["offset"])
            or _probe(path, int(meta["offset"])) != meta["probe"]
        ):
            return None
        n = int(meta["n"])
        wanted = _wanted(keys, prefixes)
        cols = {
            name: _decode(f"c{i}", spec, arrays, n)
            for i, (name, spec) in enumerate(meta["columns"])
            if wanted(name)
        }
        body = Metrics(
            _decode("steps", meta["steps"], arrays, n),
            cols,
            list(meta["issues"]),
            int(meta["rows_read"]),
            int(meta["duplicate_rows"]),
            {k: int(v) for k, v in meta["nonfinite"].items() if wanted(k)},
        )
        return _Cached(body, int(meta["offset"]), int(meta["lines"]))
    except (OSError, KeyError, ValueError, TypeError, IndexError):
        return None


def _cache_store(
    cache: Path,
    path: Path,
    keys: tuple[str, ...],
    prefixes: tuple[str, ...],
    body: Metrics,
    offset: int,
    lines: int,
) -> None:
    try:
        st = path.stat()
        arrays: dict[str, np.ndarray] = {}
        meta = {
            "version": _CACHE_VERSION,
            "keys": list(keys),
            "prefixes": list(prefixes),
            "dev": st.st_dev,
            "ino": st.st_ino,
            "offset": offset,
            "lines": lines,
            "probe": _probe(path, offset),
            "n": int(body.steps.size),
            "steps": _encode("steps", body.steps, arrays),
            "columns": [
                [name, _encode(f"c{i}", body.columns[name], arrays)]
                for i, name in enumerate(sorted(body.columns))
            ],
            "issues": body.issues,
            "rows_read": body.rows_read,
            "duplicate_rows": body.duplicate_rows,
            "nonfinite": body.nonfinite,
        }
        write_bytes_atomic(cache, _pack(meta, arrays))
    except OSError:
        pass  # a read-only results copy still gets its report


def _finish(path: Path, keys: tuple[str, ...], prefixes: tuple[str, ...], part: Part) -> Metrics:
    """Body + unterminated last line; a last line that repeats a step needs the full parse."""
    joined = append(part.body, part.tail)
    return joined if joined is not None else _parse_job(str(path), keys, prefixes)


def _incremental(
    cached: _Cached, cache: Path, path: Path, keys: tuple[str, ...], prefixes: tuple[str, ...]
) -> Metrics | None:
    """Parse only what was appended since ``cached``; None when only a full parse is exact."""
    part = read_part(path, _wanted(keys, prefixes), cached.offset, cached.lines)
    body = append(cached.body, part.body)
    if body is None:
        return None
    if part.end - cached.offset > _REWRITE_MIN:
        # the old entry stays valid (a prefix of an append-only file): rewrite it only when the
        # rows parsed on top of it each time have grown, not on every report of a running job
        _cache_store(cache, path, keys, prefixes, body, part.end, cached.lines + part.lines)
    return _finish(path, keys, prefixes, Part(body, part.tail, part.end, 0))


#: Appended bytes up to this size (~1000 rows: a few ms to parse) do not rewrite the cache.
_REWRITE_MIN = 512 * 2**10
#: Appended bytes up to this size are parsed in the main process (no pool start-up).
_INCREMENTAL_MAX = 8 * 2**20


def load_metrics_many(
    jobs: list[tuple[str, Path, tuple[str, ...], tuple[str, ...]]],
    cache_dir: Path | None,
    workers: int | None = None,
    min_parallel_bytes: int = 32 * 2**20,
) -> dict[str, Metrics]:
    """Parse many metrics files: cached bodies are reused and extended with the appended rows;
    files parsed from scratch go through a process pool (one process per core)."""
    out: dict[str, Metrics] = {}
    todo: list[tuple[str, Path, tuple[str, ...], tuple[str, ...]]] = []
    for run_id, path, keys, prefixes in jobs:
        cache = cache_dir / f"{run_id}.bin" if cache_dir is not None else None
        cached = _cache_load(cache, path, keys, prefixes) if cache is not None else None
        if cached is None and cache is not None:
            # no report cache yet: start from the job's columnar copy (olmoablate.contract.columnar)
            copy = load_copy(path, _wanted(keys, prefixes))
            cached = _Cached(*copy) if copy is not None else None
        if cached is not None and cache is not None:
            if path.stat().st_size - cached.offset <= _INCREMENTAL_MAX:
                m = _incremental(cached, cache, path, keys, prefixes)
                if m is not None:
                    out[run_id] = m
                    continue
        todo.append((run_id, path, keys, prefixes))
    n_workers = workers if workers is not None else min(len(todo), os.cpu_count() or 1, 8)
    total = sum(t[1].stat().st_size for t in todo)
    fn = _parse_part_job if cache_dir is not None else _parse_job
    if n_workers > 1 and len(todo) > 1 and total >= min_parallel_bytes:
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx) as pool:
            futures = {t[0]: pool.submit(fn, str(t[1]), t[2], t[3]) for t in todo}
            parsed = {rid: f.result() for rid, f in futures.items()}
    else:
        parsed = {t[0]: fn(str(t[1]), t[2], t[3]) for t in todo}
    for run_id, path, keys, prefixes in todo:
        res = parsed[run_id]
        if isinstance(res, Part):
            assert cache_dir is not None
            _cache_store(
                cache_dir / f"{run_id}.bin", path, keys, prefixes, res.body, res.end, res.lines
            )
            res = _finish(path, keys, prefixes, res)
        out[run_id] = res
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
    fp_cache: dict[str, list[Any]] = {}
    if cache_dir is not None and (cache_dir / "fingerprints.json").is_file():
        try:
            loaded = json.loads((cache_dir / "fingerprints.json").read_text(encoding="utf-8"))
            fp_cache = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            fp_cache = {}
    out = Results(root, plan, gate, runs, pairs, issues, warnings, cache_dir, fp_cache)
    out.prereg_broken = prereg.broken
    return out


def iter_pairs(results: Results, sizes: Iterable[str] | None = None) -> list[dict[str, Any]]:
    wanted = set(sizes) if sizes is not None else None
    return [p for p in results.pairs if wanted is None or p.get("size") in wanted]
