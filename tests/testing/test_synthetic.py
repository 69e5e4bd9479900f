"""The synthetic results generator writes exactly the documented file formats."""

from __future__ import annotations

import json
from pathlib import Path

from olmoablate.io import sha256_of
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results


def test_files_follow_design_md(tmp_path: Path) -> None:
    plan = make_results(
        tmp_path, SynthSpec(steps=40, eval_interval=10), {"sn_da": ArmTruth(duplicate_steps=(5,))}
    )
    assert plan["gates"][0]["gate_sha256"] == sha256_of(plan["gates"][0]["gate"])
    assert {p["baseline_run"] for p in plan["pairs"]} == {"1B-s0-baseline"}
    rd = tmp_path / "runs" / "1B-s0-sn_da"
    rows = [json.loads(line) for line in (rd / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 41  # one duplicated step
    for r in rows:
        assert {
            "step",
            "tokens",
            "train/CE loss",
            "optim/total grad norm",
            "step_time_s",
            "peak_memory_gb",
        } <= set(r)
    assert sum("eval/lm/demo-heldout/CE loss" in r for r in rows) == 4
    fps = [json.loads(line) for line in (rd / "fingerprints.jsonl").read_text().splitlines()]
    assert set(fps[0]) == {"step", "tokens", "sha256"} and len(fps[0]["sha256"]) == 64
    status = json.loads((rd / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == 40
    assert json.loads((rd / "summary.json").read_text())["mean_step_time_s"] == 0.5
