"""End to end through the real CLI: spec -> validate -> plan -> submit (local) -> status -> report.

The other test files pin each stage against hand-made inputs; this one proves the stages agree
on their contracts (plan entries the job accepts, metrics the report reads, resolved loop counts).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmoablate.testing import run_cli as _cli
from olmoablate.testing.plans import write_tokens
from olmoablate.testing.synthetic import check_against_report

pytestmark = pytest.mark.slow

SPEC = """\
name: e2e
sizes: [micro]
custom_sizes:
  micro: {d_model: 32, n_layers: 4, n_heads: 4, n_kv_heads: 2, mlp_hidden_size: 64, sliding_window: 16, vocab_size: 512}
seeds: [0]
variants:
  sn_da:
    siamese_norm: {}
    depth_attention: {stride: 2}
  looped:
    looped: {body_layers: 4, loops: 2, tail: 1}
training:
  sequence_length: 32
  tokens: 2048
  global_batch_size: 256
  optimizer: {lr: 0.01}
  schedule: {warmup_steps: 1}
  data: {paths: [data/train.bin], eos_token_id: 510, pad_token_id: 511}
  checkpoint_interval: 4
  wandb: {mode: disabled}
evaluation:
  interval: 4
  lm_sets: {held: [data/held.bin]}
  max_eval_tokens: 512
  loop_counts: [1, 2b]
topology: {gpus_per_node: 0}
gates:                # one verdict per proposal
  sn_da:
    stage: micro
    variant: sn_da
    metric: eval/lm/held/CE loss
    last_n: 2
    max_step_time_overhead: null
    max_peak_memory_overhead: null
  looped:
    stage: micro
    variant: looped
    metric: train/CE loss
    last_n: 2
    max_step_time_overhead: null
    max_peak_memory_overhead: null
"""


def test_spec_to_report(tmp_path: Path) -> None:
    write_tokens(tmp_path / "data" / "train.bin", 20_000, seed=1, vocab=512, eos=510)
    write_tokens(tmp_path / "data" / "held.bin", 2_000, seed=2, vocab=512, eos=510)
    (tmp_path / "e2e.yaml").write_text(SPEC)

    assert _cli("validate", "e2e.yaml", cwd=tmp_path).returncode == 0
    assert _cli("plan", "e2e.yaml", cwd=tmp_path).returncode == 0
    sub = _cli(
        "submit",
        "e2e.yaml",
        "--executor",
        "local",
        "--parallel",
        "2",
        "--no-progress",
        cwd=tmp_path,
    )
    assert sub.returncode == 0, sub.stdout + sub.stderr
    again = _cli("submit", "e2e.yaml", "--executor", "local", "--no-progress", cwd=tmp_path)
    assert "submitted 0 job(s)" in again.stdout

    status = json.loads(_cli("status", "e2e.yaml", "--json", cwd=tmp_path).stdout)
    rows = status if isinstance(status, list) else status.get("runs", [])
    assert {r["state"] for r in rows} == {"completed"}, rows

    res = tmp_path / "results" / "e2e"
    looped = [
        json.loads(x)
        for x in (res / "runs" / "micro-s0-looped" / "metrics.jsonl").read_text().splitlines()
    ]
    last = looped[-1]
    assert last["step"] == 8
    for n in (1, 2, 4):  # [1, 2b] with b = 2 resolves to 1, 2 (always b) and 4
        assert f"eval/lm/held/CE loss (loops={n})" in last
    fp = {
        arm: (res / "runs" / f"micro-s0-{arm}" / "fingerprints.jsonl").read_text()
        for arm in ("baseline", "sn_da", "looped")
    }
    assert fp["baseline"] == fp["sn_da"] == fp["looped"]

    rep = _cli("report", "e2e.yaml", cwd=tmp_path)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    gate = json.loads((res / "gate.json").read_text())
    assert gate["stage"] == "micro" and gate["verdict"] in {"proceed", "stop", "inconclusive"}
    assert [(g["name"], g["metric"]) for g in gate["gates"]] == [
        ("sn_da", "eval/lm/held/CE loss"),
        ("looped", "train/CE loss"),
    ]
    assert set(gate["verdicts"]) == {"sn_da", "looped"}
    assert (res / "report.md").read_text().splitlines()[2].startswith("**Gate verdicts: sn_da ")
    for name in ("report.md", "report.html", "comparison.csv"):
        assert (res / name).stat().st_size > 0
    assert "gate verdicts: sn_da: " in rep.stdout

    # the notebook API on this real folder says what comparison.csv and gate.json say
    rs = check_against_report(res)
    looped_rows = rs.metrics[rs.metrics["run"] == "micro-s0-looped"]
    assert "eval/lm/held/CE loss (loops=4)" in set(looped_rows["metric"])
    assert set(rs.runs["state"]) == {"completed"}

    # the effective-depth diagnostic: every arm at its last eval point, the lens's last layer
    # (loop) is the arm's own eval CE there, and the report shows it as a diagnostic with a figure
    depth = rs.depth
    assert set(depth["run"]) == {f"micro-s0-{a}" for a in ("baseline", "sn_da", "looped")}
    assert set(depth["step"]) == {8}
    for run, kind, idx in (
        ("baseline", "layer", range(5)), ("sn_da", "layer", range(5)), ("looped", "loop", (1, 2))
    ):  # fmt: skip
        rows = depth[(depth["run"] == f"micro-s0-{run}") & (depth["kind"] == kind)]
        assert sorted(rows["index"]) == list(idx), (run, rows)
        n = idx[-1]
        own = [json.loads(x) for x in (res / "runs" / f"micro-s0-{run}" / "metrics.jsonl")
               .read_text().splitlines()][-1]["eval/lm/held/CE loss"]  # fmt: skip
        assert float(rows[rows["index"] == n]["value"].iloc[0]) == pytest.approx(own, abs=1e-4)
    da = depth[(depth["run"] == "micro-s0-sn_da") & (depth["kind"] == "da_weight")]
    assert len(da) and ((da["value"] >= 0) & (da["value"] <= 1)).all()
    md = (res / "report.md").read_text()
    assert "## Effective depth (diagnostic)" in md and "not a gate input" in md
    assert (res / "plots" / "depth__micro__held.png").stat().st_size > 0
