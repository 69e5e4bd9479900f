"""The gate's pure decision logic on synthetic evidence with known truth."""

from __future__ import annotations

import math

import numpy as np
import pytest

from olmoablate.plan.names import INCONCLUSIVE, PROCEED, STOP
from olmoablate.report.compare import ArmHealth
from olmoablate.report.noise import NONE, estimate, floor_source
from olmoablate.report.overhead import ArmTiming
from olmoablate.report.sequential import evaluate_gate
from olmoablate.report.verdict import (
    PairEvidence,
    as_gate,
    evaluate_variant,
    quality_check,
    tolerance_check,
)

CFG = {
    "stage": "1B",
    "metric": "eval/lm/x/CE loss",
    "min_effect": 0.01,
    "last_n": 3,
    "noise": {"floor": {"sd": 0.005, "known": True}},
}
FLOOR = floor_source(0.005)


def ev(pair: str, seed: int, imp: list[float], **kw: object) -> PairEvidence:
    return PairEvidence(pair_id=pair, seed=seed, improvement=imp, **kw)  # type: ignore[arg-type]


def test_defaults_come_from_the_schema_and_explicit_null_is_kept() -> None:
    from olmoablate.plan.gate import Gate

    cfg = as_gate(
        {"stage": "1B", "stability": {"max_loss_spikes": 7}, "max_step_time_overhead": None}
    )
    assert cfg.stability.model_dump() == {
        "max_loss_spikes": 7,
        "max_grad_norm": None,
        "allow_nonfinite": False,
    }
    assert cfg.max_step_time_overhead is None  # explicitly disabled
    defaults = Gate(stage="1B")  # the one place the defaults live
    assert cfg.max_peak_memory_overhead == defaults.max_peak_memory_overhead == 0.10
    assert (cfg.last_n, cfg.confidence) == (defaults.last_n, defaults.confidence) == (3, 0.95)
    assert as_gate(cfg) is cfg  # a plan's gate is already the model


def test_single_seed_never_uses_its_point_spread() -> None:
    # three tight points of one run say nothing about another run: no source, no bound
    est = estimate([[0.05, 0.06, 0.04]], 0.95)
    assert est is not None and est.source == NONE
    assert est.mean == pytest.approx(0.05)
    assert math.isinf(est.lower) and math.isinf(est.upper)
    # with a declared floor: z bound with the floor as the sd of the one paired delta
    est = estimate([[0.05, 0.06, 0.04]], 0.95, floor_source(0.01))
    assert est is not None and est.dof == math.inf
    assert est.lower == pytest.approx(0.05 - 1.6449 * 0.01, abs=1e-4)


def test_floor_below_within_run_jitter_is_raised_to_it() -> None:
    est = estimate([[0.05]], 0.95, floor_source(0.001), jitter_se=0.004)
    assert est is not None and est.sd == pytest.approx(0.004)
    assert "raised to the within-run jitter" in est.source_detail


def test_multi_seed_estimate_uses_seed_spread() -> None:
    est = estimate([[0.05, 0.05, 0.05], [0.07, 0.07, 0.07], [0.03, 0.03, 0.03]], 0.95)
    assert est is not None
    assert est.n_seeds == 3 and est.dof == 2
    assert est.mean == pytest.approx(0.05)
    assert est.sd == pytest.approx(0.02)
    assert est.se == pytest.approx(0.02 / math.sqrt(3))
    assert est.source == "paired seeds"


def test_clear_improvement_proceeds() -> None:
    v = evaluate_variant("v", [ev("p0", 0, [0.050, 0.052, 0.049])], CFG, FLOOR)
    assert v.verdict == PROCEED, v.reasons
    assert "declared floor" in v.noise


def test_delta_inside_noise_is_inconclusive_with_seed_count() -> None:
    v = evaluate_variant("v", [ev("p0", 0, [0.02, 0.0, 0.025])], CFG, floor_source(0.01))
    assert v.verdict == INCONCLUSIVE
    chk = v.checks[0]
    assert chk.outcome == INCONCLUSIVE
    # issue 34: above the bar after a look that spent alpha, no seeds added by a re-plan can
    # proceed (report.sequential.replan_decision): the line says so instead of a count
    assert chk.seeds_needed is None and "none added by `plan --replan` can resolve" in chk.reason
    # below the bar a stop keeps the gate's level: a predictive chance and a count at alpha
    v = evaluate_variant("v", [ev("p0", 0, [0.0, -0.01, 0.005])], CFG, floor_source(0.01))
    chk = v.checks[0]
    assert chk.outcome == INCONCLUSIVE and chk.seeds_toward == "stop"
    assert chk.seeds_needed is not None and chk.seeds_needed >= 2
    assert "paired seed" in chk.reason and "one-sided level 0.05 " in chk.reason


