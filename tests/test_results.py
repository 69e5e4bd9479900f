"""`olmoablate.results`: the DataFrames agree with what `report` wrote (comparison.csv, gate.json)
and, through an independent path (the long-form metrics), with the numbers behind them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from olmoablate.io import write_json_atomic
from olmoablate.testing.results_check import check_against_report
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results


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


def test_results_import_stays_out_of_the_cli() -> None:
    """validate/plan/status must not pay for pandas: the CLI never imports olmoablate.results."""
    code = (
        "import sys, olmoablate.cli; "
        "assert 'olmoablate.results' not in sys.modules and 'pandas' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
