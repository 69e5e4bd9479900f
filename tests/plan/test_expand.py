"""`plan`: expansion into runs/pairs, certificates, FLOPs-matched budgets, atomic plan.json."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from olmoablate.plan.expand import PairingError, build_plan, check_pair, resolve_loop_counts
from olmoablate.plan.identity import certificate_of
from olmoablate.plan.load import load_spec
from olmoablate.testing import MINIMAL_SPEC, REPO

SPECS = sorted((REPO / "specs").glob("*.yaml"))
EXPECTED_BASELINE_PARAMS = {"1B": 1_484_916_736, "3B": 3_503_508_736, "7B": 7_298_617_344}


def _plan(path: Path) -> dict:
    return build_plan(load_spec(path)).as_json()


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_shipped_specs_plan_with_equal_certificates(spec: Path) -> None:
    plan = _plan(spec)
    runs = {r["run_id"]: r for r in plan["runs"]}
    assert plan["pairs"]
    for pair in plan["pairs"]:
        base, var = runs[pair["baseline_run"]], runs[pair["variant_run"]]
        assert certificate_of(base, pair["budget_match"]) == certificate_of(
            var, pair["budget_match"]
        )
        assert pair["certificate"] == certificate_of(base, pair["budget_match"])
        assert base["arm"] == "baseline" and var["arm"] == pair["variant"]
        assert pair["pair_id"] in base["pairs"] and pair["pair_id"] in var["pairs"]
        assert pair["differs"][0] == "architecture"
    for r in plan["runs"]:
        for key in (
            "run_id",
            "pair_id",
            "size",
            "arm",
            "seed",
            "params",
            "non_embedding_params",
            "train_flops_per_token",
            "tokens",
            "steps",
            "gpu_hours",
            "peak_memory_gb",
            "certificate",
        ):
            assert key in r
        assert r["tokens"] == r["steps"] * r["training"]["global_batch_size"]
    assert plan["gates"] and "gate" not in plan and len(plan["spec_sha256"]) == 64


@pytest.mark.parametrize("spec", ["siamese_depth_attention", "looped_olmo"])
def test_big_baseline_params_match_olmo_core(spec: str) -> None:
    from olmo_core.nn.transformer import TransformerConfig

    plan = _plan(REPO / "specs" / f"{spec}.yaml")
    for r in plan["runs"]:
        if r["arm"] == "baseline":
            assert r["params"] == EXPECTED_BASELINE_PARAMS[r["size"]]
            cfg = getattr(TransformerConfig, f"olmo3_{r['size']}")(vocab_size=100352)
            assert r["params"] == cfg.num_params
            assert r["non_embedding_params"] == cfg.num_non_embedding_params
            model = cfg.build(init_device="meta")
            assert r["train_flops_per_token"] == model.num_flops_per_token(
                r["training"]["sequence_length"]
            )


def test_flops_matched_variant_differs_only_in_tokens() -> None:
    plan = _plan(REPO / "specs" / "looped_olmo.yaml")
    pairs = {p["pair_id"]: p for p in plan["pairs"]}
    runs = {r["run_id"]: r for r in plan["runs"]}
    p = pairs["1B-s0-looped_flops"]
    assert p["budget_match"] == "flops" and p["differs"] == ["architecture", "tokens"]
    base, var = runs[p["baseline_run"]], runs[p["variant_run"]]
    assert var["tokens"] > base["tokens"]  # looped b=4,T=2 is cheaper per token than 16 layers
    per_step = var["total_train_flops"] / var["steps"]
    assert abs(var["total_train_flops"] - base["total_train_flops"]) <= per_step
    # the token-matched twin keeps the budget
    assert runs["1B-s0-looped"]["tokens"] == base["tokens"]


def test_pair_with_other_difference_fails() -> None:
    plan = _plan(REPO / "specs" / "demo.yaml")
    runs = {r["run_id"]: r for r in plan["runs"]}
    pair = plan["pairs"][0]
    base, var = runs[pair["baseline_run"]], copy.deepcopy(runs[pair["variant_run"]])
    check_pair(base, var, "tokens")
    var["training"]["optimizer"]["lr"] *= 2
    with pytest.raises(PairingError, match="training.optimizer.lr"):
        check_pair(base, var, "tokens")
    var = copy.deepcopy(runs[pair["variant_run"]])
    var["tokens"] += 1024
    with pytest.raises(PairingError, match="tokens"):
        check_pair(base, var, "tokens")
    check_pair(base, var, "flops")  # allowed when the budget is matched on FLOPs


def test_loop_counts_resolution() -> None:
    assert resolve_loop_counts(["0.5b", "b", "2b", "4b"], 4) == [2, 4, 8, 16]
    assert resolve_loop_counts([1], 2) == [1, 2]


def test_plan_cli_writes_json_atomically(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    spec = REPO / "specs" / "demo.yaml"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "olmoablate",
            "plan",
            str(spec),
            "--format",
            "json",
            "--results-root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    on_disk = json.loads((tmp_path / "demo" / "plan.json").read_text())
    assert shown["runs"] == on_disk["runs"]
    assert not [p for p in (tmp_path / "demo").iterdir() if p.name.endswith(".tmp")]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "olmoablate",
            "plan",
            str(spec),
            "--size",
            "1B",
            "--results-root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert (
        proc.returncode == 2 and "allowed: tiny" in proc.stderr and "Traceback" not in proc.stderr
    )


def test_plan_keeps_preregistered_plan_once_runs_started(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text((MINIMAL_SPEC).read_text())
    root = tmp_path / "results"
    cmd = [sys.executable, "-m", "olmoablate", "plan", str(spec), "--results-root", str(root)]
    assert subprocess.run(cmd, capture_output=True, cwd=REPO).returncode == 0
    before = (root / "minimal" / "plan.json").read_text()
    (root / "minimal" / "runs" / "x").mkdir(parents=True)
    spec.write_text(spec.read_text().replace("{lr: 1.0e-3}", "{lr: 2.0e-3}"))
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "--replan" in proc.stderr
    assert (root / "minimal" / "plan.json").read_text() == before
    assert subprocess.run([*cmd, "--replan"], capture_output=True, cwd=REPO).returncode == 0


@pytest.mark.parametrize("spec", ["siamese_depth_attention", "looped_olmo"])
def test_plan_of_shipped_1b_specs_lists_the_olmo3_downstream_suite(
    spec: str, tmp_path: Path
) -> None:
    """`plan --size 1B` (stdout a pipe, as in a log) names every downstream task the runs score,
    and the list is OLMo 3's: it holds every task of OLMo-core's official OLMo 3 in-loop set
    (the 'fast' group its OLMo-3-1025-7B pretraining script uses) plus the OLMES Core-9 RC tasks."""
    from olmo_core.eval.task_groups import FAST_TASKS, FULL_TASKS_SMALL_COMPUTE

    core9_rc = [t for t in FULL_TASKS_SMALL_COMPUTE[:7] if "_rc_" in t]
    plan = _plan(REPO / "specs" / f"{spec}.yaml")
    tasks = {t for r in plan["runs"] for t in r["evaluation"]["downstream"]}
    assert set(FAST_TASKS) <= tasks and set(core9_rc) <= tasks and len(core9_rc) == 7
    assert all(r["evaluation"]["downstream"] for r in plan["runs"])  # every size, every arm
    res = subprocess.run(
        [sys.executable, "-m", "olmoablate", "plan", str(REPO / "specs" / f"{spec}.yaml")]
        + ["--size", "1B", "--results-root", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout
    lines = [ln for ln in out.splitlines() if ln.startswith("  1B: downstream")]
    assert len(lines) == 1 and f"({len(tasks)} tasks" in lines[0]
    listed = set(lines[0].split("): ", 1)[1].split(", "))
    assert listed == tasks
    assert "…" not in out  # no table cell cut, though the console is 80 columns
    if spec == "looped_olmo":
        assert "LM sets and downstream tasks also at loop counts looped: 2, 4, 8, 16" in out
