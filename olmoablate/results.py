"""Results as pandas DataFrames, for notebooks: ``olmoablate.results.load("results/<spec>")``.

Every frame is built from the objects `olmoablate report` builds (`report.collect.collect` ->
`report.assemble.build_all`), so a notebook and the report can never disagree: ``comparisons``
*is* comparison.csv, ``gate_json`` *is* gate.json, and the metrics frames are the columns the
report aligned (same parser, same requeue resolution, same FLOPs axis). Metrics frames are built
per metric and run on demand (``report.frames``); the frames and their columns are described in
docs/results.md.

Importing this module imports pandas; the CLI never imports it (``validate``/``plan``/``status``
stay fast on a login node).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from olmoablate.report import board, track
from olmoablate.report.assemble import Report, build_all
from olmoablate.report.board import build_board
from olmoablate.report.collect import Results, collect, resolve_results_dir, wandb_links
from olmoablate.report.compare import LOSS
from olmoablate.report.depth import COLUMNS as DEPTH_COLUMNS
from olmoablate.report.depth import depth_records
from olmoablate.report.document import comparison_rows
from olmoablate.report.frames import LONG_COLUMNS as METRIC_COLUMNS
from olmoablate.report.frames import MetricFrames
from olmoablate.run.files import RunStatus, RunSummary


def load(
    path: str | Path, *, results_root: str | Path = "results", all_metrics: bool = False
) -> ResultSet:
    """Load a results folder (``results/<spec>``), a spec file or a spec name; ``all_metrics``:
    every key of each metrics.jsonl, not only those the report reads. Writes only the report's
    caches (``metrics.arrow`` copies, ``.report-cache/``)."""
    layout = resolve_results_dir(str(path), results_root)
    results = collect(layout)
    return ResultSet(layout.root, results, build_all(results), all_metrics)


@dataclass
class ResultSet:
    """One results folder as DataFrames (docs/results.md); ``report`` is the report."""

    root: Path
    results: Results
    report: Report
    all_metrics: bool = False

    @functools.cached_property
    def _frames(self) -> MetricFrames:
        return MetricFrames(self.results, self.all_metrics)

    def curves(
        self, metric: str, runs: Iterable[str] | None = None, *, per_pair: bool = False
    ) -> pd.DataFrame:
        """One metric's curves for ``runs`` (all if None), a row per run and step where it was
        recorded; ``per_pair=True`` adds ``pair``, a baseline's rows once per pair it serves."""
        cols = [c for c in METRIC_COLUMNS if c != "metric" and (per_pair or c != "pair")]
        return _pandas(self._frames.table([metric], runs, per_pair=per_pair, columns=cols))

    def long(
        self,
        metrics: Iterable[str] | None = None,
        runs: Iterable[str] | None = None,
        *,
        per_pair: bool = True,
    ) -> pd.DataFrame:
        """The long frame (``metrics``' columns) restricted to ``metrics`` and ``runs`` (all if
        None); ``per_pair=False`` lists each run's rows once, without ``pair``."""
        return _pandas(self._frames.table(metrics, runs, per_pair=per_pair))

    def run_metrics(self, run: str, metrics: Iterable[str] | None = None) -> pd.DataFrame:
        """One run as a wide frame: ``step, tokens, train_flops`` and one column per metric
        (``metrics``, or every metric of the run), NaN where a step lacks it."""
        if run not in self.results.runs:
            raise KeyError(f"not a run of this plan: {run}")
        got = self._frames.read(run, metrics)
        if got is None:
            return pd.DataFrame(columns=["step", "tokens", "train_flops", *(metrics or [])])
        flops = got.flops if got.flops is not None else np.full(got.steps.size, np.nan)
        cols = {"step": got.steps, "tokens": got.tokens, "train_flops": flops}
        keys = list(metrics) if metrics is not None else sorted(got.columns)
        cols.update({k: got.columns.get(k, np.full(got.steps.size, np.nan)) for k in keys})
        return _pandas(pa.table({k: np.asarray(v) for k, v in cols.items()}))

    @functools.cached_property
    def metrics(self) -> pd.DataFrame:
        """Every metric of every run, long form: tens of millions of rows on a full ladder, so
        built only when asked; prefer :meth:`curves` or :meth:`long`."""
        return self.long()

    @functools.cached_property
    def runs(self) -> pd.DataFrame:
        links = wandb_links(self.results)
        rows = []
        for rid, run in self.results.runs.items():
            e, s, st = run.entry, run.summary or RunSummary(), run.status or RunStatus()
            link = links.get(rid, {})
            rows.append(
                {
                    "run": rid,
                    "group": e.group_id,
                    "size": e.size,
                    "seed": e.seed,
                    "arm": e.arm,
                    "state": str(run.state),
                    "step": st.step,
                    "planned_steps": e.steps,
                    "planned_tokens": e.tokens,
                    "tokens": run.max_tokens,
                    "params": e.params,
                    "non_embedding_params": e.non_embedding_params,
                    # measured by the job when it finished, else the plan's count
                    "unique_params": s.unique_params
                    if s.has("unique_params")
                    else e.unique_params,
                    "train_flops_per_token": e.train_flops_per_token,
                    "total_train_flops": e.total_train_flops,
                    "planned_gpu_hours": e.gpu_hours,
                    "mean_step_time_s": s.mean_step_time_s,
                    "tokens_per_s": s.tokens_per_s,
                    "peak_memory_gb": s.peak_memory_gb,
                    "decode_latency_s": s.decode_latency_s,
                    "wall_time_s": s.wall_time_s,
                    "loss_spikes": s.loss_spikes,
                    "certificate": e.certificate,
                    "wandb_id": link.get("id"),
                    "wandb_url": link.get("url"),
                    "directory": str(run.directory),
                    "issues": "; ".join(run.issues),
                }
            )
        return pd.DataFrame(rows)

    @functools.cached_property
    def pairs(self) -> pd.DataFrame:
        compared = {p.pair_id: p for p in self.report.pairs}
        rows = []
        for p in self.results.pairs:
            pid = p.pair_id
            r = compared.get(pid)
            rows.append(
                {
                    "pair": pid,
                    "group": p.group_id,
                    "size": p.size,
                    "seed": p.seed,
                    "variant": p.variant,
                    "baseline_run": p.baseline_run,
                    "variant_run": p.variant_run,
                    "budget_match": p.budget_match,
                    "differs": ", ".join(p.differs),
                    "certificate": p.certificate,
                    "valid": r.valid if r else False,
                    "invalid_reasons": "; ".join(r.invalid_reasons)
                    if r
                    else "a run of this pair is not in the plan",
                    "complete": r.complete if r else False,
                    "incomplete_reason": r.incomplete_reason if r else "",
                    "matched_tokens": r.matched_tokens if r else np.nan,
                    "baseline_state": r.baseline.state if r else None,
                    "variant_state": r.variant.state if r else None,
                    "notes": "; ".join(r.notes) if r else "",
                }
            )
        return pd.DataFrame(rows)

    @functools.cached_property
    def matched(self) -> pd.DataFrame:
        frames = []
        for p in self.report.pairs:
            curves = {**p.evals, LOSS: p.train}
            for key, al in curves.items():
                if not len(al):
                    continue
                frames.append(
                    pd.DataFrame(
                        {
                            "pair": p.pair_id,
                            "size": p.size,
                            "seed": p.seed,
                            "variant_name": p.variant_name,
                            "valid": p.valid,
                            "metric": key,
                            "tokens": al.x,
                            "baseline": al.baseline,
                            "variant": al.variant,
                            "delta": al.delta,
                        }
                    )
                )
        if not frames:
            return pd.DataFrame(
                columns=["pair", "size", "seed", "variant_name", "valid", "metric", "tokens"]
                + ["baseline", "variant", "delta"]
            )
        return pd.concat(frames, ignore_index=True)

    @functools.cached_property
    def comparisons(self) -> pd.DataFrame:
        return pd.DataFrame(comparison_rows(self.report))

    @functools.cached_property
    def costs(self) -> pd.DataFrame:
        c = self.comparisons
        if c.empty or "kind" not in c:
            return pd.DataFrame()
        out = c[c["kind"] == "cost"].copy()
        out.insert(0, "cost", out.pop("metric").str.removeprefix("cost/"))
        return out.dropna(axis=1, how="all").reset_index(drop=True)

    @functools.cached_property
    def gate_json(self) -> dict[str, Any]:
        return self.report.gate_json()

    @functools.cached_property
    def gate(self) -> pd.DataFrame:
        """One row per gate, gated variant and check (e.g. "vs baseline", "vs reference"), with
        the check's estimate flattened (``estimate.mean``, ``estimate.lower``, ...);
        ``gate_verdict`` is that gate's verdict (several gates: one per proposal)."""
        rows: list[dict[str, Any]] = []
        for r in self.report.gates or [self.report]:  # gate.json's records, from the objects
            g = r.results.gate
            for v in r.variant_verdicts:
                head = {
                    "gate": r.gate_name,
                    "stage": r.stage,
                    "rule": g.rule,
                    "metric": g.metric,
                    "direction": g.direction,
                    "variant": v.variant,
                    "verdict": v.verdict,
                }
                for c in [c.as_dict() for c in v.checks] or [{}]:
                    if c.get("estimate", {}) is None:  # a multiplier check (rs.ladder), no points
                        c["estimate"] = dict.fromkeys(_ESTIMATE, np.nan)
                    flat = pd.json_normalize(
                        {("check" if k == "name" else k): x for k, x in c.items()}, sep="."
                    )
                    rows.append(
                        {
                            **head,
                            **(flat.iloc[0].to_dict() if len(flat.columns) else {}),
                            "gate_verdict": r.verdict,
                        }
                    )
        return pd.DataFrame(rows)

    @functools.cached_property
    def ladder(self) -> pd.DataFrame:
        """Every multiplier gate's ladder: one row per gate, variant, unit and rung, then one per
        target (``projected``), with ``flops_v`` (the variant's training FLOPs), ``multiplier``
        and its one-sided ``confidence`` bounds (NaN where undefined or ``refused``);
        ``decided``: the gate's own unit (the others are shown, not decided on)."""
        rows: list[dict[str, Any]] = []
        for r in self.report.gates or [self.report]:
            for v, lad in r.ladders.items():
                for unit, fit in lad.fits.items():
                    head = {"gate": r.gate_name, "variant": v, "unit": unit,
                            "decided": unit == lad.unit, "confidence": lad.confidence}  # fmt: skip
                    proj = {p.size: p.multiplier for p in fit.projections}
                    rows.extend(
                        {**head, "size": x.size, "projected": False, "flops_v": x.flops_v,
                         **_interval(x.multiplier), "refused": x.why_undefined}
                        for x in fit.rungs
                    )  # fmt: skip
                    rows.extend(
                        {**head, "size": t.size, "projected": True, "flops_v": t.flops_v,
                         **_interval(proj.get(t.size)), "refused": fit.refused}
                        for t in lad.targets
                    )  # fmt: skip
        return pd.DataFrame(rows, columns=LADDER_COLUMNS)

    @functools.cached_property
    def depth(self) -> pd.DataFrame:
        """The effective-depth diagnostic (docs/depth.md; not a gate input), long form: one row
        per run, eval set, ``kind`` and ``index`` at the run's last eval point that recorded it
        (``step``). Kinds: ``layer`` (logit-lens CE after block ``index``, 0 = embeddings),
        ``loop`` (Looped OLMo's CE after loop ``index``), ``da_weight`` (Depth-Attention's mean
        weight on source layer ``index``), ``first_within_0.05`` (``value``: the first layer
        or loop within 0.05 nats of the final CE). The report's depth table averages these."""
        rows = [row for rec in depth_records(self.results) for row in rec.rows()]
        frame = pd.DataFrame(rows, columns=DEPTH_COLUMNS)
        return frame.astype({"index": "Int64"})  # none for first_within

    def __repr__(self) -> str:
        verdicts = {r.gate_name: r.verdict for r in self.report.gates or [self.report]}
        shown = ", ".join(f"{k}: {v}" for k, v in verdicts.items())
        return (
            f"ResultSet({self.root}: {len(self.results.runs)} runs, {len(self.results.pairs)} "
            f"pairs, gate {shown})"
        )


