"""The report's parse cache of metrics files: one binary file per run in ``.report-cache/``.

Why incremental: metrics.jsonl is append-only while a run trains (a resumed job rewrites it
atomically: a new inode), so a cache entry records how far it parsed (the end of the last
complete line) and the next report parses only the bytes after that, as long as the file is
the same file (device, inode) and its first and last 4 KiB before that offset are unchanged.
Rows whose steps do not come strictly after the cached ones (a copied file with requeue
duplicates) make the whole file be parsed again: per-key last-row-wins needs every row. A cold
report starts from the columnar copy the training job keeps (``metrics.parquet``,
:mod:`olmoablate.contract.columnar`) when it still matches the file. Files parsed from scratch
go through a process pool (one process per core). Every answer equals a parse from scratch.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from olmoablate.contract.columnar import load_copy
from olmoablate.contract.columnar import probe as _probe
from olmoablate.contract.metricsfile import Metrics, Part, append, read_metrics, read_part

#: Stored in every cache file: a file of another version is parsed again.
CACHE_VERSION = 3

#: One metrics file to load: (run id, metrics.jsonl, wanted keys, wanted key prefixes).
Job = tuple[str, Path, tuple[str, ...], tuple[str, ...]]


def _wanted(keys: tuple[str, ...], prefixes: tuple[str, ...]) -> Callable[[str], bool]:
    wanted = frozenset(keys)
    return lambda k: k in wanted or k.startswith(prefixes)


def _parse_job(path: str, keys: tuple[str, ...], prefixes: tuple[str, ...]) -> Metrics:
    return read_metrics(path, _wanted(keys, prefixes))


def _parse_part_job(path: str, keys: tuple[str, ...], prefixes: tuple[str, ...]) -> Part:
    return read_part(path, _wanted(keys, prefixes))


def _encode(name: str, arr: np.ndarray, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Store a column compactly but losslessly: arithmetic progression (``tokens``, ``step``),
    sparse (eval rows: NaN elsewhere) or dense. Decoding recomputes exactly the expression that
    was checked here, so the round trip is bit-identical."""
    n = int(arr.size)
    if n >= 2 and arr.dtype.kind in "fi":
        a0, d = arr[0], arr[1] - arr[0]
        if np.isfinite(a0) and np.isfinite(d) and _is_progression(arr, a0, d):
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


