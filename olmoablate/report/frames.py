"""A results folder's metrics as Arrow tables, built per metric and run on demand.

A notebook mostly asks for one metric's curves, and one long frame of everything was 80M rows
and 13 GB on a 100-run ladder; so a table is built only for what is asked, from the report's read
(or one column of the run's columnar copy), numbers zero-copy and labels dictionary-encoded.
``olmoablate.results`` turns it into pandas; this module imports no pandas. The axes are the
report's: ``tokens`` (else step x global batch) and ``train_flops``
(:func:`.collect.cumulative_flops`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from olmoablate.plan import metrics as names
from olmoablate.report.collect import Results, RunData, cumulative_flops, load_run
from olmoablate.run.metricsfile import Metrics

#: The long frame's columns, in order.
LONG_COLUMNS = [
    "run", "pair", "group", "size", "seed", "arm", "step", "tokens", "train_flops", "metric",
    "value",
]  # fmt: skip
#: Keys that are axes, not metrics.
AXES = ("step", "tokens")


def _num(v: object) -> float | None:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) and f > 0 else None


@dataclass
class RunMetrics:
    """One read of one run: the steps, both x axes and the metric columns, all of one parse."""

    steps: np.ndarray
    tokens: np.ndarray
    flops: np.ndarray | None
    columns: dict[str, np.ndarray]

    @classmethod
    def of(cls, run: RunData, m: Metrics) -> RunMetrics:
        tokens = m.columns.get(names.TOKENS)
        if tokens is None:  # metrics from before the job logged tokens
            tokens = m.steps.astype(float) * float(run.entry.training.global_batch_size)
        tokens = np.asarray(tokens, dtype=float)
        flops, _ = cumulative_flops(
            tokens, _num(run.entry.train_flops_per_token), m.columns.get(names.TOTAL_PFLOPS)
        )
        cols = {k: v for k, v in m.columns.items() if k not in AXES}
        return cls(np.asarray(m.steps, dtype=np.int64), tokens, flops, cols)


@dataclass
class MetricFrames:
    """The metrics of ``results`` (what ``collect`` read) as tables; ``all_metrics``: every key
    of each metrics.jsonl, read from the store when asked, not only the report's."""

    results: Results
    all_metrics: bool = False
    #: runs' reads of keys the report did not read, by (run, keys): a notebook asks again
    _reads: dict[tuple[str, tuple[str, ...] | None], RunMetrics] = field(default_factory=dict)

    def _store_read(self, rid: str, keys: tuple[str, ...] | None) -> RunMetrics | None:
        run = self.results.runs[rid]
        if not run.dir.metrics.is_file():
            return None
        hit = self._reads.get((rid, keys))
        if hit is None:
            axes = {"tokens"}
            if self.all_metrics or (
                run.metrics is not None and names.TOTAL_PFLOPS in run.metrics.columns
            ):
                axes.add(names.TOTAL_PFLOPS)  # the same FLOPs axis as the report's read
            want: Callable[[str], bool] | None = None
            if keys is not None:
                wanted = frozenset(keys) | axes
                want = wanted.__contains__
            hit = RunMetrics.of(run, load_run(run.dir.metrics, want))
            if keys is not None:  # a column or two: keep them (a full read is rebuilt per ask)
                self._reads[(rid, keys)] = hit
        return hit

    def read(self, rid: str, keys: Iterable[str] | None = None) -> RunMetrics | None:
        """Run ``rid``'s ``keys`` (all if None) with both x axes: from the report's read when it has
        them, else (and under ``all_metrics``) from the store, values and axes of one parse."""
        run = self.results.runs[rid]
        m = run.metrics
        if keys is None:
            if self.all_metrics:
                return self._store_read(rid, None)
            return RunMetrics.of(run, m) if m is not None and len(m) else None
        keys = tuple(dict.fromkeys(keys))
        if m is not None and all(k in m.columns for k in keys):
            full = RunMetrics.of(run, m)
            return dataclasses.replace(full, columns={k: full.columns[k] for k in keys})
        return self._store_read(rid, keys)

    def pairs_of(self) -> dict[str, list[str | None]]:
        """The pairs each run belongs to (a baseline serves every variant of its size and seed);
        ``[None]`` for a run in no pair."""
        out: dict[str, list[str | None]] = {rid: [] for rid in self.results.runs}
        for p in self.results.pairs:
            for rid in (p.baseline_run, p.variant_run):
                if rid in out and p.pair_id not in out[rid]:
                    out[rid].append(p.pair_id)
        return {rid: (ps or [None]) for rid, ps in out.items()}

    def table(
        self,
        metrics: Iterable[str] | None = None,
        runs: Iterable[str] | None = None,
        *,
        per_pair: bool = True,
        columns: list[str] | None = None,
    ) -> pa.Table:
        """Long table of ``metrics`` (all if None) of ``runs`` (all if None): one row per run, step
        and recorded metric; ``per_pair``: a run's rows once per pair. Built in two passes (which
        rows, then each column in place), so the peak is the table plus one run's rows."""
        keys = None if metrics is None else tuple(dict.fromkeys(metrics))
        rids = list(self.results.runs) if runs is None else list(runs)
        unknown = [r for r in rids if r not in self.results.runs]
        if unknown:
            raise KeyError(f"not a run of this plan: {', '.join(unknown)}")
        cols = columns or (LONG_COLUMNS if per_pair else [c for c in LONG_COLUMNS if c != "pair"])
        pairs_of = self.pairs_of() if per_pair else {}
        labels = _Labels()
        todo: list[tuple[str, RunMetrics, list[tuple[int, np.ndarray]], list[str | None]]] = []
        total = 0
        for rid in rids:
            got = self.read(rid, keys)
            if got is None:
                continue
            rows = []
            for key in keys if keys is not None else sorted(got.columns):
                values = got.columns.get(key)
                if values is None:
                    continue
                at = np.flatnonzero(~np.isnan(values))
                if at.size:
                    rows.append((labels.code("metric", key), at))
            if not rows:
                continue
            pairs = pairs_of.get(rid, [None]) if per_pair else [None]
            e = self.results.runs[rid].entry
            for kind, value in (("run", rid), ("group", e.group_id), ("size", e.size)):
                labels.code(kind, value)
            labels.code("arm", e.arm)
            for pair in pairs:
                labels.code("pair", pair)
            todo.append((rid, got, rows, pairs))
            total += sum(at.size for _, at in rows) * len(pairs)
        out = {c: np.empty(total, _dtype(c, labels)) for c in cols}
        pos = 0
        for rid, got, rows, pairs in todo:
            block = self._block(rid, got, rows, labels, out)
            n = sum(at.size for _, at in rows)
            for pair in pairs:
                block["pair"] = labels.code("pair", pair)
                for c, arr in out.items():
                    arr[pos : pos + n] = block[c]
                pos += n
        arrays = [labels.array(c, out[c]) if c in _KINDS else _numbers(c, out[c]) for c in cols]
        return pa.Table.from_arrays(arrays, names=cols)

    def _block(
        self,
        rid: str,
        got: RunMetrics,
        rows: list[tuple[int, np.ndarray]],
        labels: _Labels,
        out: dict[str, np.ndarray],
    ) -> dict[str, np.ndarray | int | float]:
        """One run's rows, column by column (only the columns asked for)."""
        e = self.results.runs[rid].entry
        at = np.concatenate([a for _, a in rows]) if len(rows) > 1 else rows[0][1]
        block: dict[str, np.ndarray | int | float] = {
            "run": labels.code("run", rid),
            "group": labels.code("group", e.group_id),
            "size": labels.code("size", e.size),
            "arm": labels.code("arm", e.arm),
            "seed": e.seed,
        }
        if "step" in out:
            block["step"] = got.steps[at]
        if "tokens" in out:
            block["tokens"] = got.tokens[at]
        if "train_flops" in out:
            block["train_flops"] = got.flops[at] if got.flops is not None else np.nan
        if "metric" in out:
            block["metric"] = np.repeat([c for c, _ in rows], [a.size for _, a in rows])
        if "value" in out:
            block["value"] = np.concatenate(
                [got.columns[labels.name("metric", c)][a] for c, a in rows]
            )
        return block


