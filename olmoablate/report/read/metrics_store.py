"""The metrics store: each run's ``metrics.jsonl`` read through its one cache, the columnar copy.

Why one cache: the training job already keeps ``metrics.arrow`` next to ``metrics.jsonl``
(:mod:`olmoablate.contract.columnar`: the parse of the file's first ``offset`` bytes, every key,
column-wise, vouched for by a probe of those bytes). The report and ``olmoablate.results`` read
that copy (only the columns they want) and parse only the lines after its offset; where a copy
is missing, stale (a resumed job rewrote the file: a new inode, other bytes) or far behind, the
store rebuilds it (:func:`olmoablate.contract.columnar.refresh`), so the next reader, whichever
command it is, finds it current. There is no second cache of the same rows.

Why incremental: metrics.jsonl is append-only while a run trains, so a re-run parses only the
rows appended since the copy; rows whose steps do not come strictly after the copy's (a copied
file with requeue duplicates) make the file be parsed again in full (per-key last-row-wins needs
every row). An unterminated last line is joined to the answer but never stored (the writer may
be completing it). Every answer equals :func:`olmoablate.contract.metricsfile.read_metrics` of the
whole file. Files parsed from scratch go through a process pool (one process per core). A
read-only results folder keeps no copy and is parsed each time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from olmoablate.contract import columnar
from olmoablate.contract.metricsfile import Metrics, append, read_metrics, read_part

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
    return Metrics(
        m.steps,
        {k: v for k, v in m.columns.items() if want(k)},
        m.issues,
        m.rows_read,
        m.duplicate_rows,
        {k: v for k, v in m.nonfinite.items() if want(k)},
    )


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
    """Load many runs' metrics (the report's read): copies are reused and extended with the
    appended rows; files parsed from scratch (``use_cache=False``: all of them, no copy
    written) go through a process pool, one process per core."""
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
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx) as pool:
            futures = {t[0]: pool.submit(fn, str(t[1]), t[2], t[3]) for t in todo}
            out.update({rid: f.result() for rid, f in futures.items()})
    else:
        out.update({t[0]: fn(str(t[1]), t[2], t[3]) for t in todo})
    return {run_id: out[run_id] for run_id, *_ in jobs}
