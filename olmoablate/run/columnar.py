"""The columnar copy of a run's ``metrics.jsonl`` (``metrics.arrow``): the one cache of its rows.

Why: a report over a ladder reads ~100 files of ~100k rows (5 GB of JSON); parsing them is most of
a cold report's time, while the job already has each row in hand once. So the job keeps
``metrics.arrow`` next to ``metrics.jsonl``: the report's own parse (``olmoablate.run.metricsfile``)
of the file's first ``offset`` bytes, every key, stored column-wise. Readers (the report and
``olmoablate.results``, through ``olmoablate.report.collect``) take only the columns they
need; where a copy is missing or stale the store rebuilds it (:func:`refresh`), so there is no
second cache of the same rows.

Why Arrow IPC (the Feather v2 file format: ``pyarrow.feather`` / ``pandas.read_feather`` open
it), uncompressed: every report reads ~10 columns of every run, and a memory-mapped IPC file is
read without decoding or copying (a tenth of a millisecond per run, where an uncompressed
Parquet file took 4 ms and a zstd one 26 ms); the file is still about 3x smaller than the JSON.
Mapping is safe because a copy is never written in place: it is written to a temporary file and
renamed over the old one, so a mapped file's bytes never change under a reader.

``metrics.jsonl`` stays the source of truth. The copy records how far it parsed (``offset``, the
end of a complete line) and a hash of the first and last 4 KiB before that offset; a reader uses
it only while the file still starts with those bytes, and parses the rows after ``offset`` itself.
A rewritten file (a resumed job truncates it), a missing or unreadable copy, or a copy of another
format version is ignored, never an error: the report then parses the JSON as before.

pyarrow is a declared dependency, but the copy is only a shortcut: where pyarrow cannot be
imported (a trimmed environment), no copy is written or read and everything else works.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from olmoablate.plan.names import LEGACY_METRICS_COPY_FILE, METRICS_COPY_FILE
from olmoablate.run.metricsfile import Metrics, Part, append, read_part

#: Bumped whenever what the copy stores (or how the parse it holds is made) changes.
VERSION = 1
#: Bytes hashed at each end of the covered prefix (the fingerprint cache probes the same way).
PROBE_BYTES = 4096
#: The job refreshes the copy after this many new rows (and at checkpoints' pace it costs ms).
ROWS_PER_UPDATE = 1000
_META_KEY = b"olmoablate"


def copy_path(metrics_path: str | Path) -> Path:
    """``.../metrics.jsonl`` -> ``.../metrics.arrow``."""
    return Path(metrics_path).with_name(METRICS_COPY_FILE)


def probe(path: Path, offset: int) -> str:
    """Hash of the first and the last 4 KiB before ``offset``: detects a rewritten file."""
    with path.open("rb") as fh:
        head = fh.read(min(PROBE_BYTES, offset))
        fh.seek(max(0, offset - PROBE_BYTES))
        tail = fh.read(min(PROBE_BYTES, offset))
    return hashlib.sha256(head + b"|" + tail).hexdigest()


def available() -> bool:
    """Whether pyarrow can be imported here (else there is no copy)."""
    try:
        import pyarrow.ipc  # noqa: F401
    except ImportError:
        return False
    return True


def load_copy(
    metrics_path: str | Path, want: Callable[[str], bool] | None = None
) -> tuple[Metrics, int, int] | None:
    """``(body, offset, lines)`` from a still-valid copy (only the wanted columns), else None."""
    if not available():
        return None
    import pyarrow as pa
    import pyarrow.ipc as ipc

    path = Path(metrics_path)
    target = copy_path(path)
    mapped = None
    try:
        # mapped, not read: only the pages of the columns used are ever touched; closing the
        # file keeps the mapping (and the arrays on it) alive, without holding a descriptor
        mapped = pa.memory_map(str(target))
        reader = ipc.open_file(mapped)
        meta = json.loads((reader.schema.metadata or {})[_META_KEY])
        offset = int(meta["offset"])
        if (
            meta.get("version") != VERSION
            or path.stat().st_size < offset
            or probe(path, offset) != meta["probe"]
        ):
            return None
        keys = [k for k in meta["keys"] if want is None or want(k)]
        return _body(meta, reader.read_all().select(["step", *keys]), keys)
    except (OSError, KeyError, ValueError, TypeError, pa.ArrowException):
        return None  # a missing or unreadable copy is only a missed shortcut
    finally:
        if mapped is not None:
            mapped.close()


def _body(meta: dict[str, Any], table: Any, keys: list[str]) -> tuple[Metrics, int, int]:
    """``(body, offset, lines)`` of a copy: its ``keys`` columns and its metadata."""
    body = Metrics(
        _numpy(table.column("step")).astype(np.int64, copy=False),
        {k: _numpy(table.column(k)) for k in keys},
        list(meta["issues"]),
        int(meta["rows_read"]),
        int(meta["duplicate_rows"]),
        {k: int(v) for k, v in meta["nonfinite"].items() if k in keys},
    )
    return body, int(meta["offset"]), int(meta["lines"])


_NUMPY_TYPES = {"double": np.float64, "int64": np.int64}


def _numpy(column: Any) -> np.ndarray:
    """A pyarrow column as numpy, zero-copy (read-only), like ``to_numpy``, but without
    pyarrow's pandas check: ``to_numpy`` imports pandas (~0.4 s of a cold report) even for a
    plain float column. Columns with nulls or of another type take ``to_numpy``."""
    dtype = _NUMPY_TYPES.get(str(column.type))
    chunks = column.chunks
    if dtype is None or column.null_count:
        return column.to_numpy()
    size = np.dtype(dtype).itemsize
    parts = [
        np.frombuffer(c.buffers()[1], dtype=dtype, count=len(c), offset=c.offset * size)
        for c in chunks
        if len(c)
    ]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype)


def update_copy(metrics_path: str | Path) -> Path | None:
    """Bring the copy up to the last complete line of ``metrics_path`` (the job calls this).

    Only the rows after the old copy's offset are parsed; a copy that no longer matches the
    file (or whose rows cannot simply be appended, e.g. a requeue duplicate) is rebuilt from the
    whole file. Returns the copy's path, or None when there was nothing to copy.
    """
    path = Path(metrics_path)
    if not path.is_file() or not available():
        return None
    refresh(path)
    return copy_path(path)


def refresh(metrics_path: str | Path) -> Part:
    """:func:`update_copy`, answering what it parsed: every key's complete lines (the body the
    copy now holds) and the unterminated last line. The metrics store calls this where a copy
    is missing, stale or far behind (a job of an older release, results copied without it), so
    the next reader finds one; a copy that cannot be written (a read-only folder, no pyarrow)
    only costs the next reader a parse."""
    path = Path(metrics_path)
    ident = _identity(path)
    old = load_copy(path) or _legacy_copy(path)
    body: Metrics | None = None
    if old is not None:
        prev, offset, lines = old
        part = read_part(path, None, offset, lines)
        body = append(prev, part.body)
        end, lines = part.end, lines + part.lines
    if body is None:
        part = read_part(path, None)
        body, end, lines = part.body, part.end, part.lines
    if available():
        try:
            _write(path, body, end, lines, ident)
        except OSError:
            pass
    return Part(body, part.tail, end, lines)


def _legacy_copy(path: Path) -> tuple[Metrics, int, int] | None:
    """``(body, offset, lines)`` of a still-valid ``metrics.parquet`` (zstd Parquet, the same
    metadata, version 1) of an older release's job, else None: read once, when this release
    first reports its folder, so that the new copy starts from it, not from a parse of the JSON."""
    target = path.with_name(LEGACY_METRICS_COPY_FILE)
    if not target.is_file() or not available():
        return None
    try:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(target)
        meta = json.loads((pf.schema_arrow.metadata or {})[_META_KEY])
        offset = int(meta["offset"])
        if meta.get("version") != 1 or path.stat().st_size < offset:
            return None
        if probe(path, offset) != meta["probe"]:
            return None
        keys = list(meta["keys"])
        return _body(meta, pf.read(columns=["step", *keys], use_threads=False), keys)
    except (OSError, KeyError, ValueError, TypeError, ImportError):
        return None


def _identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def remove_copy(metrics_path: str | Path) -> None:
    """Drop the copy (the job does this before it rewrites metrics.jsonl on resume)."""
    copy_path(metrics_path).unlink(missing_ok=True)


def _write(
    path: Path, body: Metrics, offset: int, lines: int, ident: tuple[int, int] | None = None
) -> None:
    """Write the copy atomically; ``ident``: the (device, inode) the body was parsed from. A
    file replaced meanwhile (a resumed job rewrites it: a new inode) gets no copy, since the
    probe taken here would vouch for the new file's bytes with the old file's rows."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    keys = sorted(body.columns)
    meta: dict[str, Any] = {
        "version": VERSION,
        "offset": offset,
        "lines": lines,
        "probe": probe(path, offset),
        "keys": keys,
        "issues": body.issues,
        "rows_read": body.rows_read,
        "duplicate_rows": body.duplicate_rows,
        "nonfinite": body.nonfinite,
    }
    arrays = [pa.array(np.asarray(body.steps, dtype=np.int64))]
    arrays += [pa.array(np.asarray(body.columns[k], dtype=np.float64)) for k in keys]
    schema = pa.schema(
        [pa.field("step", pa.int64()), *(pa.field(k, pa.float64()) for k in keys)],
        metadata={_META_KEY: json.dumps(meta).encode("utf-8")},
    )
    table = pa.Table.from_arrays(arrays, schema=schema)
    target = copy_path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with ipc.new_file(str(tmp), schema) as writer:  # one record batch, uncompressed
            writer.write_table(table, max_chunksize=max(1, table.num_rows))
        if ident is not None and (_identity(path) != ident or path.stat().st_size < offset):
            return
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
