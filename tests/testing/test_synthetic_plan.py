"""The one synthetic-plan builder makes plans the contract accepts, certified as `plan` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmoablate.plan.identity import certificate_of
from olmoablate.plan.planfile import Plan
from olmoablate.testing import plans as sp
from olmoablate.testing.plans import make_plan, run_entry
from olmoablate.testing.synthetic import SynthSpec, synthetic_plan


def test_entries_are_certified_over_their_plan_json_form() -> None:
    base = sp.make_run_entry("tiny-s0-baseline", "baseline")
    var = sp.make_run_entry("tiny-s0-sn", "sn", {"siamese_norm": {"output_norms": False}})
    assert base.certificate == base.certificate_now() == certificate_of(base.as_json())
    assert var.certificate == base.certificate  # the arms differ only in architecture
    other = sp.make_run_entry("tiny-s0-x", "x", training={"optimizer": {"lr": 0.02}})
    assert other.certificate != base.certificate
    assert base.training.optimizer.lr == 0.01 and base.evaluation.interval == 6


def test_invalid_knobs_fail_with_the_contract_s_error() -> None:
    with pytest.raises(ValueError, match="wormholes"):
        sp.make_run_entry("r", "x", {"wormholes": {}})


def test_plan_pairs_gates_and_round_trip(tmp_path: Path) -> None:
    runs = [
        sp.make_run_entry("tiny-s0-baseline", "baseline", pairs=["tiny-s0-a", "tiny-s0-b"]),
        sp.make_run_entry("tiny-s0-a", "a", {"layers": {"n_layers": 8}}, pair_id="tiny-s0-a"),
        sp.make_run_entry(
            "tiny-s0-b",
            "b",
            {"siamese_norm": {}},
            pair_id="tiny-s0-b",
            budget_match="flops",
            steps=10,
        ),
        sp.make_run_entry("tiny-s1-baseline", "baseline", seed=1, role="aa"),
    ]
    plan = sp.build_plan(
        runs,
        gates={"a": {"stage": "tiny", "variant": "a"}, "b": {"stage": "tiny", "variant": "b"}},
    )
    assert [(p.pair_id, p.baseline_run, p.differs) for p in plan.pairs] == [
        ("tiny-s0-a", "tiny-s0-baseline", ["architecture"]),
        ("tiny-s0-b", "tiny-s0-baseline", ["architecture", "tokens"]),
    ]
    assert plan.pair("tiny-s0-b").certificate == certificate_of(runs[2].as_json(), "flops")
    assert plan.budget.variants == {"b": "flops"} and plan.aa_runs == ["tiny-s1-baseline"]
    assert [g.name for g in plan.gates] == ["a", "b"] and plan.gate == plan.gates[0].gate
    assert plan.seeds == [0] and plan.sizes == ["tiny"]
    plan.write(tmp_path / "plan.json")
    again = Plan.load(tmp_path)
    assert again.as_json() == plan.as_json()


def test_report_synthetic_plans_load(tmp_path: Path) -> None:
    spec = SynthSpec(
        sizes=("1B", "3B"),
        seeds=(0, 1),
        variants={"sn": {"siamese_norm": {}}, "lp": {"looped": {"body_layers": 4, "loops": 4}}},
        budget_match="flops",
        gate={"min_effect": 0.01},
        aa_seeds=1,
    )
    plan = synthetic_plan(spec)
    plan.write(tmp_path / "plan.json")
    loaded = Plan.load(tmp_path / "plan.json")
    assert len(loaded.runs) == 2 * 2 * 3 + 1 and len(loaded.pairs) == 8
    assert loaded.run("1B-s0-baseline").size_dims.d_model == 2048  # the OLMo 3 1B preset
    assert loaded.run("1B-s0-lp").params == 400_000_000
    assert loaded.gates[0].name == "gate" and loaded.gate is not None
    assert loaded.gate.stage == "1B" and loaded.gate.min_effect == 0.01
    assert all(r.certificate == r.certificate_now() for r in loaded.runs)


def test_plan_fixture_writes_contract_plans(tmp_path: Path) -> None:
    runs = [
        run_entry("tiny-s0-baseline", "baseline", {}),
        run_entry("tiny-s0-da", "da", {"depth_attention": {"stride": 2}}),
    ]
    path = make_plan(tmp_path, runs, train_tokens=500, heldout_tokens=200)
    plan = Plan.load(path)
    assert plan.workdir == str(tmp_path) and plan.pairs[0].variant_run == "tiny-s0-da"
    assert (tmp_path / "data" / "train.bin").stat().st_size == 1000  # uint16 tokens
    bad = run_entry("r", "x", {"wormholes": {}})  # a stage's own refusal test gets the raw dict
    assert bad["architecture"] == {"wormholes": {}}
    with pytest.raises(ValueError, match="wormholes"):
        make_plan(tmp_path, [bad])
