"""End-to-end verdicts on synthetic results folders with known truth (collect -> compare -> gate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from olmoablate.io import read_json
from olmoablate.plan.planfile import Plan
from olmoablate.report.assemble import Report, build, write_next_plan
from olmoablate.report.collect import collect
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results

EVAL = "eval/lm/demo-heldout/CE loss"
GATE = {
    "metric": EVAL,
    "min_effect": 0.01,
    "promote_to": ["3B", "7B"],
    "noise": {"floor": {"sd": 0.005, "known": True}},  # one-seed tests: the paired-delta sd, declared
}


def run(tmp_path: Path, spec: SynthSpec, truths: dict[str, ArmTruth]) -> Report:
    root = tmp_path / spec.name
    make_results(root, spec, truths)
    report = build(collect(root, use_cache=False, workers=1))
    write_next_plan(report, root)
    return report


def test_clear_improvement_proceeds_and_plans_next_sizes(tmp_path: Path) -> None:
    spec = SynthSpec(sizes=("1B", "3B"), gate=GATE)
    rep = run(tmp_path, spec, {"sn_da": ArmTruth(offset=-0.05)})
    assert rep.verdict == "proceed", rep.reasons
    est = rep.variant_verdicts[0].checks[0].estimate
    assert est is not None and est.mean == pytest.approx(0.05, abs=0.005)
    nxt = read_json(tmp_path / "synth" / "next_plan.json")
    assert {r["size"] for r in nxt["runs"]} == {"3B"}
    # a real plan: what `submit next_plan.json` reads (the missing 7B is in the next steps)
    promoted = Plan.load(tmp_path / "synth" / "next_plan.json")
    assert {r.size for r in promoted.runs} == {"3B"} and "promoted at" in promoted.description
    assert "olmoablate submit specs/synth.yaml --size 3B" in rep.next_steps
    assert any("7B" in s and "not in the plan" in s for s in rep.next_steps)
    # certificates carried over unchanged
    plan = read_json(tmp_path / "synth" / "plan.json")
    by_id = {r["run_id"]: r["certificate"] for r in plan["runs"]}
    assert all(r["certificate"] == by_id[r["run_id"]] for r in nxt["runs"])


def test_delta_inside_noise_is_inconclusive(tmp_path: Path) -> None:
    rep = run(tmp_path, SynthSpec(gate=GATE), {"sn_da": ArmTruth(offset=-0.012, eval_noise=0.05)})
    assert rep.verdict == "inconclusive", rep.reasons
    assert not (tmp_path / "synth" / "next_plan.json").exists()


def test_loss_spike_storm_stops_despite_better_loss(tmp_path: Path) -> None:
    spec = SynthSpec(gate=GATE, steps=600, eval_interval=50)
    spikes = list(range(200, 600, 20))
    rep = run(tmp_path, spec, {"sn_da": ArmTruth(offset=-0.05, spikes_at=spikes)})
    assert rep.verdict == "stop", rep.reasons
    var = rep.pairs[0].stability["variant"].health
    assert var.spikes >= 15  # detected from the metrics, not taken from the job's count
    assert rep.pairs[0].stability["baseline"].health.spikes <= 3
    assert any("loss spikes > max_loss_spikes 3" in r for r in rep.reasons)
    # the better loss is still reported
    assert rep.variant_verdicts[0].checks[0].outcome == "pass"


def test_step_time_overhead_20pct_stops(tmp_path: Path) -> None:
    rep = run(tmp_path, SynthSpec(gate=GATE), {"sn_da": ArmTruth(offset=-0.05, step_time_s=0.6)})
    assert rep.verdict == "stop"
    assert any("step time overhead +20.0%" in r for r in rep.reasons)
    cost = {c["cost"]: c for c in rep.pairs[0].cost}
    assert cost["step time (s)"]["ratio"] == pytest.approx(1.2)


def test_mismatched_fingerprints_make_pair_invalid(tmp_path: Path) -> None:
    rep = run(tmp_path, SynthSpec(gate=GATE), {"sn_da": ArmTruth(offset=-0.05, data_salt="x")})
    pair = rep.pairs[0]
    assert not pair.valid
    assert any("data fingerprints differ" in r for r in pair.invalid_reasons)
    assert rep.verdict == "inconclusive"
    assert rep.variant_verdicts[0].excluded_pairs == [pair.pair_id]


def test_changed_setting_makes_pair_invalid(tmp_path: Path) -> None:
    root = tmp_path / "synth"
    make_results(root, SynthSpec(gate=GATE), {"sn_da": ArmTruth(offset=-0.05)})
    plan = read_json(root / "plan.json")
    for r in plan["runs"]:
        if r["arm"] == "sn_da":
            r["training"]["optimizer"]["lr"] = 0.006
    (root / "plan.json").write_text(json.dumps(plan))
    rep = build(collect(root, use_cache=False))
    assert not rep.pairs[0].valid
    assert any("training.optimizer.lr" in r for r in rep.pairs[0].invalid_reasons)


def test_multi_seed_uses_seed_spread(tmp_path: Path) -> None:
    spec = SynthSpec(gate=GATE, seeds=(0, 1, 2))
    rep = run(tmp_path, spec, {"sn_da": ArmTruth(offset=-0.05, seed_offset=0.004)})
    est = rep.variant_verdicts[0].checks[0].estimate
    assert est is not None and est.n_seeds == 3 and est.dof == 2
    assert est.sd == pytest.approx(0.004, rel=0.3)
    assert rep.verdict == "proceed"


def test_partial_run_compared_up_to_common_tokens(tmp_path: Path) -> None:
    spec = SynthSpec(gate=GATE)
    rep = run(tmp_path, spec, {"sn_da": ArmTruth(offset=-0.05, state="running", stop_at=120)})
    p = rep.pairs[0]
    assert p.matched_tokens == 120 * spec.global_batch_size
    assert p.train.x[-1] <= 120 * spec.global_batch_size
    assert max(p.evals[EVAL].x) == 120 * spec.global_batch_size
    assert rep.verdict == "inconclusive"
    assert any("not complete" in r for r in rep.reasons)


def test_missing_run_and_damaged_files_are_data_issues(tmp_path: Path) -> None:
    spec = SynthSpec(gate=GATE, seeds=(0, 1))
    truths = {
        "1B-s0-sn_da": ArmTruth(offset=-0.05, duplicate_steps=(50, 51, 52), truncate_last=True),
        "sn_da": ArmTruth(offset=-0.05),
    }
    root = tmp_path / "synth"
    make_results(root, spec, truths)
    import shutil

    shutil.rmtree(root / "runs" / "1B-s1-sn_da")
    rep = build(collect(root, use_cache=False))
    issues = "\n".join(rep.results.issues)
    assert "1B-s1-sn_da: run directory missing" in issues
    assert "truncated last line" in issues and "3 duplicate step rows" in issues
    p0 = next(p for p in rep.pairs if p.pair_id == "1B-s0-sn_da")
    assert len(p0.variant.metrics or []) == spec.steps  # duplicates counted once
    assert p0.variant.column("train/CE loss").max() < 50  # the stale 99.0 rows lost  # type: ignore[union-attr]
    assert rep.verdict in ("proceed", "inconclusive")


def _looped_spec(rule: str = "quality_per_param", **gate: Any) -> SynthSpec:
    return SynthSpec(
        name="loop",
        variants={
            "looped": {
                "looped": {"body_layers": 4, "loops": 4, "tail": 2, "input_injection": True}
            },
            "ref4": {"layers": {"n_layers": 4}},
        },
        gate={**GATE, "rule": rule, "reference": "ref4", "tolerance": 0.02, **gate},
    )


def test_quality_per_param_proceeds_and_reports_loops(tmp_path: Path) -> None:
    truths = {
        "looped": ArmTruth(
            offset=0.01, loop_eval={2: 0.3, 4: 0.0, 8: 0.05}, h_norms=(1.0, 2.0, 3.0, 4.0)
        ),
        "ref4": ArmTruth(offset=0.08),
    }
    rep = run(tmp_path, _looped_spec(), truths)
    assert [v.variant for v in rep.variant_verdicts] == ["looped"]  # the reference is not gated
    assert rep.verdict == "proceed", rep.reasons
    lp = next(p for p in rep.pairs if p.variant_name == "looped").looped
    assert lp is not None and lp["trained_loops"] == 4
    s = lp["sets"][EVAL]
    assert s["loops"] == [2, 4, 8]
    assert s["post_horizon_divergence"] == pytest.approx(0.05, abs=1e-9)
    assert list(lp["h_norm"]) == [1, 2, 3, 4]
    # parameters and FLOPs are reported separately
    assert "unique parameters" in rep.notes[0] and "0.40x of reference" in rep.notes[0]
    assert "training FLOPs" in rep.notes[1] and "not saved" in rep.notes[1]


def test_quality_per_param_stops_when_far_worse_than_baseline(tmp_path: Path) -> None:
    truths = {"looped": ArmTruth(offset=0.10), "ref4": ArmTruth(offset=0.2)}
    rep = run(tmp_path, _looped_spec(), truths)
    assert rep.verdict == "stop"
    assert any("clearly worse than tolerance" in r for r in rep.reasons)


def test_quality_per_param_stops_when_reference_is_as_good(tmp_path: Path) -> None:
    truths = {"looped": ArmTruth(offset=0.01), "ref4": ArmTruth(offset=0.005)}
    rep = run(tmp_path, _looped_spec(), truths)
    assert rep.verdict == "stop"
    assert rep.variant_verdicts[0].checks[0].outcome == "stop"


def test_flops_budget_adds_flops_axis(tmp_path: Path) -> None:
    spec = SynthSpec(gate=GATE, budget_match="flops")
    rep = run(tmp_path, spec, {"sn_da": ArmTruth(offset=-0.05)})
    p = rep.pairs[0]
    assert p.valid, p.invalid_reasons
    assert p.train_flops is not None and len(p.train_flops) > 0
    assert "measured (throughput/total petaflops)" in p.flops_label
    assert EVAL in p.evals_flops


def test_consistency_across_sizes(tmp_path: Path) -> None:
    spec = SynthSpec(sizes=("1B", "3B", "7B"), gate=GATE, seeds=(0, 1))
    rep = run(tmp_path, spec, {"sn_da": ArmTruth(offset=-0.05)})
    assert [r.size for r in rep.size_rows] == ["1B", "3B", "7B"]
    assert rep.consistent == {"sn_da": True}
    # one seed: the declared floor holds at the stage size only, so 3B/7B have no bound
    one = run(tmp_path, SynthSpec(name="one", sizes=("1B", "3B"), gate=GATE), {})
    assert one.consistent == {"sn_da": None}
    spec2 = SynthSpec(name="mixed", sizes=("1B", "3B"), gate=GATE, seeds=(0, 1))
    rep2 = run(
        tmp_path,
        spec2,
        {"1B-s0-sn_da": ArmTruth(offset=-0.05), "3B-s0-sn_da": ArmTruth(offset=0.05)},
    )
    assert rep2.consistent == {"sn_da": False}


def test_no_pairs_at_stage(tmp_path: Path) -> None:
    rep = run(tmp_path, SynthSpec(gate={**GATE, "stage": "7B"}), {})
    assert rep.verdict == "inconclusive"
    assert "no pairs at the stage size" in rep.reasons[0]


def test_train_metric_gate_uses_interval_means(tmp_path: Path) -> None:
    gate = {**GATE, "metric": "train/CE loss"}
    rep = run(tmp_path, SynthSpec(gate=gate), {"sn_da": ArmTruth(offset=-0.05, train_noise=0.02)})
    ev = rep.evidence["sn_da"][0]
    assert len(ev.improvement) == 3
    # window means of 20 steps: noise 0.02*sqrt(2/20) ~ 0.006 around the true 0.05
    assert all(abs(x - 0.05) < 0.03 for x in ev.improvement)
    assert rep.verdict == "proceed", rep.reasons


def test_completed_arm_short_of_its_tokens_is_out_of_the_gate(tmp_path: Path) -> None:
    """status.json says completed, but metrics.jsonl ends at step 120 of 200 (truncated): the
    arms would be matched at different points of their schedules. The pair is INVALID and out
    of the gate, unless the gate allows partial pairs (then compared at the common tokens)."""
    short = {"sn_da": ArmTruth(offset=-0.05, state="completed", stop_at=120)}
    rep = run(tmp_path / "strict", SynthSpec(gate=GATE), short)
    pair = rep.pairs[0]
    assert not pair.valid and rep.verdict == "inconclusive"
    (why,) = [r for r in pair.invalid_reasons if "planned tokens" in r]
    assert why.startswith("variant 1B-s0-sn_da is completed but its metrics end at"), why
    assert rep.variant_verdicts[0].excluded_pairs == [pair.pair_id]
    allowed = run(
        tmp_path / "allowed", SynthSpec(gate={**GATE, "allow_partial_pairs": True}), short
    )
    assert allowed.pairs[0].valid
    assert any("partial pair allowed" in n for n in allowed.pairs[0].notes)
    # the pre-registered gate hash of gates without the field is unchanged by it
    from olmoablate.plan.gate import Gate

    assert "allow_partial_pairs" not in Gate(stage="1B").model_dump(mode="json")


def test_nan_final_eval_is_a_data_issue_and_never_a_silent_fallback(tmp_path: Path) -> None:
    """Issue 35, case 9: a NaN final eval in metrics.jsonl was left out of the curves without a
    word ("Data issues: none", "non-finite: no") and the gate decided on the points before it.
    Now the data issues name it, the stability table says it, and the gate keeps that pair out
    with the reason (collect -> compare -> evidence)."""
    spec = SynthSpec(seeds=(0, 1), gate=GATE)
    root = tmp_path / spec.name
    make_results(root, spec, {"sn_da": ArmTruth(offset=-0.05)})
    metrics = root / "runs" / "1B-s0-sn_da" / "metrics.jsonl"
    rows = metrics.read_text().splitlines()
    last = json.loads(rows[-1])
    assert last["step"] == spec.steps and EVAL in last
    rows[-1] = rows[-1].replace(f'"{EVAL}": {last[EVAL]!r}', f'"{EVAL}": NaN', 1)
    metrics.write_text("\n".join(rows) + "\n")

    results = collect(root, use_cache=False, workers=1)
    issues = [i for i in results.issues if "NaN/inf" in i]
    assert issues == [
        f"1B-s0-sn_da: metrics.jsonl holds {EVAL} as NaN/inf at 1 point(s): left out of the "
        "curves; a pair whose gate metric has one is kept out of the gate"
    ]
    rep = build(results)
    (pair,) = [p for p in rep.pairs if p.pair_id == "1B-s0-sn_da"]
    assert pair.stability["variant"].health.nonfinite_text() == f"eval: {EVAL} x1"
    assert pair.stability["baseline"].health.nonfinite_text() is False
    (vv,) = rep.variant_verdicts
    assert vv.excluded_pairs == ["1B-s0-sn_da"] and vv.pairs == ["1B-s1-sn_da"], vv
    why = " ".join(vv.reasons)
    assert f"variant 1B-s0-sn_da: gate metric {EVAL} is NaN/inf at 1 logged point(s)" in why
    assert "does not fall back to other points" in why
