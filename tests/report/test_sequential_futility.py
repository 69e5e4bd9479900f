"""Futility looks under two interim information models (issue 34, item 6): the interim bound is
chosen so that the promised power holds under the Brownian model, and a one-seed interim look
uses the floor scaled to its token fraction -- checked through the report's decision functions
(bench/futility_models.py's simulation) and with synthetic truth through `report`."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from statistics import NormalDist
from types import ModuleType

import numpy as np
import pytest

from olmoablate.plan.gate import Gate
from olmoablate.report.assemble import build
from olmoablate.report.collect import collect
from olmoablate.report.sequential import CONTINUE, FUTILITY, futility_confidence
from olmoablate.stats import BROWNIAN, FUTILITY_POWER_COST
from olmoablate.testing import REPO
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results

EVAL = "eval/lm/demo-heldout/CE loss"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "futility_models", REPO / "bench" / "futility_models.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("stages", "effects"),
    [([1], (3.49, 4.0)), ([2, 4], (2.7, 3.2))],  # bar + MDE (80% without futility), above it
)
def test_chosen_bound_keeps_the_promised_power_under_the_brownian_model(
    stages: list[int], effects: tuple[float, ...]
) -> None:
    """Futility at 25% and 50% of tokens, Brownian interim deltas (sd 1/sqrt(f)), bar 1 sd_d:
    the power lost to futility where the design promises >= 80% is at most 1 point (+ 3 MC
    SE); the bound before (declared 50%, full-budget floor) loses more than 3 points there."""
    fm = _bench()
    des = fm.design(stages, [0.25, 0.5])
    fq = futility_confidence(des, 0.05, stages[-1], fm.FLOOR.dof)
    assert fq > des.futility_confidence  # the declared 50% bound had to be raised
    rng = np.random.default_rng(11)  # not the calibration's seed
    reps = 20_000
    for delta in effects:
        p, base, _ = fm.simulate(des, stages, delta, BROWNIAN, fq, True, reps, rng)
        assert base.mean() >= 0.78, (delta, base.mean())  # where power is promised
        loss = base & ~p
        se = float(loss.std()) / math.sqrt(reps)
        assert float(loss.mean()) <= FUTILITY_POWER_COST + 3 * se, (stages, delta, loss.mean())
    p, base, _ = fm.simulate(des, stages, effects[0], BROWNIAN, 0.5, False, reps, rng)
    assert float((base & ~p).mean()) > 3 * FUTILITY_POWER_COST


def test_one_seed_interim_look_uses_the_floor_for_its_fraction(tmp_path: Path) -> None:
    """One seed, a known floor 0.01, bar 0.01, true improvement 0.002, both arms at half the
    budget: the old rule (50% bound, i.e. the interim mean below the bar) stopped it; with the
    floor scaled to the fraction (0.01 / sqrt(0.25) = 0.02 at 25%) and the calibrated bound the
    upper bound is above the bar at both looks, and the report says which bound it used."""
    gate = {
        "metric": EVAL,
        "min_effect": 0.01,
        "noise": {"floor": {"sd": 0.01, "known": True}},
        "sequential": {"interim": [0.25, 0.5]},
    }
    spec = SynthSpec(gate=gate, seeds=(0,))
    truth = {
        "sn_da": ArmTruth(offset=-0.002, eval_noise=0.00002, stop_at=100, state="running"),
        "baseline": ArmTruth(stop_at=100, state="running", eval_noise=0.00002),
    }
    make_results(tmp_path / "r", spec, truth)
    rep = build(collect(tmp_path / "r", use_cache=False, workers=1))
    looks = rep.sequential["sn_da"].looks
    assert [lk.decision for lk in looks] == [CONTINUE, CONTINUE, "not reached"], looks
    assert looks[0].mean is not None and looks[0].mean < 0.01  # below the bar: the old stop
    design = Gate.model_validate({"stage": "1B", **gate}).sequential
    assert design is not None
    fq = futility_confidence(design, 0.05, 1, math.inf)
    assert f"the {fq:.1%} upper bound < 0.01" in looks[0].boundary
    se = 0.01 / math.sqrt(0.25)  # the floor for a quarter of the tokens' information
    assert looks[0].upper is not None
    assert looks[0].upper - looks[0].mean == pytest.approx(se * NormalDist().inv_cdf(fq))
    assert "raised so futility costs <= 1% of power under the Brownian interim model" in (
        looks[0].boundary
    )
    # far below the bar it still stops
    truth["sn_da"] = ArmTruth(offset=0.05, eval_noise=0.00002, stop_at=100, state="running")
    make_results(tmp_path / "s", spec, truth)
    rep = build(collect(tmp_path / "s", use_cache=False, workers=1))
    assert rep.sequential["sn_da"].decision == FUTILITY