#: A check's estimate as :attr:`ResultSet.gate` flattens it (NaN where a check has none).
_ESTIMATE = ("mean", "lower", "upper", "n_seeds")
#: The columns of :attr:`ResultSet.ladder`.
LADDER_COLUMNS = [
    "gate", "variant", "unit", "decided", "size", "projected", "flops_v", "multiplier", "lower",
    "upper", "confidence", "refused",
]  # fmt: skip


def _interval(iv: Any) -> dict[str, float]:
    if iv is None:
        return {"multiplier": np.nan, "lower": np.nan, "upper": np.nan}
    return {"multiplier": iv.estimate, "lower": iv.lower, "upper": iv.upper}


def _pandas(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as pandas: numbers with pyarrow dtypes (no copy), labels (run, pair,
    metric, ...) as categoricals on the table's dictionary codes. Why not pyarrow dictionary
    dtypes for the labels too: pandas cannot sort them or use ``.str`` on them
    (``m.metric.str.startswith("eval/")``), which notebooks do all the time."""
    import pyarrow.compute as pc

    cols: dict[str, Any] = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_dictionary(col.type):
            arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            if not isinstance(arr, pa.DictionaryArray):  # no chunks: an empty column
                arr = pa.DictionaryArray.from_arrays(
                    pa.array([], pa.int8()), pa.array([], pa.string())
                )
            codes = pc.fill_null(arr.indices, -1).to_numpy(zero_copy_only=False)
            cols[name] = pd.Categorical.from_codes(codes, categories=arr.dictionary.to_pylist())
        else:
            cols[name] = pd.arrays.ArrowExtensionArray(col)
    return pd.DataFrame(cols, columns=table.column_names, copy=False)


def _frame(records: list[dict[str, Any]], row: Any) -> pd.DataFrame:
    """``records`` as a frame with the columns of the dataclass ``row`` (even when empty)."""
    columns = [f.name for f in dataclasses.fields(row)]
    return pd.DataFrame(records, columns=columns) if records else pd.DataFrame(columns=columns)


@dataclass
class Campaign:
    """Every spec of a store as DataFrames: `olmoablate board`'s JSON as frames (``specs``,
    ``proposals``, ``track``: rows of board.SpecRow, board.ProposalRow, track.TrackRow)."""

    root: Path
    doc: dict[str, Any]

    @functools.cached_property
    def specs(self) -> pd.DataFrame:
        return _frame(self.doc["specs"], board.SpecRow)

    @functools.cached_property
    def proposals(self) -> pd.DataFrame:
        return _frame(self.doc["proposals"], board.ProposalRow)

    @functools.cached_property
    def track(self) -> pd.DataFrame:
        return _frame(self.doc["track_record"], track.TrackRow)

    @property
    def summary(self) -> dict[str, Any]:
        return dict(self.doc["summary"])

    def to_json(self) -> dict[str, Any]:
        """The board's JSON (what ``olmoablate board --format json`` prints)."""
        return self.doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Campaign:
        """The frames of a board JSON written earlier (``board --format json``)."""
        return cls(Path(doc["root"]), doc)

    def __repr__(self) -> str:
        return f"Campaign({self.root}: {len(self.doc['specs'])} specs, {len(self.doc['proposals'])} proposals)"


def load_all(root: str | Path = "results") -> Campaign:
    """Every spec under the store ``root`` as DataFrames (the board: `olmoablate board ROOT`)."""
    board = build_board(root)
    return Campaign(Path(root), json.loads(json.dumps(board.as_json())))


__all__ = ["Campaign", "ResultSet", "load", "load_all"]
