"""Fast, forgiving reader for the training job's ``metrics.jsonl`` files.

Why not ``json.loads`` per line: a 1B run logs ~100k rows, and a report over a full ladder reads
~100 of them (10 M rows, ~2.5 GB). At ~4 µs per ``json.loads`` that is 40 s; the report must take
seconds. The rows the job writes are flat objects of numbers with the same keys in the same order,
so most of the file can be parsed column-wise with numpy:

1. find the keys of every row from the positions of ``"`` followed by ``:``;
2. group rows by a hash of their key sequence (train rows, eval rows, ...);
3. for a large group, check one representative with ``json.loads`` and then parse only the wanted
   keys' numbers for all rows at once (vectorised decimal parser);
4. everything else (small groups, odd rows, values that are not plain numbers) goes through
   ``json.loads`` line by line, so correctness never depends on the fast path's assumptions.

Robustness contract (docs/design.md): a truncated last line is ignored; a step that appears more
than once (a requeued job, a file copied mid-write) keeps the value of its last row, per key; a
malformed line is skipped and reported. All of this comes back as human-readable ``issues``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

#: Groups with at most this many rows are parsed with json.loads (cheaper than the setup).
_SPARSE_MAX = 256
#: Longest number text (bytes) the vectorised parser accepts; longer values use json.loads.
_MAX_NUMBER_LEN = 32


@dataclass
class Metrics:
    """One run's metrics, one entry per unique step (sorted); NaN where a row lacks the key."""

    steps: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    issues: list[str] = field(default_factory=list)
    rows_read: int = 0
    duplicate_rows: int = 0
    #: rows whose value was NaN/Infinity (distinct from rows that lack the key: also NaN above)
    nonfinite: dict[str, int] = field(default_factory=dict)

    def get(self, key: str) -> np.ndarray | None:
        return self.columns.get(key)

    def __len__(self) -> int:
        return int(self.steps.size)


def read_metrics(path: str | Path, want: Callable[[str], bool] | None = None) -> Metrics:
    """Read ``path`` keeping only keys for which ``want(key)`` is true (all keys if None).

    ``step`` is always read. Never raises on content problems; they are listed in ``issues``.
    """
    path = Path(path)
    acc = _Accumulator(want or (lambda _k: True))
    issues: list[str] = []
    data = _read_from(path, 0)
    end = data.rfind(b"\n") + 1
    n_body = _parse_body(data[:end], acc, issues, path)
    _parse_tail(data[end:], acc, issues, path, n_body)
    return acc.finish(issues, n_body + 1)


_DUP_ISSUE = "{} duplicate step rows (requeue/resume); the last row of a step wins"
_BAD_ISSUE = "{}: {} malformed line(s) skipped (line {})"
_DUP_RE = re.compile(r"^(\d+) duplicate step rows \(requeue/resume\)")
_BAD_RE = re.compile(r"^(.*): (\d+) malformed line\(s\) skipped \(line ([\d, ]+)( \.\.\.)?\)$")


def _line_list(first: list[int], total: int) -> str:
    return ", ".join(str(n) for n in first[:5]) + (" ..." if total > 5 else "")


def _merge_issues(a: list[str], b: list[str]) -> list[str]:
    """The issues of two parts of one file, worded as one parse of the whole file would word
    them (one duplicate-rows line, one malformed-lines line with the first five line numbers)."""
    out: list[str] = []
    dup = 0
    bad_path = ""
    bad_n = 0
    bad_lines: list[int] = []
    for issue in a + b:
        if m := _DUP_RE.match(issue):
            dup += int(m.group(1))
        elif m := _BAD_RE.match(issue):
            bad_path = m.group(1)
            bad_n += int(m.group(2))
            bad_lines += [int(x) for x in m.group(3).split(", ")]
        else:
            out.append(issue)
    if bad_n:
        out.insert(0, _BAD_ISSUE.format(bad_path, bad_n, _line_list(bad_lines, bad_n)))
    if dup:
        out.append(_DUP_ISSUE.format(dup))
    return out


@dataclass
class Part:
    """``read_part``'s answer: the complete lines from ``start`` (cacheable: a later call can
    continue at ``end``) and, separately, an unterminated last line (never cached: the writer
    may still be completing it)."""

    body: Metrics
    tail: Metrics
    end: int
    lines: int