def test_worse_variant_stops() -> None:
    v = evaluate_variant("v", [ev("p0", 0, [-0.05, -0.051, -0.049])], CFG)
    assert v.verdict == STOP
    assert "clearly below" in v.reasons[-1]


def test_mean_below_bar_gives_seed_count_toward_stop() -> None:
    # two seeds straddling min_effect from below: more seeds resolve it toward stop
    est = estimate([[0.004] * 3, [0.0] * 3], 0.95)
    chk = quality_check("vs baseline", est, 0.01, 0.95, "m")
    assert chk.outcome == INCONCLUSIVE
    assert chk.seeds_toward == "stop"
    assert chk.seeds_needed is not None and chk.seeds_needed >= 2
    assert "toward stop" in chk.reason


def test_wide_floor_is_inconclusive() -> None:
    v = evaluate_variant("v", [ev("p0", 0, [0.050, 0.052, 0.049])], CFG, floor_source(0.1))
    assert v.verdict == INCONCLUSIVE  # 0.05 - 1.645 * 0.1 < min_effect


def test_loss_spike_storm_stops_despite_better_loss() -> None:
    storm = ArmHealth(spikes=25)
    v = evaluate_variant("v", [ev("p0", 0, [0.05, 0.05, 0.05], variant=storm)], CFG)
    assert v.verdict == STOP
    assert any("25 loss spikes > max_loss_spikes 3" in r for r in v.reasons)


def _timing(mean_b: float, mean_v: float, sd: float, n: int = 200) -> tuple[ArmTiming, ArmTiming]:
    rng = np.random.default_rng(3)
    b = ArmTiming("b", mean_b + rng.normal(0, sd, n), "step_time_s")
    v = ArmTiming("v", mean_v + rng.normal(0, sd, n), "step_time_s")
    return b, v


def test_step_time_point_ratio_over_limit_blocks_but_cannot_stop() -> None:
    e = ev("p0", 0, [0.05, 0.05, 0.05], overhead={"step_time": 0.20, "peak_memory": 0.0})
    v = evaluate_variant("v", [e], CFG)
    assert v.verdict == INCONCLUSIVE
    assert any("step time overhead +20.0%" in r and "no per-step times" in r for r in v.reasons)
    e.overhead = {"step_time": 0.05}
    assert evaluate_variant("v", [e], CFG).verdict == PROCEED


def test_step_time_interval_above_limit_stops_straddling_is_inconclusive() -> None:
    # Must show: clearly above the 10% limit -> stop; interval straddling it -> inconclusive
    above = ev("p0", 0, [0.05] * 3, timing=_timing(0.50, 0.60, 0.01))
    v = evaluate_variant("v", [above], CFG)
    assert v.verdict == STOP, v.reasons
    assert v.step_time is not None and v.step_time.lower is not None
    assert v.step_time.lower > 0.10
    straddle = ev("p0", 0, [0.05] * 3, timing=_timing(0.50, 0.55, 0.2))
    v = evaluate_variant("v", [straddle], CFG)
    assert v.verdict == INCONCLUSIVE, v.reasons
    assert v.step_time is not None and v.step_time.outcome == INCONCLUSIVE
    assert v.step_time.lower < 0.10 < v.step_time.upper  # type: ignore[operator]
    assert any("straddles the limit 10%" in r for r in v.reasons)
    within = ev("p0", 0, [0.05] * 3, timing=_timing(0.50, 0.51, 0.005))
    assert evaluate_variant("v", [within], CFG).verdict == PROCEED


def test_decode_latency_only_checked_when_limit_and_measured() -> None:
    e = ev("p0", 0, [0.05, 0.05, 0.05], overhead={"decode_latency": 0.5})
    assert evaluate_variant("v", [e], CFG).verdict == PROCEED  # limit is null by default
    cfg = {**CFG, "max_decode_latency_overhead": 0.2}
    assert evaluate_variant("v", [e], cfg).verdict == STOP


def test_nonfinite_diverged_and_grad_norm_stop() -> None:
    for health, needle in (
        (ArmHealth(nonfinite=True), "non-finite"),
        (ArmHealth(diverged=True, state="diverged"), "diverged"),
        (ArmHealth(max_grad_norm=50.0), "max grad norm"),
    ):
        cfg = {**CFG, "stability": {"max_grad_norm": 10.0}}
        v = evaluate_variant("v", [ev("p0", 0, [0.05] * 3, variant=health)], cfg)
        assert v.verdict == STOP, needle
        assert any(needle in r for r in v.reasons)
    allow = {**CFG, "stability": {"allow_nonfinite": True}}
    v = evaluate_variant("v", [ev("p0", 0, [0.05] * 3, variant=ArmHealth(nonfinite=True))], allow)
    assert v.verdict == PROCEED