def _is_progression(arr: np.ndarray, a0: Any, d: Any) -> bool:
    """Whether ``arr`` is bit for bit ``a0 + d * arange(n)`` (-0.0 and NaN told apart). The
    last and middle elements are tried first: most columns (losses) fail there, without
    building the progression (two fresh column-sized arrays per column and run)."""
    n = int(arr.size)
    t = arr.dtype.type
    for i in (n - 1, n // 2):
        if np.asarray(a0 + d * t(i)).tobytes() != np.asarray(arr[i]).tobytes():
            return False
    prog = _arange(n, arr.dtype) * d
    prog += a0  # a0 + d * i, the decoder's expression (IEEE + and * commute exactly)
    bits = np.dtype(f"u{arr.dtype.itemsize}")
    return bool(np.array_equal(prog.view(bits), np.ascontiguousarray(arr).view(bits)))


def _arange(n: int, dtype: np.dtype) -> np.ndarray:
    """``arange(n)`` of ``dtype``, built once per report for the common (n, dtype)."""
    key = (n, np.dtype(dtype).str)
    hit = _ARANGES.get(key)
    if hit is None:
        hit = np.arange(n, dtype=dtype)
        hit.flags.writeable = False
        if len(_ARANGES) >= 4:  # a few (length, dtype): a ladder's runs mostly share them
            _ARANGES.clear()
        _ARANGES[key] = hit
    return hit


_ARANGES: dict[tuple[int, str], np.ndarray] = {}


def _decode(name: str, spec: dict[str, Any], arrays: dict[str, np.ndarray], n: int) -> np.ndarray:
    enc = spec["enc"]
    if enc == "range":
        dt = np.dtype(spec["dtype"])
        out = _arange(n, dt) * dt.type(spec["d"])
        out += dt.type(spec["a0"])
        return out
    if enc == "sparse":
        out = np.full(n, np.nan)
        out[arrays[f"{name}_i"]] = arrays[f"{name}_v"]
        return out
    return arrays[name]


_MAGIC = b"OABCACHE"


def _pack(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> list[bytes | memoryview]:
    """One file as chunks to write: magic, header length, JSON header (meta, array table and
    the CRC-32 of the arrays' bytes), raw arrays (memoryviews: no copy of the data).

    Why not npz: loading a ladder's cache is on the critical path of every report, and zip
    CRC checks and per-member parsing cost more than the data copy itself. Why a CRC: the
    cache is written without fsync (a cache, rebuilt when unusable; a cold report writes one
    per run), so a file cut short or zero-filled by a crash must be recognised."""
    table = []
    blobs: list[memoryview] = []
    pos = 0
    crc = 0
    for name, arr in arrays.items():
        a = np.ascontiguousarray(arr)
        table.append([name, a.dtype.str, int(a.size), pos])
        view = memoryview(a).cast("B")
        crc = zlib.crc32(view, crc)
        blobs.append(view)
        pos += a.nbytes
    head = json.dumps({"meta": meta, "arrays": table, "size": pos, "crc": crc}).encode("utf-8")
    return [_MAGIC, len(head).to_bytes(8, "little"), head, *blobs]


def _unpack(data: bytearray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    if bytes(data[:8]) != _MAGIC:
        raise ValueError("not a cache file")
    n = int.from_bytes(data[8:16], "little")
    head = json.loads(bytes(data[16 : 16 + n]))
    base = 16 + n
    if len(data) != base + int(head["size"]):
        raise ValueError("cache file of the wrong size")
    if zlib.crc32(memoryview(data)[base:]) != int(head["crc"]):
        raise ValueError("cache file damaged")
    arrays = {}
    for name, dtype, count, pos in head["arrays"]:
        arrays[name] = np.frombuffer(data, dtype=dtype, count=count, offset=base + pos)
    return head["meta"], arrays


def _write_cache_file(path: Path, chunks: list[bytes | memoryview]) -> None:
    """Temporary file + rename (a reader sees the old file or the new one), no fsync."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as fh:
            fh.writelines(chunks)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
            meta.get("version") != CACHE_VERSION
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
            "version": CACHE_VERSION,
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
        _write_cache_file(cache, _pack(meta, arrays))
    except OSError:
        pass  # a read-only results copy still gets its report


def _finish(path: Path, keys: tuple[str, ...], prefixes: tuple[str, ...], part: Part) -> Metrics:
    """Body + unterminated last line; a last line that repeats a step needs the full parse."""
    joined = append(part.body, part.tail)
    return joined if joined is not None else _parse_job(str(path), keys, prefixes)


def _incremental(
    cached: _Cached,
    cache: Path,
    path: Path,
    keys: tuple[str, ...],
    prefixes: tuple[str, ...],
    store: bool = False,
) -> Metrics | None:
    """Parse only what was appended since ``cached``; None when only a full parse is exact.
    ``store``: write the report cache whatever was appended (``cached`` is the job's copy)."""
    part = read_part(path, _wanted(keys, prefixes), cached.offset, cached.lines)
    body = append(cached.body, part.body)
    if body is None:
        return None
    if store or part.end - cached.offset > _REWRITE_MIN:
        # the old entry stays valid (a prefix of an append-only file): rewrite it only when the
        # rows parsed on top of it each time have grown, not on every report of a running job
        _cache_store(cache, path, keys, prefixes, body, part.end, cached.lines + part.lines)
    return _finish(path, keys, prefixes, Part(body, part.tail, part.end, 0))


#: Appended bytes up to this size (~1000 rows: a few ms to parse) do not rewrite the cache.
_REWRITE_MIN = 512 * 2**10
#: Appended bytes up to this size are parsed in the main process (no pool start-up).
_INCREMENTAL_MAX = 8 * 2**20


def load_metrics_many(
    jobs: list[Job],
    cache_dir: Path | None,
    workers: int | None = None,
    min_parallel_bytes: int = 32 * 2**20,
) -> dict[str, Metrics]:
    """Parse many metrics files: cached bodies are reused and extended with the appended rows;
    files parsed from scratch go through a process pool (one process per core)."""
    out: dict[str, Metrics] = {}
    todo: list[Job] = []
    for run_id, path, keys, prefixes in jobs:
        cache = cache_dir / f"{run_id}.bin" if cache_dir is not None else None
        cached = _cache_load(cache, path, keys, prefixes) if cache is not None else None
        from_copy = False
        if cached is None and cache is not None:
            # no report cache yet: start from the job's columnar copy (olmoablate.contract.columnar)
            # and keep what the report read of it in the report cache, which is cheaper to load
            # (only the wanted columns, progressions and sparse columns stored compactly)
            copy = load_copy(path, _wanted(keys, prefixes))
            cached = _Cached(*copy) if copy is not None else None
            from_copy = cached is not None
        if cached is not None and cache is not None:
            if path.stat().st_size - cached.offset <= _INCREMENTAL_MAX:
                m = _incremental(cached, cache, path, keys, prefixes, store=from_copy)
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