def read_part(
    path: str | Path, want: Callable[[str], bool] | None, start: int = 0, first_line: int = 0
) -> Part:
    """Parse ``path`` from byte ``start`` (the beginning of a line) to its end.

    Why: metrics.jsonl is append-only while a run trains, so a report re-run only needs the
    rows written since the last one; ``append`` joins the parts exactly when they do not
    overlap in steps (``first_line`` numbers lines in issue messages).
    """
    path = Path(path)
    keep: Callable[[str], bool] = want or (lambda _k: True)
    data = _read_from(path, start)
    rel_end = data.rfind(b"\n") + 1
    acc = _Accumulator(keep)
    issues: list[str] = []
    n_body = _parse_body(data[:rel_end], acc, issues, path, first_line)
    body = acc.finish(issues, n_body)
    tail_acc = _Accumulator(keep)
    tail_issues: list[str] = []
    _parse_tail(data[rel_end:], tail_acc, tail_issues, path, 0)
    tail = tail_acc.finish(tail_issues, 1)
    end = start + rel_end
    return Part(body, tail, end, n_body)


def append(a: Metrics, b: Metrics) -> Metrics | None:
    """``a`` followed by ``b`` (rows of a later part of the same file), or None when ``b``
    has a step at or before ``a``'s last one (then only a full parse is exact: per-key
    last-row-wins needs to know which keys each duplicate row had)."""
    if len(b) and len(a) and int(b.steps[0]) <= int(a.steps[-1]):
        return None
    if not len(a) or not len(b):  # one side has no rows: the other, with both sides' issues
        return replace(a if not len(b) else b, issues=_merge_issues(a.issues, b.issues))
    columns: dict[str, np.ndarray] = {}
    for key in sorted(set(a.columns) | set(b.columns)):
        ca = a.columns.get(key)
        cb = b.columns.get(key)
        columns[key] = np.concatenate(
            [
                ca if ca is not None else np.full(a.steps.size, np.nan),
                cb if cb is not None else np.full(b.steps.size, np.nan),
            ]
        )
    nonfinite = dict(a.nonfinite)
    for k, v in b.nonfinite.items():
        nonfinite[k] = nonfinite.get(k, 0) + v
    return Metrics(
        np.concatenate([a.steps, b.steps]),
        columns,
        _merge_issues(a.issues, b.issues),
        a.rows_read + b.rows_read,
        a.duplicate_rows + b.duplicate_rows,
        nonfinite,
    )


def _read_from(path: Path, start: int) -> bytes:
    """The bytes of ``path`` from ``start`` to its current end (a plain read, not an mmap: a file
    truncated while it is read must not crash the report with SIGBUS)."""
    with path.open("rb") as fh:
        fh.seek(start)
        return fh.read()


def _parse_tail(tail: bytes, acc: _Accumulator, issues: list[str], path: Path, row: int) -> None:
    """A last line without newline: kept if it is a complete object, else reported."""
    if not tail.strip():
        return
    try:
        obj = json.loads(tail)
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        acc.add_row(row, obj)
    except ValueError:
        issues.append(
            f"{path}: truncated last line ignored ({len(tail)} bytes, file copied mid-write?)"
        )


