"""The multiplier gate's report side (`olmoablate.report.ladder`): rungs read off a synthetic
results folder with known losses, what is left out and why, and the verdict built on the
estimator's decision."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from olmoablate import scaling
from olmoablate.plan.names import INCONCLUSIVE, PROCEED, STOP, RunState
from olmoablate.report import ladder, track
from olmoablate.report.cards import ladder_sentence
from olmoablate.report.collect import collect
from olmoablate.report.compare import measure_all
from olmoablate.report.ladder import LadderResult, decide_ladder, read_rungs
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, eval_level, make_results

EVAL = "eval/lm/demo-heldout/CE loss"
RUNGS = ("r1", "r2", "r3")
PARAMS = {"r1": 10_000_000, "r2": 30_000_000, "r3": 90_000_000}


def _spec(**kw: object) -> SynthSpec:
    base = dict(
        name="ladder", sizes=RUNGS, seeds=(0, 1), size_params=PARAMS,
        flops_factor={"sn_da": 1.1}, gate={"metric": EVAL, "stage": "r3"},
    )  # fmt: skip
    return SynthSpec(**{**base, **kw})  # type: ignore[arg-type]


def _loss(size: str, arm: str, seed: int) -> float:
    """A known loss per run: falling with size, the variant 0.05 better, seeds 0.01 apart."""
    return 2.0 + 20.0 / PARAMS[size] ** 0.2 - (0.05 if arm != "baseline" else 0.0) + 0.01 * seed


def _ladder(root: Path, spec: SynthSpec, **override: ArmTruth) -> None:
    level = eval_level(spec)
    truths = {
        f"{size}-s{seed}-{arm}": ArmTruth(offset=_loss(size, arm, seed) - level)
        for size in spec.sizes
        for seed in spec.seeds
        for arm in ("baseline", *spec.variants)
    }
    truths.update(override)
    make_results(root, spec, truths)


def test_rungs_carry_each_runs_gate_value_and_the_plans_costs(tmp_path: Path) -> None:
    spec = _spec()
    _ladder(tmp_path, spec)
    results = collect(tmp_path, use_cache=False, workers=1)
    reading = read_rungs(measure_all(results), "sn_da", RUNGS, EVAL, 3)
    assert [r.size for r in reading.rungs] == list(RUNGS)  # ordered by the baseline's FLOPs
    assert not reading.left_out and not reading.dropped and not reading.unfinished
    for r in reading.rungs:
        assert set(r.loss_b) == set(r.loss_v) == {0, 1}
        for seed in (0, 1):
            assert r.loss_b[seed] == pytest.approx(_loss(r.size, "baseline", seed), abs=2e-3)
            assert r.loss_v[seed] == pytest.approx(_loss(r.size, "sn_da", seed), abs=2e-3)
        base = results.plan.run(f"{r.size}-s0-baseline")
        var = results.plan.run(f"{r.size}-s0-sn_da")
        assert (r.flops_b, r.flops_v) == (base.total_train_flops, var.total_train_flops)
        assert r.flops_v == pytest.approx(1.1 * r.flops_b, rel=1e-6)
        assert (r.tokens_b, r.tokens_v) == (base.tokens, var.tokens)
        assert (r.params_b, r.params_v) == (base.params, var.unique_params)


def test_unfinished_and_invalid_pairs_are_left_out_and_an_empty_rung_dropped(
    tmp_path: Path,
) -> None:
    spec = _spec()
    running = ArmTruth(state=RunState.RUNNING, stop_at=100)
    _ladder(
        tmp_path,
        spec,
        **{
            "r1-s0-sn_da": running,
            "r1-s1-sn_da": running,
            "r2-s1-sn_da": ArmTruth(data_salt="other order"),  # data fingerprints differ
        },
    )
    results = collect(tmp_path, use_cache=False, workers=1)
    reading = read_rungs(measure_all(results), "sn_da", RUNGS, EVAL, 3)
    assert [r.size for r in reading.rungs] == ["r2", "r3"]
    assert set(reading.rungs[0].loss_v) == {0}  # r2's invalid seed 1 is out
    assert reading.dropped == [
        "rung r1: no complete valid pair (2 planned; see the pairs left out)"
    ]
    assert len(reading.unfinished) == 2 and all("not complete" in x for x in reading.unfinished)
    assert list(reading.invalid) == ["r2-s1-sn_da"]
    assert any(x.startswith("pair r2-s1-sn_da: INVALID") for x in reading.left_out)
    assert {p.pair_id for p in reading.used} == {"r2-s0-sn_da", "r3-s0-sn_da", "r3-s1-sn_da"}


# The decision, on ladders drawn from a known truth by the estimator's own simulator.

LAW = scaling.Law(1.8, 600.0, 0.15)
FLOPS = (1e17, 3e17, 1e18, 3e18)


def _design(flops_factor: float = 1.0) -> list[scaling.Rung]:
    out = []
    for i, f in enumerate(FLOPS):
        p = math.sqrt(f / 120)  # 20 tokens per parameter, 6 FLOPs per parameter and token
        out.append(scaling.Rung(f"r{i}", f, f * flops_factor, 20 * p, 20 * p, p, p, {}, {}))
    return out


def _target(size: str, flops: float) -> scaling.Target:
    p = math.sqrt(flops / 120)
    return scaling.Target(size, flops, 20 * p, p)


TARGETS = [_target("3B", 1e20), _target("7B", 1e21)]


def _ladder_truth(
    m0: float, sd_delta: float = 0.003, seeds: int = 3, **kw: float
) -> list[scaling.Rung]:
    truth = scaling.Truth(LAW, m0, 0.0, 1e18, sd_delta, 0.01, **kw)
    return scaling.simulate(truth, _design(), seeds, np.random.default_rng(1))


@pytest.mark.parametrize(
    ("m0", "sd_delta", "seeds", "verdict", "how"),
    [
        (1.3, 0.003, 3, PROCEED, "every lower bound >= min_multiplier 1.05"),
        (0.8, 0.003, 3, STOP, "an upper bound < min_multiplier 1.05"),
        (1.06, 0.01, 2, INCONCLUSIVE, "not separable from min_multiplier 1.05"),
    ],
)
def test_the_three_outcomes_from_a_known_truth(
    m0: float, sd_delta: float, seeds: int, verdict: str, how: str
) -> None:
    res = decide_ladder(
        "v", _ladder_truth(m0, sd_delta, seeds), TARGETS, unit="flops", min_multiplier=1.05,
        confidence=0.95,
    )  # fmt: skip
    assert res.decision == verdict and res.line.endswith(how)
    assert "(one-sided 95% bounds)" in res.line and not res.refused
    assert list(res.fits) == ["flops", "tokens", "params"]  # the gate's unit first
    for fit in res.fits.values():
        assert fit.level == pytest.approx(0.9)  # two-sided 90% = one-sided 95% bounds
    proj = {p.size: p.multiplier for p in res.fit.projections}
    assert set(proj) == {"3B", "7B"}
    assert proj["7B"].lower < m0 < proj["7B"].upper  # the truth is inside
    rec = res.as_dict()
    assert json.loads(json.dumps(rec, allow_nan=False)) == rec  # gate.json: plain JSON
    assert rec["decision"] == verdict and rec["unit_word"] == "compute"


def test_an_undecided_ladder_says_what_would_resolve_it_as_a_chance() -> None:
    res = decide_ladder(
        "v", _ladder_truth(1.06, 0.01, 2), TARGETS, unit="flops", min_multiplier=1.05,
        confidence=0.95,
    )  # fmt: skip
    seeds, rung = ladder.resolve_chances(res)
    assert seeds.startswith("one more seed pair at every rung (+4 pairs): the gate resolves in ")
    assert rung.startswith("one more rung at 4x the largest rung's compute (2 seed pair(s))")
    assert "% of simulated futures" in seeds and "a chance, not a promise" in rung
    decided = decide_ladder(
        "v", _ladder_truth(1.3), TARGETS, unit="flops", min_multiplier=1.05, confidence=0.95
    )
    assert ladder.resolve_chances(decided) == []


def test_lack_of_fit_refuses_the_projection() -> None:
    res = decide_ladder(
        "v", _ladder_truth(1.2, 0.002, curvature=0.02), TARGETS, unit="flops",
        min_multiplier=1.05, confidence=0.95,
    )  # fmt: skip
    assert res.decision == INCONCLUSIVE
    assert res.refused.startswith("lack of fit at p < 0.05")
    assert res.line == f"projection refused: {res.refused}"
    assert res.fit.projections == [] and any(t.rejects for t in res.fit.lack_of_fit)
    assert res.as_dict()["refused"] == res.refused


def test_one_seed_needs_the_declared_floor() -> None:
    rungs = _ladder_truth(1.3, seeds=1)
    res = decide_ladder("v", rungs, TARGETS, unit="flops", min_multiplier=1.05, confidence=0.95)
    assert res.decision == INCONCLUSIVE and "noise.floor" in res.refused
    floor = scaling.DeclaredNoise(0.003, 4.0)
    res = decide_ladder(
        "v", rungs, TARGETS, unit="flops", min_multiplier=1.05, confidence=0.95, declared=floor
    )
    assert not res.refused and "noise.floor" in res.fit.noise_source


# The card sentence, the board's cell and the track record, on fixed numbers.


def _iv(est: float, lo: float, hi: float) -> scaling.Interval:
    return scaling.Interval(est, lo, hi, 0.9, 10.0)


def _fixed(refused: str = "", unit: str = "flops") -> LadderResult:
    fit = scaling.LadderFit(
        unit, 0.9, LAW,
        [scaling.RungMultiplier("190M", 1e20, _iv(1.10, 1.02, 1.18)),
         scaling.RungMultiplier("760M", 1e21, _iv(1.12, 1.05, 1.19))],
        _iv(-0.01, -0.03, 0.01), None,
        [] if refused else [scaling.Projection("7B", 1e23, _iv(1.08, 0.98, 1.17))],
        [], 0.01, 0.02, "seeds (4 dof)", refused,
    )  # fmt: skip
    return LadderResult("v", unit, 1.05, 0.95, [], [], {unit: fit}, INCONCLUSIVE, "line")


def test_card_sentence_in_each_unit() -> None:
    assert ladder_sentence(_fixed(), INCONCLUSIVE) == (
        "worth 1.12x compute [1.05, 1.19] at 760M; projected 1.08x [0.98, 1.17] at 7B: "
        "inconclusive (one-sided 95% bounds)"
    )
    assert ladder_sentence(_fixed(unit="tokens"), PROCEED).startswith("worth 1.12x tokens [")
    assert ladder_sentence(_fixed(unit="params"), STOP).startswith("worth 1.12x parameters [")
    refused = ladder_sentence(_fixed(refused="lack of fit at p < 0.05: law"), INCONCLUSIVE)
    assert refused == (
        "worth 1.12x compute [1.05, 1.19] at 760M; projection refused: lack of fit at p < 0.05: "
        "law: inconclusive (one-sided 95% bounds)"
    )


def test_board_cell_reads_the_largest_targets_projection() -> None:
    rec = json.loads(json.dumps(ladder.LadderResult.as_dict(_fixed())))
    rec["fits"]["flops"]["projections"].insert(
        0,
        {
            "size": "3B",
            "flops_v": 1e22,
            "multiplier": {"estimate": 2.0, "lower": 1.5, "upper": 3.0},
        },
    )
    m = track.ladder_projection(rec)
    assert m == {"unit": "flops", "unit_word": "compute", "seeds": None,
                 "noise": "seeds (4 dof)", "size": "7B", "estimate": 1.08, "lower": 0.98,
                 "upper": 1.17, "refused": ""}  # fmt: skip
    assert track.multiplier_text(m, INCONCLUSIVE) == "1.08x compute [0.98, 1.17] at 7B"
    refused = track.ladder_projection(ladder.LadderResult.as_dict(_fixed(refused="noise")))
    assert track.multiplier_text(refused, INCONCLUSIVE) == "compute: refused (inconclusive)"
    assert track.multiplier_text(None, PROCEED) == "-"


def test_projection_check_reads_the_fitted_law() -> None:
    flops = 1e22
    lb, lv = float(LAW.loss(flops)), float(LAW.loss(1.2 * flops))  # a variant worth 1.2x there
    c = track.projection_check(
        "7B", LAW, [lb - 0.01, lb + 0.01], [lv, lv], flops, flops, (1.1, 1.0, 1.3)
    )
    assert c.realized == pytest.approx(LAW.compute_for(lv) / flops) == pytest.approx(1.2)
    assert c.anchored == pytest.approx(1.2) and c.inside and c.inside_anchored
    assert c.baseline_predicted == pytest.approx(lb) and c.seeds == 2
    # the law 0.02 too high at the target: the law-only multiplier takes it for the variant's gain
    off = track.projection_check("7B", LAW, [lb - 0.02], [lv - 0.02], flops, flops, (1.1, 1.0, 1.3))
    assert off.realized > 1.3 and not off.inside
    assert off.anchored == pytest.approx(1.2, rel=1e-3) and off.inside_anchored
    assert "OUTSIDE, inside the projection 1.1x [1, 1.3]" in off.line
    assert track.multiplier_held(PROCEED, 1.01, 1.05) and not track.multiplier_held(STOP, 1.1, 1.05)