def test_invalid_pair_is_excluded() -> None:
    bad = ev("p1", 1, [0.5, 0.5, 0.5], valid=False, invalid_reasons=["fingerprints differ"])
    good = ev("p0", 0, [0.05, 0.052, 0.049])
    v = evaluate_variant("v", [good, bad], CFG)
    assert v.verdict == PROCEED
    assert v.excluded_pairs == ["p1"]
    assert v.checks[0].estimate is not None and v.checks[0].estimate.n_seeds == 1
    only_bad = evaluate_variant("v", [bad], CFG)
    assert only_bad.verdict == INCONCLUSIVE
    assert any("INVALID" in r for r in only_bad.reasons)


def test_incomplete_or_unstable_baseline_blocks_proceed() -> None:
    e = ev("p0", 0, [0.05] * 3, complete=False, incomplete_reason="variant at 50%")
    assert evaluate_variant("v", [e], CFG).verdict == INCONCLUSIVE
    e = ev("p0", 0, [0.05] * 3, baseline=ArmHealth(diverged=True))
    v = evaluate_variant("v", [e], CFG)
    assert v.verdict == INCONCLUSIVE and any("baseline unstable" in r for r in v.reasons)


def test_one_seed_without_source_is_inconclusive_with_way_out() -> None:
    cfg = {**CFG, "noise": {"floor": None}}
    v = evaluate_variant("v", [ev("p0", 0, [0.05, 0.05, 0.05])], cfg, None, "cheapest: A/A")
    assert v.verdict == INCONCLUSIVE
    assert "one seed and no gate.noise source" in v.reasons[-1]
    assert "cheapest: A/A" in v.reasons[-1]


def test_two_seeds_with_opposite_signs_inconclusive() -> None:
    v = evaluate_variant("v", [ev("a", 0, [0.05] * 3), ev("b", 1, [-0.03] * 3)], CFG)
    assert v.verdict == INCONCLUSIVE


def test_higher_is_better_uses_same_sign_convention() -> None:
    # the evidence is already sign-adjusted; direction matters only upstream (compare module)
    v = evaluate_variant("v", [ev("p0", 0, [0.05] * 2 + [0.051])], {**CFG, "direction": "higher"})
    assert v.verdict == PROCEED


QPP = {**CFG, "rule": "quality_per_param", "reference": "ref4", "tolerance": 0.02}


def test_quality_per_param_proceeds_when_beating_reference_within_tolerance() -> None:
    e = ev("p0", 0, [-0.01, -0.012, -0.008], reference_improvement=[0.05, 0.051, 0.049])
    v = evaluate_variant("loop", [e], QPP)
    assert v.verdict == PROCEED, v.reasons
    assert [c.outcome for c in v.checks] == ["pass", "pass"]


def test_quality_per_param_stops_when_far_worse_than_baseline() -> None:
    e = ev("p0", 0, [-0.10, -0.101, -0.099], reference_improvement=[0.05, 0.051, 0.049])
    v = evaluate_variant("loop", [e], QPP)
    assert v.verdict == STOP
    assert any("clearly worse than tolerance" in r for r in v.reasons)


def test_quality_per_param_stops_when_not_beating_reference() -> None:
    e = ev("p0", 0, [0.0, 0.001, -0.001], reference_improvement=[-0.02, -0.021, -0.019])
    v = evaluate_variant("loop", [e], QPP)
    assert v.verdict == STOP
    assert v.checks[0].outcome == STOP and v.checks[1].outcome == "pass"


def test_quality_per_param_tolerance_boundary_inconclusive() -> None:
    e = ev("p0", 0, [-0.01, -0.03, -0.02], reference_improvement=[0.05, 0.051, 0.049])
    chk = tolerance_check(estimate([e.improvement], 0.95), 0.02, 0.95, "m")
    assert chk.outcome == INCONCLUSIVE
    assert evaluate_variant("loop", [e], QPP).verdict == INCONCLUSIVE


def test_primary_variant_decides_and_holm_without_one() -> None:
    evidence = {"a": [ev("pa", 0, [-0.05] * 3)], "b": [ev("pb", 0, [0.05, 0.051, 0.049])]}
    out = evaluate_gate(CFG, evidence, ["b"], ["a"])
    assert out.verdict == PROCEED and out.family_note == ""
    assert [(v.variant, v.role) for v in out.verdicts] == [("b", "primary"), ("a", "exploratory")]
    assert evaluate_gate(CFG, evidence, ["a"], ["b"]).verdict == STOP
    both = evaluate_gate(CFG, evidence, ["a", "b"])
    assert both.verdict == PROCEED and "Holm over 2" in both.reasons[0]
    assert evaluate_gate(CFG, {}, []).verdict == INCONCLUSIVE
