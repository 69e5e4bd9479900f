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
    UNPLANNED,
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
    """Registered with seeds [0, 1] (a plan.json from before the gate block was recorded),
    re-planned to [0, 1, 2, 3] without a design: flagged, and since the block in force at the
    first look is unknown and that look spent alpha, never a plain proceed."""
    spec = SynthSpec(gate={"metric": EVAL, "min_effect": 0.0}, seeds=(0, 1, 2, 3))
    # per-seed deltas 0.006, 0.026, 0.006, 0.026: t = 2.77 > t_0.95,3 = 2.35 (full alpha:
    # proceed), and t = 1.6 with the first two seeds (inconclusive)
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
    assert rep.verdict == "inconclusive" and rep.verdict_label == UNPLANNED, rep.reasons
    assert rep.reasons[0].startswith("UNPLANNED") and "seeds [0, 1]" in rep.reasons[0]
    assert "not recorded" in rep.reasons[1] and "exploratory" in rep.reasons[1]
    assert rep.gate_json()["unplanned"]["verdict"] == UNPLANNED


TINY = """\
name: rp
sizes: [tiny]
custom_sizes:
  tiny: {d_model: 64, n_layers: 8, n_heads: 4, n_kv_heads: 2, mlp_hidden_size: 192, sliding_window: 32}
training:
  sequence_length: 64
  tokens: 4096
  global_batch_size: 256
  optimizer: {lr: 1.0e-3}
  data: {paths: [x.bin]}
evaluation:
  interval: 4
  lm_sets: {heldout: [h.bin]}
topology: {gpus_per_node: 0}
"""


