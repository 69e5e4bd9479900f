"""The report reads a run reused from another spec as its own, only while its identity matches
(`olmoablate.report.prereg`), and checks pairs in identity terms."""

from __future__ import annotations

from pathlib import Path

from olmoablate.plan.planfile import Plan
from olmoablate.plan.store import identify
from olmoablate.report.assemble import build
from olmoablate.report.collect import collect
from olmoablate.testing.synthetic import (
    ArmTruth,
    SynthSpec,
    make_results,
    synthetic_plan,
    write_run,
)

VERSIONS = {"olmoablate": "0.1.0", "ai2-olmo-core": "3.0.0", "torch": "2.13.0"}
GATE = {"metric": "eval/lm/demo-heldout/CE loss", "min_effect": 0.01, "noise": {"floor": {"sd": 0.005, "known": True}}}
BASE = "1B-s0-baseline"


def _identified(plan: Plan) -> Plan:
    return plan.model_copy(update={"identity": identify(plan, plan.workdir, VERSIONS)})


def _store(tmp_path: Path) -> tuple[Path, Path]:
    store = tmp_path / "results"
    a = SynthSpec(name="a", gate=GATE)
    make_results(store / "a", a, {"sn_da": ArmTruth(offset=-0.05)})
    _identified(Plan.load(store / "a")).write(store / "a" / "plan.json")
    b = SynthSpec(name="b", gate=GATE, variants={"da": {"depth_attention": {"stride": 2}}})
    plan_b = _identified(synthetic_plan(b))
    assert plan_b.identity is not None
    ident = plan_b.identity.model_copy(update={"reused": {BASE: f"a/runs/{BASE}"}})
    plan_b = plan_b.model_copy(update={"identity": ident})
    plan_b.write(store / "b" / "plan.json")
    write_run(store / "b", b, plan_b.run("1B-s0-da"), ArmTruth(offset=-0.05))
    return store / "a", store / "b"


def test_reused_baseline_is_read_from_its_owner(tmp_path: Path) -> None:
    a, b = _store(tmp_path)
    res = collect(b, use_cache=False, workers=1)
    assert res.runs[BASE].directory == a / "runs" / BASE
    assert res.reuse_problems == {}
    rep = build(res)
    assert rep.invalid_pairs == [] and rep.verdict == "proceed", rep.reasons


def test_a_reused_run_whose_identity_moved_is_not_taken(tmp_path: Path) -> None:
    a, b = _store(tmp_path)
    doc = Plan.load(a).as_json()
    doc["identity"]["runs"][BASE] = "0" * 64  # a was re-planned into another run
    Plan.from_json(doc).write(a / "plan.json")
    rep = build(collect(b, use_cache=False, workers=1))
    assert [p.pair_id for p in rep.invalid_pairs] == ["1B-s0-da"]
    assert "has identity 000000000000 in its plan" in rep.invalid_pairs[0].invalid_reasons[0]
    assert rep.verdict != "proceed"


def test_an_arm_edited_after_planning_breaks_the_pair_in_identity_terms(tmp_path: Path) -> None:
    a, _ = _store(tmp_path)
    doc = Plan.load(a).as_json()
    for r in doc["runs"]:
        if r["arm"] != "baseline":
            r["training"]["data"]["seed"] += 1
    Plan.from_json(doc).write(a / "plan.json")
    rep = build(collect(a, use_cache=False, workers=1))
    reasons = " ".join(rep.invalid_pairs[0].invalid_reasons)
    assert "identities differ beyond the architecture: training.data.seed" in reasons