_KINDS = ("run", "pair", "group", "size", "arm", "metric")
_DTYPES = {"step": np.int64, "seed": np.int64}


def _dtype(column: str, labels: _Labels) -> type[np.generic]:
    return labels.dtype(column) if column in _KINDS else _DTYPES.get(column, np.float64)


def _numbers(name: str, data: np.ndarray) -> pa.Array:
    if name == "train_flops":  # unavailable FLOPs are missing, not a number
        return pa.array(data, from_pandas=True)
    return pa.array(data)


class _Labels:
    """Dictionary codes of the label columns, one dictionary per column for the whole table,
    in the narrowest index type that holds it (a ladder has a few hundred runs and pairs)."""

    def __init__(self) -> None:
        self._codes: dict[str, dict[str | None, int]] = {k: {} for k in _KINDS}
        self._names: dict[str, list[str | None]] = {k: [] for k in _KINDS}

    def code(self, kind: str, value: str | None) -> int:
        book = self._codes[kind]
        if value not in book:
            book[value] = len(book)
            self._names[kind].append(value)
        return book[value]

    def name(self, kind: str, code: int) -> str:
        return str(self._names[kind][code])

    def dtype(self, kind: str) -> type[np.signedinteger]:
        n = len(self._codes[kind])
        return np.int8 if n < 2**7 else np.int16 if n < 2**15 else np.int32

    def array(self, kind: str, codes: np.ndarray) -> pa.DictionaryArray:
        book = self._codes[kind]
        dictionary = pa.array([v for v in book if v is not None], pa.string())
        null_code = book.get(None)
        mask = None
        if null_code is not None:  # None (a run in no pair) is a null, not a dictionary entry
            mask = codes == null_code
            codes = np.where(codes > null_code, codes - 1, codes).astype(codes.dtype)
        return pa.DictionaryArray.from_arrays(pa.array(codes, mask=mask), dictionary)
