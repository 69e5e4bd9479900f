"""`olmoablate.results`: the DataFrames agree with what `report` wrote (comparison.csv, gate.json)
and, through an independent path (the long-form metrics), with the numbers behind them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from olmoablate.io import write_json_atomic
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, check_against_report, make_results


def _report(root: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "olmoablate", "report", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr


def test_frames_match_comparison_csv_and_gate_json(tmp_path: Path) -> None:
    root = tmp_path / "results" / "synth"
    make_results(
        root,
        SynthSpec(
            seeds=(0, 1),
            variants={
                "sn_da": {"siamese_norm": {"output_norms": False}},
                "da": {"depth_attention": {"stride": 4}},
            },
            gate={"metric": "eval/lm/demo-heldout/CE loss", "min_effect": 0.01},
        ),
        {"sn_da": ArmTruth(offset=-0.08), "da": ArmTruth(offset=0.03)},
    )
    write_json_atomic(
        root / "runs" / "1B-s0-sn_da" / "wandb.json",
        {
            "id": "abc",
            "mode": "online",
            "url": "https://wandb.example/o/p/runs/abc",
            "job_type": "sn_da",
        },
    )
    _report(root)
    rs = check_against_report(root)

    assert set(rs.pairs["pair"]) == {"1B-s0-sn_da", "1B-s0-da", "1B-s1-sn_da", "1B-s1-da"}
    runs = rs.runs.set_index("run")
    assert runs.loc["1B-s0-sn_da", "wandb_url"] == "https://wandb.example/o/p/runs/abc"
    assert runs.loc["1B-s0-baseline", "state"] == "completed"
    # the baseline serves two pairs: its rows are there twice, once per pair
    base = rs.metrics[rs.metrics["run"] == "1B-s0-baseline"]
    assert set(base["pair"].dropna()) == {"1B-s0-sn_da", "1B-s0-da"}
    assert len(base) == 2 * len(base.drop_duplicates(["step", "metric"]))
    # tokens and FLOPs axes: tokens = step x batch; FLOPs = tokens x the plan's FLOPs/token
    row = base.iloc[-1]
    assert row["tokens"] == row["step"] * 2048
    assert row["train_flops"] == pytest.approx(row["tokens"] * 6e9)
    costs = rs.costs
    assert "cost" in costs and (costs["pair_id"] == "1B-s0-sn_da").any()
    # the report links the W&B run too
    assert "https://wandb.example/o/p/runs/abc" in (root / "report.md").read_text()


def test_all_metrics_reads_every_key(tmp_path: Path) -> None:
    from olmoablate import results

    root = tmp_path / "results" / "synth"
    make_results(root, SynthSpec(gate={"metric": "eval/lm/demo-heldout/CE loss"}))
    few = set(results.load(root).metrics["metric"].unique())
    every = set(results.load(root, all_metrics=True).metrics["metric"].unique())
    assert few < every and "train/CE loss" in few  # e.g. the optimizer's LR is only in `every`


def _old_long_frame(rs) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    """The long frame as release 5a8b340 built it (per run, per key, pandas concat): the
    reference the Arrow-backed frames must equal."""
    from olmoablate.plan import metrics as names
    from olmoablate.report.collect import cumulative_flops

    pairs_of: dict[str, list] = {rid: [] for rid in rs.results.runs}
    for p in rs.results.pairs:
        for rid in (p.baseline_run, p.variant_run):
            if p.pair_id not in pairs_of[rid]:
                pairs_of[rid].append(p.pair_id)
    frames = []
    for rid, run in rs.results.runs.items():
        m = run.metrics
        steps, cols = m.steps, m.columns
        tokens = cols["tokens"]
        fpt = float(run.entry.train_flops_per_token)
        flops, _ = cumulative_flops(tokens, fpt, cols.get(names.TOTAL_PFLOPS))
        for key, values in cols.items():
            if key in ("tokens", "step"):
                continue
            keep = ~np.isnan(values)
            if not keep.any():
                continue
            one = pd.DataFrame(
                {
                    "step": steps[keep].astype(np.int64),
                    "tokens": tokens[keep],
                    "train_flops": flops[keep],
                    "metric": key,
                    "value": values[keep],
                }
            )
            e = run.entry
            one["run"], one["group"], one["size"] = rid, e.group_id, e.size
            one["seed"], one["arm"] = e.seed, e.arm
            for pair in pairs_of[rid] or [None]:
                frames.append(one.assign(pair=pair))
    cols_ = ["run", "pair", "group", "size", "seed", "arm", "step", "tokens", "train_flops"]
    return pd.concat(frames, ignore_index=True)[[*cols_, "metric", "value"]]


def _plain(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    out = pd.DataFrame({c: df[c].astype(object) for c in df.columns})
    out = out.where(out.notna(), None)
    return out.sort_values(by, kind="stable").reset_index(drop=True)


def _arrow_backed(df: pd.DataFrame) -> None:
    """Numbers with pyarrow dtypes, labels categorical (sortable, with ``.str``)."""
    labels = {"run", "pair", "group", "size", "arm", "metric"}
    for c, t in df.dtypes.items():
        assert isinstance(t, pd.CategoricalDtype if c in labels else pd.ArrowDtype), (c, t)
    if "metric" in df and len(df):
        assert df["metric"].str.startswith("train/").any()
        df.sort_values(["run", "metric", "step"])


def test_frames_equal_the_old_implementation(tmp_path: Path) -> None:
    """The long frame, one metric's curves and a run's wide frame hold exactly the old long
    frame's rows and values; every metric frame is Arrow-backed; the long frame is built only
    when asked (not by load, runs, pairs, comparisons or curves)."""
    from olmoablate import results

    root = tmp_path / "results" / "synth"
    make_results(
        root,
        SynthSpec(
            seeds=(0, 1),
            variants={"sn_da": {"siamese_norm": {}}, "da": {"depth_attention": {"stride": 4}}},
            gate={"metric": "eval/lm/demo-heldout/CE loss"},
        ),
        {"sn_da": ArmTruth(offset=-0.05, duplicate_steps=(20,)), "da": ArmTruth(offset=0.02)},
    )
    rs = results.load(root)
    for name in ("runs", "pairs", "comparisons", "matched"):
        getattr(rs, name)
    curves = rs.curves("train/CE loss")
    assert "metrics" not in rs.__dict__  # the long frame: only when asked
    old = _old_long_frame(rs)
    key = ["run", "pair", "metric", "step"]
    new = rs.metrics
    assert list(new.columns) == list(old.columns)
    _arrow_backed(new)
    pd.testing.assert_frame_equal(_plain(new, key), _plain(old, key))

    once = old[old["metric"] == "train/CE loss"].drop_duplicates(["run", "step"])
    once = once.drop(columns=["pair", "metric"])
    _arrow_backed(curves)
    pd.testing.assert_frame_equal(_plain(curves, ["run", "step"]), _plain(once, ["run", "step"]))
    by_pair = rs.curves("train/CE loss", per_pair=True)
    assert len(by_pair) == len(old[old["metric"] == "train/CE loss"])

    run = "1B-s0-sn_da"
    wide = rs.run_metrics(run, ["train/CE loss", "eval/lm/demo-heldout/CE loss"])
    m = rs.results.runs[run].metrics
    assert wide["step"].tolist() == m.steps.tolist()
    got = wide["eval/lm/demo-heldout/CE loss"].to_numpy(dtype=float, na_value=np.nan)
    np.testing.assert_array_equal(got, m.columns["eval/lm/demo-heldout/CE loss"])
    # a key the report never read comes from the run's metrics store, one column
    lr = rs.curves("optim/LR (group 0)", [run])
    assert len(lr) == len(m.steps) and set(lr["run"]) == {run}
    with pytest.raises(KeyError, match="not a run"):
        rs.curves("train/CE loss", ["nope"])
    none = rs.curves("no/such metric")
    assert none.empty and list(none.columns) == list(curves.columns)
