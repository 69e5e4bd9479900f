"""`plan`/`submit` from the command line: totals and the budget, --set round trip through the
report, the compact and wide tables, SPEC by name, the results-root environment variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from olmoablate.testing import REPO

from .test_feasibility import GPU_SPEC

TINY_GATED = """\
name: rt
sizes: [tiny]
custom_sizes:
  tiny: {d_model: 64, n_layers: 8, n_heads: 4, n_kv_heads: 2, mlp_hidden_size: 192, sliding_window: 32}
seeds: [0, 1, 2]
variants:
  v:
    depth_attention: {stride: 2}
training:
  sequence_length: 64
  tokens: 16384              # 64 steps: enough for a step-time interval
  global_batch_size: 256
  optimizer: {lr: 1.0e-3}
  data: {paths: [x.bin]}
evaluation:
  interval: 4
  lm_sets: {heldout: [h.bin]}
topology: {gpus_per_node: 0}
gate:
  stage: tiny
  metric: eval/lm/heldout/CE loss
  min_effect: 0.01
  last_n: 3
"""


def _cli(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "olmoablate", *args], capture_output=True, text=True, cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )  # fmt: skip


def test_budget_exceeded_refused_by_validate_strict_and_submit(tmp_path: Path) -> None:
    spec = tmp_path / "feas.yaml"
    spec.write_text(GPU_SPEC.replace("gate:", "budget: {max_gpu_hours: 0.1}\ngate:"))
    plan = json.loads(_cli("plan", str(spec), "--results-root", str(tmp_path / "r"),
                           "--format", "json").stdout)  # fmt: skip
    total = plan["totals"]["total"]
    assert total["runs"] == 4 and total["gpu_hours"] > 0.1
    assert total["gpu_hours"] == round(sum(r["gpu_hours"] for r in plan["runs"]), 3)
    assert plan["totals"]["by_size"]["190M"]["stage"] == "gate stage"
    want = f"the whole spec needs {total['gpu_hours']:,.1f} GPU-hours (4 runs) > budget.max_gpu_hours = 0.1"
    proc = _cli("validate", str(spec))
    assert proc.returncode == 0 and want in proc.stderr and "warning: budget exceeded" in proc.stderr
    proc = _cli("validate", str(spec), "--strict")
    assert proc.returncode == 2 and want in proc.stderr and "error (--strict): budget" in proc.stderr
    proc = _cli("submit", str(tmp_path / "r" / "feas"), "--dry-run")
    assert proc.returncode == 2, proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert want in line and "nothing submitted" in line
    assert not (tmp_path / "r" / "feas" / "slurm").exists()
    # per stage: a size's own limit, and an unknown size key
    proc = _cli("validate", str(spec), "--set", "budget.max_gpu_hours={total: 100, 190M: 0.1}")
    assert "size 190M (gate stage) needs" in proc.stderr and "budget.max_gpu_hours.190M = 0.1" in proc.stderr
    proc = _cli("validate", str(spec), "--set", "budget.max_gpu_hours={307M: 1}")
    assert proc.returncode == 2 and "budget.max_gpu_hours.307M: unknown size key 307M" in proc.stderr
    # within the budget: submit gets past the check (a dry run renders without a cluster)
    assert _cli("plan", str(spec), "--set", "budget.max_gpu_hours=100",
                "--results-root", str(tmp_path / "r")).returncode == 0  # fmt: skip
    proc = _cli("submit", str(spec), "--set", "budget.max_gpu_hours=100", "--dry-run",
                "--results-root", str(tmp_path / "r"))  # fmt: skip
    assert "budget exceeded" not in proc.stderr


def test_set_round_trip_through_the_report(tmp_path: Path) -> None:
    """The override is in plan.json, changes spec_sha256, and the report decides with the
    overridden gate, verified (no pre-registration warning: it re-applies the override)."""
    from olmoablate.plan.planfile import Plan
    from olmoablate.testing.synthetic import ArmTruth, SynthSpec, write_run

    spec = tmp_path / "s.yaml"
    spec.write_text(TINY_GATED)
    roots = tmp_path / "res"
    assert _cli("plan", str(spec), "--results-root", str(roots)).returncode == 0
    plain = Plan.load(roots / "rt")
    proc = _cli("plan", str(spec), "--set", "gate.min_effect=0.02", "--results-root", str(roots))
    assert proc.returncode == 0, proc.stderr
    plan = Plan.load(roots / "rt")
    assert plan.overrides == ["gate.min_effect=0.02"] and plan.gate is not None
    assert plan.gate.min_effect == 0.02 and plain.gate is not None and plain.gate.min_effect == 0.01
    assert plan.spec_sha256 != plain.spec_sha256 and plan.gate_sha256 != plain.gate_sha256
    assert "overrides" not in json.loads((roots / "rt" / "plan.json").read_text()) or plan.overrides
    synth = SynthSpec(name="rt", sizes=("tiny",), seeds=(0, 1, 2), steps=64, eval_interval=4,
                      global_batch_size=256, eval_set="heldout")  # fmt: skip
    for r in plan.runs:
        write_run(roots / "rt", synth, r, ArmTruth(offset=-0.5 if r.arm == "v" else 0.0))
    proc = _cli("report", str(roots / "rt"), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    gate = json.loads((roots / "rt" / "gate.json").read_text())
    assert gate["verdict"] == "proceed" and gate["preregistration_broken"] is None
    assert gate["warnings"] == [] and gate["gate_sha256"] == plan.gate_sha256
    assert any("min_effect 0.02" in r for r in gate["reasons"])
    # submit --set checks that the plan is the one made with exactly these overrides
    proc = _cli("submit", str(spec), "--set", "gate.min_effect=0.03", "--dry-run",
                "--results-root", str(roots))  # fmt: skip
    assert proc.returncode == 2 and "run `olmoablate plan" in proc.stderr


def test_compact_table_wide_and_by_name(tmp_path: Path) -> None:
    env = {"OLMOABLATE_RESULTS_ROOT": str(tmp_path / "r"), "COLUMNS": "100"}
    proc = _cli("plan", "specs/siamese_depth_attention.yaml", "--skip-paths", env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r" / "siamese_depth_attention" / "plan.json").is_file()
    def table_width(text: str) -> int:  # text lines are never wrapped by design; tables are
        return max(len(line) for line in text.splitlines() if line[:1] in "┏┃┡│└")

    width = table_width(proc.stdout)
    assert width <= 100, width
    assert "25,287" in proc.stdout or "25,28" in proc.stdout  # the spec's total GPU-hours
    wide = _cli("plan", "specs/siamese_depth_attention.yaml", "--wide", "--skip-paths", env=env)
    assert table_width(wide.stdout) > width + 50, (width, table_width(wide.stdout))
    assert "certificate" in wide.stdout
    # every command names the experiment the same ways: here by name, root from the env var
    again = _cli("plan", "siamese_depth_attention", "--skip-paths", env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    status = _cli("status", "siamese_depth_attention", "--json", env=env, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    valid = _cli("validate", "siamese_depth_attention", "--skip-paths", env=env, cwd=tmp_path)
    assert valid.returncode == 0 and valid.stdout.startswith(f"ok  {REPO}/specs/"), valid.stderr


def test_plan_strict_writes_nothing_when_a_check_fails(tmp_path: Path) -> None:
    spec = tmp_path / "feas.yaml"
    spec.write_text(GPU_SPEC)
    proc = _cli("plan", str(spec), "--set", "slurm.time=5", "--strict",
                "--results-root", str(tmp_path / "r"))  # fmt: skip
    assert proc.returncode == 2
    assert "slurm.time: error (--strict)" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith("under --strict; no plan written")
    assert not (tmp_path / "r").exists()


def test_plan_tables_show_exact_params_and_a_difference_the_rounding_hides(
    tmp_path: Path,
) -> None:
    """Issue 35 case 15: value residual adds n_layers - 1 = 3 scalars, which "K" rounding hides
    in both arms; the compact table shows the difference exactly, `--wide` every count exactly."""
    env = {"PYTHONPATH": f"{REPO}:{REPO / 'examples' / 'value-residual'}", "COLUMNS": "200"}
    spec = str(REPO / "examples" / "value-residual" / "spec.yaml")
    root = ["--results-root", str(tmp_path / "r"), "--skip-paths"]
    compact = _cli("plan", spec, *root, env=env)
    assert compact.returncode == 0, compact.stderr
    runs = json.loads((tmp_path / "r" / "value_residual_demo" / "plan.json").read_text())["runs"]
    by_arm = {r["arm"]: r for r in runs}
    base, var = by_arm["baseline"]["params"], by_arm["vres"]["params"]
    assert var - base == 3
    rows = {line.split("│")[2].strip(): line for line in compact.stdout.splitlines()
            if line.count("│") > 3 and "tiny" in line}  # fmt: skip
    assert " +3 " in rows["vres"] and "+" not in rows["baseline"], compact.stdout
    wide = _cli("plan", spec, "--wide", *root, env=env)
    assert wide.returncode == 0, wide.stderr
    assert f"{base:,}" in wide.stdout and f"{var:,}" in wide.stdout, wide.stdout