class _Accumulator:
    """Collects (row index, value) per key from both parse paths, then de-duplicates by step."""

    def __init__(self, keep: Callable[[str], bool]) -> None:
        self._keep = keep
        self._kept: dict[str, bool] = {}  # rows repeat the same ~20 keys: decide each once
        self._layouts: dict[tuple[str, ...], list[str]] = {}
        self.parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.slow_rows: dict[str, list[int]] = {}
        self.slow_vals: dict[str, list[float]] = {}

    def keep(self, key: str) -> bool:
        kept = self._kept.get(key)
        if kept is None:
            kept = self._kept[key] = bool(self._keep(key))
        return kept

    def add_column(self, key: str, rows: np.ndarray, values: np.ndarray) -> None:
        self.parts.setdefault(key, []).append((rows, values))

    def add_row(self, row: int, obj: dict[str, object]) -> None:
        layout = tuple(obj)
        kept = self._layouts.get(layout)
        if kept is None:  # rows share a handful of key layouts: filter each layout once
            kept = self._layouts[layout] = [k for k in layout if k == "step" or self.keep(k)]
        for key in kept:
            num = _as_float(obj[key])
            if num is None:
                continue
            self.slow_rows.setdefault(key, []).append(row)
            self.slow_vals.setdefault(key, []).append(num)

    def _column(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        rows = [r for r, _ in self.parts.get(key, [])]
        vals = [v for _, v in self.parts.get(key, [])]
        if key in self.slow_rows:
            rows.append(np.asarray(self.slow_rows[key], dtype=np.int64))
            vals.append(np.asarray(self.slow_vals[key], dtype=np.float64))
        if not rows:
            return np.empty(0, np.int64), np.empty(0)
        r = np.concatenate(rows)
        v = np.concatenate(vals)
        if r.size > 1 and not np.all(r[1:] > r[:-1]):
            order = np.argsort(r, kind="stable")
            r, v = r[order], v[order]
        return r, v

    def finish(self, issues: list[str], n_rows: int) -> Metrics:
        step_rows, step_vals = self._column("step")
        row_step = np.full(n_rows, -1, dtype=np.int64)
        ok = np.isfinite(step_vals)
        row_step[step_rows[ok]] = step_vals[ok].astype(np.int64)
        keys = set(self.parts) | set(self.slow_rows)
        keys.discard("step")
        if step_rows.size == 0:
            return Metrics(np.empty(0, np.int64), {}, issues)
        steps_seen = row_step[step_rows[ok]]
        if steps_seen.size > 1 and np.all(steps_seen[1:] > steps_seen[:-1]):
            unique_steps = steps_seen  # the common case: no requeue duplicates, in order
        else:
            unique_steps = np.unique(steps_seen)
        dup = int(steps_seen.size - unique_steps.size)
        if dup:
            issues.append(_DUP_ISSUE.format(dup))
        columns: dict[str, np.ndarray] = {}
        nonfinite: dict[str, int] = {}
        for key in sorted(keys):
            rows, vals = self._column(key)
            bad = int(vals.size - np.isfinite(vals).sum())
            if bad:
                nonfinite[key] = bad
            s = row_step[rows]
            has = s >= 0
            s, vals = s[has], vals[has]
            if s.size > 1 and not np.all(s[1:] > s[:-1]):
                order = np.argsort(s, kind="stable")  # rows ascending inside a step: last wins
                s, vals = s[order], vals[order]
                last = np.r_[s[1:] != s[:-1], True]
                s, vals = s[last], vals[last]
            col = np.full(unique_steps.size, np.nan)
            col[np.searchsorted(unique_steps, s)] = vals
            columns[key] = col
        return Metrics(unique_steps, columns, issues, int(steps_seen.size), dup, nonfinite)


def _as_float(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return math.nan if value is None else float(value)
    if isinstance(value, int | float):
        return float(value)
    return None


def _slow_rows(
    body: bytes, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, acc: _Accumulator
) -> list[int]:
    """json.loads the given rows; returns the rows that are not valid JSON objects."""
    bad: list[int] = []
    for r in rows.tolist():
        text = bytes(body[starts[r] : ends[r]])
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            bad.append(r)
            continue
        if isinstance(obj, dict):
            acc.add_row(r, obj)
        else:
            bad.append(r)
    return bad


def _parse_body(
    body: bytes, acc: _Accumulator, issues: list[str], path: Path, first_line: int = 0
) -> int:
    """Parse complete lines of ``body`` into ``acc``; returns the number of lines
    (``first_line``: lines before ``body`` in the file, for the line numbers of issues)."""
    if not body:
        return 0
    n = len(body)
    buf = np.empty(n + 64, dtype=np.uint8)
    buf[:n] = np.frombuffer(body, dtype=np.uint8)
    buf[n:] = 0  # zero padding: gathers near the end never overrun
    ends = np.flatnonzero(buf[:n] == 10)
    n_rows = int(ends.size)
    starts = np.r_[0, ends[:-1] + 1]
    quotes = np.flatnonzero(buf[:n] == 34)
    # quotes of row r are quotes[qfirst[r] : qfirst[r + 1]]
    qfirst = np.r_[0, np.searchsorted(quotes, ends)]
    qcount = np.diff(qfirst)
    handled = np.zeros(n_rows, dtype=bool)
    counts = np.bincount(qcount)
    for qc in np.flatnonzero(counts > _SPARSE_MAX):
        if qc == 0 or qc % 2:
            continue
        pending = np.flatnonzero(qcount == qc)
        while pending.size > _SPARSE_MAX:
            done = _dense_group(body, buf, pending, starts, ends, quotes, qfirst, acc)
            if done is None:  # the representative itself is odd: leave it to json.loads
                pending = pending[1:]
                continue
            handled[pending[done]] = True
            pending = pending[~done]
    rest = np.flatnonzero(~handled)
    bad = _slow_rows(body, starts, ends, rest, acc)
    if bad:
        lines = _line_list([first_line + b + 1 for b in bad[:5]], len(bad))
        issues.append(_BAD_ISSUE.format(path, len(bad), lines))
    return n_rows


def _u64_at(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Unaligned little-endian 8-byte reads at byte offsets ``pos``."""
    view = np.ndarray(shape=(buf.size - 7,), dtype="<u8", buffer=buf, offset=0, strides=(1,))
    return view[pos]


def _dense_group(
    body: bytes,
    buf: np.ndarray,
    rows: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    quotes: np.ndarray,
    qfirst: np.ndarray,
    acc: _Accumulator,
) -> np.ndarray | None:
    """Parse rows that look like ``rows[0]`` column-wise; returns the mask of rows parsed here.

    Every row must have the representative's keys in the same order: each key's length and its
    first and last 8 bytes are compared (values are numbers, so the 2j-th and (2j+1)-th quotes of
    a row delimit its j-th key). Rows that differ are returned unparsed for another round.
    """
    rep = int(rows[0])
    try:
        obj = json.loads(body[starts[rep] : ends[rep]])
    except ValueError:
        return None
    q0 = int(qfirst[rep])
    nk = int(qfirst[rep + 1] - q0) // 2
    found = [
        body[quotes[q0 + 2 * j] + 1 : quotes[q0 + 2 * j + 1]].decode("utf-8", "replace")
        for j in range(nk)
    ]
    if not isinstance(obj, dict) or list(obj) != found:
        return None  # string values, escaped quotes, nested objects: json.loads handles it
    if any(isinstance(v, str | dict | list) for v in obj.values()):
        return None
    base = qfirst[rows]
    # every key length of every row at once: quotes of the group as an (n, 2 * nk) matrix
    qmat = quotes[base[:, None] + np.arange(2 * nk)]
    rep_q = quotes[q0 : q0 + 2 * nk]
    ok = np.all((qmat[:, 1::2] - qmat[:, 0::2]) == (rep_q[1::2] - rep_q[0::2]), axis=1)
    for j in range(nk):
        if found[j] != "step" and not acc.keep(found[j]):
            continue  # unwanted keys: the same length is enough
        # wanted keys: also the same first and last (up to) 8 bytes
        ks, ke = qmat[:, 2 * j] + 1, qmat[:, 2 * j + 1]
        rks, rke = int(rep_q[2 * j] + 1), int(rep_q[2 * j + 1])
        m = min(rke - rks, 8)
        mask = np.uint64((1 << (8 * m)) - 1)
        ref_head = _u64_at(buf, np.array([rks]))[0] & mask
        ref_tail = _u64_at(buf, np.array([rke - m]))[0] & mask
        ok &= (_u64_at(buf, ks) & mask) == ref_head
        ok &= (_u64_at(buf, ke - m) & mask) == ref_tail
    # a torn line in the middle of the file (missing "}") must not slip through
    tail = ends[rows]
    for ch in (13, 32):
        tail = tail - (buf[tail - 1] == ch)
    ok &= (buf[tail - 1] == 125) & (buf[starts[rows]] == 123)
    sel = rows[ok]
    qmat = qmat[ok]
    for j, key in enumerate(found):
        if key != "step" and not acc.keep(key):
            continue
        vs = qmat[:, 2 * j + 1] + 2
        vs = vs + (buf[vs] == 32)
        if j + 1 < nk:
            ve = qmat[:, 2 * j + 2].copy()
            for ch in (32, 44, 32):
                ve = ve - (buf[ve - 1] == ch)
        else:
            ve = ends[sel].copy()
            for ch in (13, 32, 125, 32):
                ve = ve - (buf[ve - 1] == ch)
        values = _parse_numbers(buf, vs, ve)
        if values is None:
            return None
        acc.add_column(key, sel, values)
    return ok


def _parse_numbers(buf: np.ndarray, vs: np.ndarray, ve: np.ndarray) -> np.ndarray | None:
    """Convert the number texts ``buf[vs:ve]`` to float64 in one numpy call (C's strtod rules).

    Returns None if any text is not a number numpy accepts (then the caller uses json.loads).
    ``NaN``/``Infinity``/``-Infinity`` as Python's json writes them are accepted.
    """
    lens = ve - vs
    if lens.size == 0:
        return np.empty(0)
    width = int(lens.max())
    if width <= 0 or width > _MAX_NUMBER_LEN or int(lens.min()) <= 0:
        return None
    cols = np.arange(width)
    mat = buf[vs[:, None] + cols]
    if int(lens.min()) == width and np.array_equal(mat, np.broadcast_to(mat[:1], mat.shape)):
        # a constant column ("optim/step skipped": 0.0 on every row): convert once
        try:
            return np.full(lens.size, float(bytes(mat[0]).decode("ascii")))
        except ValueError:
            return None
    if width <= 15:
        digits = mat.astype(np.int64) - 48
        if np.all((digits >= 0) & (digits < 10) | (cols >= lens[:, None])):
            # plain non-negative integers (step, tokens): Horner's rule, no string conversion
            value = np.zeros(lens.size, dtype=np.int64)
            for j in range(width):
                value = np.where(j < lens, value * 10 + digits[:, j], value)
            return value.astype(np.float64)
    mat[cols >= lens[:, None]] = 0
    try:
        return np.ascontiguousarray(mat).view(f"S{width}").ravel().astype(np.float64)
    except ValueError:
        return None