def _replan_report(
    tmp_path: Path, deltas: dict[str, list[float]], before: dict, after: dict
) -> dict:
    """Through the CLI: `plan` a tiny spec (``before``: its seeds and gate), train the planned
    pairs synthetically with exact per-seed improvements ``deltas`` (variant -> one per seed),
    change the spec to ``after`` and `plan --replan`, train what the re-plan added, `report`.
    Returns gate.json."""
    import json

    import yaml

    from olmoablate.plan.planfile import Plan
    from olmoablate.testing import run_cli
    from olmoablate.testing.synthetic import write_run

    spec, roots = tmp_path / "s.yaml", tmp_path / "res"

    def write_spec(doc: dict) -> None:
        gate = {"stage": "tiny", "metric": "eval/lm/heldout/CE loss", "last_n": 3, **doc["gate"]}
        variants = {v: {"depth_attention": {"stride": 2}} for v in deltas}
        body = {**yaml.safe_load(TINY), "seeds": doc["seeds"], "variants": variants, "gate": gate}
        spec.write_text(yaml.safe_dump(body))

    synth = SynthSpec(
        name="rp", sizes=("tiny",), seeds=tuple(after["seeds"]), steps=16, eval_interval=4,
        global_batch_size=256, eval_set="heldout",
    )  # fmt: skip
    written: set[str] = set()

    def train() -> None:
        for r in Plan.load(roots / "rp").runs:
            if r.run_id not in written:
                off = 0.0 if r.arm == "baseline" else -deltas[r.arm][r.seed]
                write_run(roots / "rp", synth, r, ArmTruth(offset=off, eval_noise=0.0))
                written.add(r.run_id)

    for doc, extra in ((before, ()), (after, ("--replan",))):
        write_spec(doc)
        out = run_cli("plan", str(spec), "--results-root", str(roots), *extra, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        train()
    out = run_cli("report", str(roots / "rp"), "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return json.loads((roots / "rp" / "gate.json").read_text())


def _check_of(gate: dict, variant: str) -> dict:
    return next(v for v in gate["variants"] if v["variant"] == variant)["checks"][0]


def test_replan_keeps_holm_across_the_variants(tmp_path: Path) -> None:
    """Issue 34, 1 and 3: three variants registered with 2 seeds, re-planned to 4. v1's 2-seed
    p is 0.032: it passes alone at alpha but not Holm over 3 (0.0167); the old report re-tested
    each variant alone at alpha / 2 with 4 seeds (p 0.0002) and proceeded. The first look spent
    alpha under Holm: ``inconclusive (unplanned)``, the 4 seeds' estimate exploratory."""
    deltas = {
        "v1": [0.10, 0.12, 0.10, 0.12],
        "v2": [0.0, 0.004, 0.0, 0.004],
        "v3": [-0.004, 0.0, -0.004, 0.0],
    }
    gate = {"min_effect": 0.01}
    g = _replan_report(
        tmp_path, deltas, {"seeds": [0, 1], "gate": gate}, {"seeds": [0, 1, 2, 3], "gate": gate}
    )
    assert g["verdict"] == "inconclusive" and g["unplanned"]["verdict"] == UNPLANNED, g["reasons"]
    assert g["reasons"][0].startswith("UNPLANNED") and "seeds [0, 1]" in g["reasons"][0]
    assert g["family"].startswith("at the first look (seeds [0, 1]") and "Holm" in g["family"]
    reason = _check_of(g, "v1")["reason"]
    assert reason.startswith(UNPLANNED) and "not after Holm correction over 3" in reason
    assert "no level is left" in reason and "4 seed(s)" in reason and "exploratory" in reason
    assert "pre-register" in reason and "seed_stages" in reason


def test_replan_changing_the_gate_block_with_the_same_seeds_is_flagged(tmp_path: Path) -> None:
    """Issue 34, 2: confidence 0.95 -> 0.90 after a look, same 3 seeds: p = 0.068 passes the
    new gate (the old report proceeded, unflagged) but not the registered one."""
    deltas = {"v": [0.014, 0.024, 0.034]}
    seeds = [0, 1, 2]
    g = _replan_report(
        tmp_path,
        deltas,
        {"seeds": seeds, "gate": {"min_effect": 0.01}},
        {"seeds": seeds, "gate": {"min_effect": 0.01, "confidence": 0.9}},
    )
    assert g["verdict"] == "inconclusive" and g["unplanned"]["verdict"] == UNPLANNED, g["reasons"]
    assert "seeds [0, 1, 2], gate" in g["reasons"][0]
    reason = _check_of(g, "v")["reason"]
    assert "one-sided 95% bounds" in reason and "one-sided 90% bounds" in reason


def test_unplanned_stage_after_the_design_never_plainly_proceeds(tmp_path: Path) -> None:
    """Issue 34, 3: seed stages [2, 4] -> [2, 4, 6] after the last planned look (p 0.094 >
    0.0457 at 4 seeds); p 0.015 with 6 seeds passed the old halved level 0.0207. The registered
    design decides (its looks are shown); the 6-seed look is exploratory."""
    g = _replan_report(
        tmp_path,
        {"v": [0.025, 0.01, 0.03, 0.01, 0.035, 0.035]},
        {
            "seeds": [0, 1, 2, 3],
            "gate": {"min_effect": 0.01, "sequential": {"seed_stages": [2, 4]}},
        },
        {
            "seeds": [0, 1, 2, 3, 4, 5],
            "gate": {"min_effect": 0.01, "sequential": {"seed_stages": [2, 4, 6]}},
        },
    )
    assert g["verdict"] == "inconclusive" and g["unplanned"]["verdict"] == UNPLANNED, g["reasons"]
    reason = _check_of(g, "v")["reason"]
    assert reason.startswith(UNPLANNED) and "no level is left" in reason and "6 seed(s)" in reason
    looks = g["sequential"]["v"]["looks"]
    assert [lk["seeds"] for lk in looks] == [2, 4] and looks[-1]["decision"] == "inconclusive"


def test_the_first_registration_still_proceeds_after_a_replan(tmp_path: Path) -> None:
    """The registered look keeps its level: 2 seeds that clear the bar (t = 41) still proceed
    after a re-plan to 4 seeds, decided by the first registration (seeds only changed: its block
    is the current one, same hash); and the decision table itself."""
    from olmoablate.report.sequential import replan_decision

    spec = SynthSpec(gate={"metric": EVAL, "min_effect": 0.01}, seeds=(0, 1, 2, 3))
    truth = {
        f"1B-s{s}-sn_da": ArmTruth(offset=-o, eval_noise=0.0)
        for s, o in enumerate([0.05, 0.052, 0.0, 0.0])
    }
    make_results(tmp_path, spec, truth)
    plan = synthetic_plan(spec)
    sha = plan.gates[0].gate_sha256
    hist = [{"created": "c", "seeds": [0, 1], "gate_sha256": sha, "after_runs": True}]
    gate = {"stage": "1B", "metric": EVAL, "min_effect": 0.01}
    replanned = build_plan(plan.runs, spec_name=spec.name, gate=gate, history={"gate": hist})
    (tmp_path / "plan.json").write_text(__import__("json").dumps(replanned.as_json()))
    rep = build(collect(tmp_path, use_cache=False, workers=1))
    assert rep.verdict == PROCEED and rep.verdict_label == PROCEED, rep.reasons
    assert rep.reasons[0].startswith("UNPLANNED") and "exploratory" in rep.reasons[1]
    first = np.array(["proceed", "inconclusive", "inconclusive", "stop", "continue"])
    now = np.array(["inconclusive", "proceed", "stop", "proceed", "proceed"])
    got = replan_decision(first, now).tolist()
    assert got == [PROCEED, UNPLANNED, "stop", "stop", "continue"]


def test_adding_a_noise_source_to_a_one_seed_gate_costs_no_alpha(tmp_path: Path) -> None:
    """The report's own way out of a one-seed gate without a noise source is a re-plan: that look
    could not proceed whatever the data (it spent no alpha), so adding only a floor decides at
    the full level; changing min_effect as well is an unplanned change like any other."""
    import json

    from olmoablate.io import sha256_of

    spec = SynthSpec(gate={"metric": EVAL, "min_effect": 0.01}, seeds=(0,))
    make_results(tmp_path, spec, {"sn_da": ArmTruth(offset=-0.05, eval_noise=0.0)})
    before = Gate.model_validate({"stage": "1B", "metric": EVAL, "min_effect": 0.01})
    dump = before.model_dump(mode="json")
    hist = [{"created": "c", "seeds": [0], "gate_sha256": sha256_of(dump), "gate": dump}]
    floor = {"floor": {"sd": 0.01, "known": True}}
    for extra, verdict, label in (
        ({}, PROCEED, PROCEED),
        ({"min_effect": 0.0}, "inconclusive", UNPLANNED),
    ):
        gate = {**dump, "noise": floor, **extra}
        runs = synthetic_plan(spec).runs
        plan = build_plan(runs, spec_name=spec.name, gate=gate, history={"gate": hist})
        (tmp_path / "plan.json").write_text(json.dumps(plan.as_json()))
        rep = build(collect(tmp_path, use_cache=False, workers=1))
        assert (rep.verdict, rep.verdict_label) == (verdict, label), rep.reasons
        assert rep.reasons[0].startswith("UNPLANNED")
        assert ("spent no alpha" in rep.reasons[0]) == (label == PROCEED)


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
