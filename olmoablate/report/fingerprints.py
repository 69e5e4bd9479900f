"""The data-order rule of a pair: both arms must have trained on the same batches.

One module for the rule (``fingerprints.jsonl`` compared per common step) and its cache, used by
the loader and by the comparison. Cached because a baseline serves several pairs: a check is keyed
by both files' identity (size, mtime, inode), and while runs train only appended lines are
compared. Cold, each file is read and counted once (:class:`Reads`) and the checks run in a
forked worker while the metrics load (:class:`Background`).
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from olmoablate.io import sha256_of, write_bytes_atomic
from olmoablate.run.columnar import probe as _probe

#: Part of every cache key: bump it when the cached answers change meaning.
CACHE_VERSION = 2
#: The report's fingerprint cache, in the report cache folder.
CACHE_FILE = "fingerprints.json"


def fingerprint_problems(a: bytes | None, b: bytes | None) -> tuple[list[str], str]:
    """Compare two fingerprints.jsonl contents per common step; (problems, note)."""
    problems, note, _ = _full_check(a, b)
    return problems, note


def _full_check(
    a: bytes | None, b: bytes | None, count: Callable[[bytes, int], int] | None = None
) -> tuple[list[str], str, int | None]:
    """(problems, note, common lines) of ``a`` (baseline) vs ``b`` (variant); common lines: of the
    shorter when it is a byte-identical prefix of the longer (what the prefix cache records), else
    None. ``count(data, n)``: newlines in ``data[:n]`` (a report passes a memo)."""
    if a is None or b is None:
        which = "baseline" if a is None else "variant"
        return [], f"data order unverified: {which} has no fingerprints.jsonl", None
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    if long_.startswith(short):  # identical or one arm further along: every common step matches
        n_common = count(short, len(short)) if count is not None else short.count(b"\n")
        return [], _match_note(n_common), n_common
    fa, fb = _fingerprint_map(a), _fingerprint_map(b)
    common = sorted(set(fa) & set(fb))
    bad = [s for s in common if fa[s] != fb[s]]
    if bad:
        why = (
            f"data fingerprints differ at {len(bad)} of {len(common)} common steps "
            f"(first at step {bad[0]}): the arms did not see the same batches"
        )
        return [why], "", None
    return [], f"data fingerprints match on {len(common)} common steps", None


def _match_note(n_common: int) -> str:
    if n_common == 0:
        return "data order unverified: no common fingerprint steps yet"
    return f"data fingerprints match on {n_common} common steps"


def _fingerprint_map(data: bytes) -> dict[int, str]:
    out: dict[int, str] = {}
    for line in data.splitlines():
        try:
            row = json.loads(line)
            out[int(row["step"])] = str(row["sha256"])  # last row of a step wins
        except (ValueError, KeyError, TypeError):
            continue
    return out


def file_identity(path: Path) -> list[int] | None:
    """(size, mtime, inode) of a fingerprints file: the key of cached comparisons."""
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def complete_lines(path: Path) -> bytes | None:
    """Complete lines of a fingerprints file (a torn last line is dropped), or None."""
    if not path.is_file():
        return None
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1]


class Reads:
    """The fingerprint files one report has read, each read and counted once, not once per pair (a
    baseline serves every variant of its size and seed). An entry is used only while the file keeps
    the identity it had when read; the last ``keep`` files are kept."""

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._data: OrderedDict[Path, tuple[list[int] | None, bytes | None]] = OrderedDict()
        self._counts: dict[tuple[Path, int], tuple[bytes, int]] = {}

    def lines(self, path: Path) -> bytes | None:
        """:func:`complete_lines` of ``path``, from memory while the file is unchanged."""
        ident = file_identity(path)
        hit = self._data.get(path)
        if hit is not None and ident is not None and hit[0] == ident:
            self._data.move_to_end(path)
            return hit[1]
        data = complete_lines(path)
        self._data[path] = (ident, data)
        self._data.move_to_end(path)
        while len(self._data) > self.keep:
            old, _ = self._data.popitem(last=False)
            self._counts = {k: v for k, v in self._counts.items() if k[0] != old}
        return data

    def counter(self, path: Path) -> Callable[[bytes, int], int]:
        """``count(data, n)``: newlines in ``data[:n]``, remembered per (file, n) for the exact
        ``data`` object this report read from ``path``."""

        def count(data: bytes, n: int) -> int:
            hit = self._counts.get((path, n))
            if hit is not None and hit[0] is data:
                return hit[1]
            c = data.count(b"\n", 0, n)
            self._counts[(path, n)] = (data, c)
            return c

        return count


def check_cached(
    cache: dict[str, list[Any]], pb: Path, pv: Path, reads: Reads | None = None
) -> tuple[list[str], str]:
    """:func:`fingerprint_problems` of the files ``pb`` (baseline) and ``pv`` (variant), reusing
    and updating ``cache`` (the answers by the identity of both files, and the byte-identical
    prefix that matched last time). ``reads``: the files this report has read already."""
    ib, iv = file_identity(pb), file_identity(pv)
    key = sha256_of([CACHE_VERSION, ib, iv])
    if ib is not None and iv is not None and key in cache:
        problems, note = cache[key]
        return list(problems), str(note)
    prefix_key = sha256_of([CACHE_VERSION, "prefix", str(pb), str(pv)])
    if ib is not None and iv is not None:
        grown = _fingerprints_grown(pb, pv, cache.get(prefix_key))
        if grown is not None:
            n_common, entry = grown
            note = _match_note(n_common)
            cache[key] = [[], note]
            cache[prefix_key] = entry
            return [], note
    reads = reads if reads is not None else Reads(keep=0)
    data_b, data_v = reads.lines(pb), reads.lines(pv)
    short = pb if data_b is None or data_v is None or len(data_b) <= len(data_v) else pv
    problems, note, n_lines = _full_check(data_b, data_v, reads.counter(short))
    if ib is not None and iv is not None:
        cache[key] = [problems, note]
        cache.pop(prefix_key, None)
        if n_lines is not None and data_b is not None and data_v is not None:
            entry = _prefix_entry(pb, pv, min(len(data_b), len(data_v)), n_lines)
            if entry is not None:
                cache[prefix_key] = entry
    return problems, note


def _check_all(cache: dict[str, list[Any]], pairs: list[tuple[Path, Path]]) -> dict[str, list[Any]]:
    """Run :func:`check_cached` on every pair (in a worker); the cache entries it made."""
    before = dict(cache)
    reads = Reads()
    for pb, pv in pairs:
        check_cached(cache, pb, pv, reads)
    return {k: v for k, v in cache.items() if before.get(k) != v}


class Background:
    """The pairs' fingerprint checks in one forked process while the metrics load. Its answers only
    fill the cache, which :func:`check_cached` trusts only while both files keep their identity; a
    failed worker costs only the time."""

    #: Below this many bytes of files to check, a process costs more than it saves.
    MIN_BYTES = 32 * 2**20

    def __init__(
        self,
        cache: dict[str, list[Any]],
        pairs: list[tuple[Path, Path]],
        min_bytes: int | None = None,
    ) -> None:
        self._future = None
        todo = [
            (pb, pv)
            for pb, pv in pairs
            if sha256_of([CACHE_VERSION, file_identity(pb), file_identity(pv)]) not in cache
        ]
        size = sum(i[0] for pair in todo for i in map(file_identity, pair) if i is not None)
        if (
            not todo
            or size < (self.MIN_BYTES if min_bytes is None else min_bytes)
            or (os.cpu_count() or 1) < 2
            or "fork" not in multiprocessing.get_all_start_methods()
        ):
            return
        try:
            ctx = multiprocessing.get_context("fork")
            pool = ProcessPoolExecutor(max_workers=1, mp_context=ctx)
            try:
                self._future = pool.submit(_check_all, dict(cache), todo)
            finally:
                pool.shutdown(wait=False)
        except Exception:  # noqa: BLE001 - no process to be had (limits, a daemonic parent): in-process
            self._future = None

    def merge_into(self, cache: dict[str, list[Any]]) -> None:
        """Wait for the worker and add its answers to ``cache`` (nothing if it failed)."""
        if self._future is None:
            return
        try:
            cache.update(self._future.result())
        except Exception:  # noqa: BLE001 - a lost worker only means checking in-process
            pass
        self._future = None


def load_cache(cache_dir: Path | None) -> dict[str, list[Any]]:
    """The cache saved by the last report in ``cache_dir`` ({} when absent or unreadable)."""
    path = cache_dir / CACHE_FILE if cache_dir is not None else None
    if path is None or not path.is_file():
        return {}
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def save_cache(cache_dir: Path | None, cache: dict[str, list[Any]]) -> None:
    """Write the cache; a read-only results copy simply keeps none."""
    if cache_dir is None:
        return
    try:
        write_bytes_atomic(cache_dir / CACHE_FILE, json.dumps(cache).encode("utf-8"))
    except OSError:
        pass


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


def _prefix_entry(pb: Path, pv: Path, common: int, n_lines: int) -> list[Any] | None:
    """What is needed to trust next time that the shorter file's complete lines (``common`` bytes,
    ``n_lines`` lines) are a prefix of the other: both files' device, inode, probe at ``common``."""
    try:
        ids = [[p.stat().st_dev, p.stat().st_ino] for p in (pb, pv)]
        return [common, n_lines, ids, _probe(pb, common), _probe(pv, common)]
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
