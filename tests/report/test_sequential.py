"""Pre-registered sequential gates (issue 23, item 3): alpha-spending boundaries, seed stages,
interim futility looks, unplanned seed additions -- with synthetic truth."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from olmoablate.plan.gate import Gate, NoiseFloor
from olmoablate.plan.names import PROCEED
from olmoablate.report.assemble import Report, build
from olmoablate.report.cards import statistics_lines
from olmoablate.report.collect import collect
from olmoablate.report.noise import floor_source
from olmoablate.report.sequential import (
    CONTINUE,
    FUTILITY,
    PairCurve,
    evaluate_design,
    stage_decision,
    stage_levels,
)
from olmoablate.stats import nominal_levels, spent, t_ppf, z_boundaries
from olmoablate.testing.plans import build_plan
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results, synthetic_plan

EVAL = "eval/lm/demo-heldout/CE loss"


def test_boundaries_match_published_values() -> None:
    # gsDesign sfLDOF, 4 equally spaced looks, one-sided 0.025: 4.333 2.963 2.359 2.014
    got = z_boundaries([0.25, 0.5, 0.75, 1.0], 0.025, "obrien_fleming")
    assert got == pytest.approx([4.333, 2.963, 2.359, 2.014], abs=2e-3)
    assert z_boundaries([1.0], 0.05, "pocock") == pytest.approx([1.6449], abs=1e-3)
    assert spent(1.0, 0.05, "obrien_fleming") == pytest.approx(0.05)
    # the cumulative statistics' joint normal, by simulation: total crossing = alpha
    rng = np.random.default_rng(1)
    c = z_boundaries([0.5, 1.0], 0.05, "pocock")
    z1 = rng.standard_normal(400_000)
    z2 = (z1 + rng.standard_normal(400_000)) / math.sqrt(2)
    rate = float(((z1 >= c[0]) | (z2 >= c[1])).mean())
    assert rate == pytest.approx(0.05, abs=0.0015)


@pytest.mark.parametrize("kind", ["obrien_fleming", "pocock"])
def test_seed_stages_hold_alpha_with_the_paired_t(kind: str) -> None:
    """Stages of 2 then 4 seeds at the bar: the t-matched boundaries keep the level."""
    rng = np.random.default_rng(3)  # not the calibration's seed
    reps, bar = 200_000, 1.0
    d = rng.normal(bar, 1.0, size=(reps, 4))
    design = {"seed_stages": [2, 4], "spending": kind}
    levels = stage_levels(
        Gate.model_validate({"stage": "1B", "sequential": design}).sequential, 0.05, 4
    )
    z_levels = nominal_levels([0.5, 1.0], 0.05, kind)
    assert levels[0] == pytest.approx(spent(0.5, 0.05, kind))
    proceed = np.zeros(reps, dtype=bool)
    for k, n in enumerate((2, 4)):
        x = d[:, :n]
        m, se = x.mean(axis=1), x.std(axis=1, ddof=1) / math.sqrt(n)
        dec = stage_decision(m, se, n - 1, bar, levels[k], 0.95, k == 1, 0.5)
        proceed |= dec == PROCEED
    rate = float(proceed.mean())
    assert rate < 0.05 + 2 * math.sqrt(0.05 * 0.95 / reps)
    assert rate > 0.045  # and is not needlessly conservative
    assert levels[1] < z_levels[1] or kind == "pocock"  # the z-matched level was too generous


def _curves(values: list[float], frac: float = 1.0, steps: int = 10) -> list[PairCurve]:
    xs = [float(i + 1) for i in range(int(steps * frac))]
    return [
        PairCurve(s, xs, [v] * len(xs), float(steps), frac >= 1.0, 1.0)
        for s, v in enumerate(values)
    ]


def test_preregistered_extension_proceeds_at_the_adjusted_boundary() -> None:
    gate = Gate.model_validate(
        {"stage": "1B", "min_effect": 0.0, "last_n": 1, "sequential": {"seed_stages": [2, 4]}}
    )
    lv = stage_levels(gate.sequential, 0.05, 4)
    # 4 seeds whose t statistic sits between the full-alpha and the adjusted boundary
    base = np.array([-1.0, 1.0, -1.0, 1.0])
    sd = float(np.std(base, ddof=1))
    t_full, t_adj = t_ppf(0.95, 3), t_ppf(1 - lv[1], 3)
    assert t_adj > t_full
    between = list(base + (t_full + t_adj) / 2 * sd / 2)
    res = evaluate_design(gate, _curves(between), None)
    assert [lk.decision for lk in res.looks] == [CONTINUE, "inconclusive"], res.looks
    above = list(base + (t_adj + 0.3) * sd / 2)
    res = evaluate_design(gate, _curves(above), None)
    assert res.decision == PROCEED and "lower bound" in res.looks[1].boundary
    assert f"{lv[1]:.3g}" in res.looks[1].boundary and not res.flags


def report(root: Path, spec: SynthSpec, truths: dict[str, ArmTruth]) -> Report:
    make_results(root, spec, truths)
    return build(collect(root, use_cache=False, workers=1))


def test_seed_stages_end_to_end(tmp_path: Path) -> None:
    gate = {"metric": EVAL, "min_effect": 0.01, "sequential": {"seed_stages": [2, 4]}}
    spec = SynthSpec(gate=gate, seeds=(0, 1, 2, 3))
    truth = {"sn_da": ArmTruth(offset=-0.05, seed_offset=0.002, eval_noise=0.0005)}
    rep = report(tmp_path / "s", spec, truth)
    res = rep.sequential["sn_da"]
    assert rep.verdict == "proceed", rep.reasons
    # O'Brien-Fleming spends 0.0056 at 2 seeds (t with 1 dof: 56.6): the first stage
    # continues, the planned extension to 4 seeds proceeds at its adjusted boundary
    assert [lk.decision for lk in res.looks] == [CONTINUE, PROCEED]
    assert "sequential design" in rep.reasons[0]
    lines = statistics_lines(rep)
    assert any("look 1 of 2 (seeds, 100% of tokens, 2 seed(s)): continue" in x for x in lines)
    assert any("look 2 of 2 (seeds, 100% of tokens, 4 seed(s)): proceed" in x for x in lines)
    assert rep.gate_json()["sequential"]["sn_da"]["looks"][1]["decision"] == "proceed"


def test_interim_futility_stop_records_reason_and_savings(tmp_path: Path) -> None:
    gate = {
        "metric": EVAL,
        "min_effect": 0.01,
        "noise": {"floor": {"sd": 0.01, "pairs": 4}},
        "sequential": {"interim": [0.25, 0.5]},
    }
    spec = SynthSpec(gate=gate, seeds=(0,))
    # the variant is worse; both arms stopped at half the budget (still running)
    truth = {
        "sn_da": ArmTruth(offset=0.02, stop_at=100, state="running"),
        "baseline": ArmTruth(stop_at=100, state="running"),
    }
    rep = report(tmp_path / "f", spec, truth)
    res = rep.sequential["sn_da"]
    assert res.decision == FUTILITY
    assert res.status_line == "stopped for futility at look 1 of 3, 25% of tokens"
    assert res.gpu_hours_saved == pytest.approx(0.5)  # half of the 1 GPU-h variant arm is left
    assert rep.verdict == "stop"
    gj = rep.gate_json()
    assert gj["futility"] == {"stopped": True, "gpu_hours_saved": pytest.approx(0.5)}
    assert gj["sequential"]["sn_da"]["status_line"].startswith("stopped for futility at look 1")
    # a better variant at the same point: continue, never proceed from an interim look
    rep2 = report(
        tmp_path / "g",
        spec,
        {
            "sn_da": ArmTruth(offset=-0.2, stop_at=100, state="running"),
            "baseline": ArmTruth(stop_at=100, state="running"),
        },
    )
    looks = rep2.sequential["sn_da"].looks
    assert [lk.decision for lk in looks] == [CONTINUE, CONTINUE, "not reached"]
    assert rep2.verdict == "inconclusive"


def test_unplanned_replan_adding_seeds_is_flagged_and_not_at_full_alpha(tmp_path: Path) -> None:
    """Registered with seeds [0, 1], re-planned to [0, 1, 2, 3] without a design: flagged, and
    tested at alpha / 2; an effect that passes at full alpha is then inconclusive."""
    spec = SynthSpec(gate={"metric": EVAL, "min_effect": 0.0}, seeds=(0, 1, 2, 3))
    # per-seed deltas 0.006, 0.026, 0.006, 0.026: t = 2.77, between t_0.95,3 = 2.35 (full
    # alpha: proceed) and t_0.975,3 = 3.18 (alpha / 2: inconclusive)
    truth = {
        f"1B-s{s}-sn_da": ArmTruth(offset=-o, eval_noise=0.0)
        for s, o in zip(range(4), [0.006, 0.026, 0.006, 0.026], strict=True)
    }
    plain = report(tmp_path / "a", spec, truth)
    assert plain.verdict == "proceed", plain.reasons
    root = tmp_path / "b"
    make_results(root, spec, truth)
    plan = synthetic_plan(spec)
    gate = {"stage": "1B", "metric": EVAL, "min_effect": 0.0}
    replanned = build_plan(
        plan.runs,
        spec_name=spec.name,
        gate=gate,
        history={
            "gate": [{"created": "2026-01-01T00:00:00+00:00", "seeds": [0, 1], "gate_sha256": None}]
        },
    )
    (root / "plan.json").write_text(__import__("json").dumps(replanned.as_json()))
    rep = build(collect(root, use_cache=False, workers=1))
    assert rep.verdict == "inconclusive", rep.reasons
    assert "UNPLANNED" in rep.reasons[0] and "alpha / 2" in rep.reasons[0]


def test_seeds_beyond_the_design_are_flagged_and_left_out() -> None:
    gate = Gate.model_validate(
        {"stage": "1B", "min_effect": 0.0, "last_n": 1, "sequential": {"seed_stages": [2, 4]}}
    )
    five = _curves([0.5, 0.52, 0.49, 0.51, -3.0])  # a fifth, unplanned seed with a wild delta
    res = evaluate_design(gate, five, None)
    assert any("UNPLANNED" in f and "at most 4" in f for f in res.flags)
    assert res.looks[-1].seeds == 4 and res.decision == PROCEED  # the fifth never enters


def test_interim_look_never_proceeds_and_notes_a_far_eval_point() -> None:
    gate = Gate.model_validate(
        {
            "stage": "1B",
            "min_effect": 0.0,
            "last_n": 1,
            "noise": {"floor": {"sd": 0.01, "known": True}},
            "sequential": {"interim": [0.5]},
        }
    )
    # eval points only at 10% and 100%: the 50% look uses the 10% point and says so
    floor = floor_source(NoiseFloor(sd=0.01, known=True))
    pair = PairCurve(0, [1.0, 6.0], [5.0, 5.0], 10.0, False, 2.0)  # at 60% of the budget
    res = evaluate_design(gate, [pair], floor)
    assert res.looks[0].decision == CONTINUE  # a huge interim lead still only continues
    assert "10% of tokens" in res.looks[0].note
    worse = PairCurve(0, [1.0, 6.0], [-1.0, -1.0], 10.0, False, 2.0)
    res = evaluate_design(gate, [worse], floor)
    assert res.decision == FUTILITY and res.gpu_hours_saved == pytest.approx(0.8)


def test_first_stage_proceed_does_not_wait_for_later_stage_seeds(tmp_path: Path) -> None:
    """seeds 2-3 (the second stage) were never needed: their unfinished runs do not block."""
    gate = {"metric": EVAL, "min_effect": 0.01, "sequential": {"seed_stages": [2, 4]}}
    spec = SynthSpec(gate=gate, seeds=(0, 1, 2, 3))
    truth = {
        "sn_da": ArmTruth(offset=-0.05, eval_noise=0.00005),
        **{
            f"1B-s{s}-{arm}": ArmTruth(stop_at=10, state="running", eval_noise=0.00005)
            for s in (2, 3)
            for arm in ("baseline", "sn_da")
        },
    }
    rep = report(tmp_path / "p", spec, truth)
    res = rep.sequential["sn_da"]
    assert res.looks[0].decision == PROCEED, res.looks
    assert rep.verdict == "proceed", rep.reasons


def test_overridden_futility_stop_keeps_the_final_look() -> None:
    """Non-binding: arms trained on after a futility stop are decided by the final look."""
    gate = Gate.model_validate(
        {
            "stage": "1B",
            "min_effect": 0.0,
            "last_n": 1,
            "sequential": {"seed_stages": [2], "interim": [0.5]},
        }
    )
    # behind at half the budget, clearly ahead at the end
    xs = [float(i) for i in range(1, 11)]
    ys = [[-1.0] * 5 + [1.0] * 5, [-1.1] * 5 + [1.02] * 5]
    pairs = [PairCurve(s, xs, y, 10.0, True, 1.0) for s, y in enumerate(ys)]
    res = evaluate_design(gate, pairs, None)
    assert [lk.decision for lk in res.looks] == [FUTILITY, PROCEED]
    assert res.decision == PROCEED and any("overridden" in f for f in res.flags)
    assert res.gpu_hours_saved == 0.0
    # the same arms stopped at 60%: the stop stands
    cut = [PairCurve(p.seed, xs[:6], p.y[:6], 10.0, False, 1.0) for p in pairs]
    res = evaluate_design(gate, cut, None)
    assert res.decision == FUTILITY and res.gpu_hours_saved == pytest.approx(0.8)
