"""Noise floors with their uncertainty (issue 23, item 1): `gate.noise.floor: {sd, pairs}` gives
a t bound with pairs - 1 dof; a bare number is rejected in a spec (read only from old plans)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from olmoablate.errors import UserError
from olmoablate.plan.gate import LEGACY_FLOOR, GateNoise, NoiseFloor
from olmoablate.plan.load import load_spec
from olmoablate.report.assemble import build
from olmoablate.report.collect import collect
from olmoablate.report.noise import estimate, floor_source
from olmoablate.stats import t_ppf
from olmoablate.testing import REPO
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results

EVAL = "eval/lm/demo-heldout/CE loss"


def _spec(tmp_path: Path, floor: object) -> Path:
    body = yaml.safe_load(
        (REPO / "tests" / "specs" / "bad" / "gate_stage_unknown.yaml").read_text()
    )
    doc = {**body, "name": "f", "gate": {"stage": "tiny", "noise": {"floor": floor}}}
    doc["variants"] = {"v": {"depth_attention": {"stride": 2}}}
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_bare_floor_in_a_spec_is_rejected_with_the_new_form(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        load_spec(_spec(tmp_path, 0.02))
    msg = str(err.value)
    assert "\n" not in msg and "f.yaml" in msg and "gate.noise.floor" in msg
    assert "{sd: <sd of the paired delta>, pairs:" in msg and "known: true" in msg
    with pytest.raises(UserError, match="exactly one"):
        load_spec(_spec(tmp_path, {"sd": 0.02}))
    ok = load_spec(_spec(tmp_path, {"sd": 0.02, "pairs": 3})).spec.gate
    assert ok is not None and ok.noise.floor_dof == 2.0 and ok.noise.floor_sd == 0.02


def test_old_plan_bare_floor_still_reads_as_known() -> None:
    noise = GateNoise.model_validate({"floor": 0.02}, context={LEGACY_FLOOR: True})
    assert noise.floor == 0.02 and math.isinf(noise.floor_dof)
    src = floor_source(noise.floor)
    assert math.isinf(src.dof) and "treated as known: normal bound" in src.detail


def test_floor_from_pairs_uses_t_with_pairs_minus_one_dof() -> None:
    src = floor_source(NoiseFloor(sd=0.01, pairs=3))
    est = estimate([[0.05, 0.05]], 0.95, src)
    assert est is not None and est.dof == 2.0
    assert est.mean - est.lower == pytest.approx(t_ppf(0.95, 2) * 0.01)
    known = estimate([[0.05, 0.05]], 0.95, floor_source(NoiseFloor(sd=0.01, known=True)))
    assert known is not None and known.mean - known.lower == pytest.approx(1.6449 * 0.01, rel=1e-4)


def test_floor_with_dof_end_to_end_synthetic_truth(tmp_path: Path) -> None:
    """True effect 0.035 with a floor 0.01 from 3 pairs: z would proceed (0.035 - 1.645 * 0.01 =
    0.0186 > 0.01), t with 2 dof cannot (0.035 - 2.92 * 0.01 = 0.0058 < 0.01): inconclusive,
    and the verdict names the dof. Known: true proceeds and says it was claimed exact."""
    truth = {"sn_da": ArmTruth(offset=-0.035, eval_noise=0.0002)}
    out = {}
    for name, floor in (("t", {"sd": 0.01, "pairs": 3}), ("z", {"sd": 0.01, "known": True})):
        spec = SynthSpec(
            name=f"fl{name}", gate={"metric": EVAL, "min_effect": 0.01, "noise": {"floor": floor}}
        )
        make_results(tmp_path / spec.name, spec, truth)
        rep = build(collect(tmp_path / spec.name, use_cache=False, workers=1))
        out[name] = rep
    t_chk = out["t"].variant_verdicts[0].checks[0]
    assert out["t"].verdict == "inconclusive", out["t"].reasons
    assert (
        t_chk.estimate.dof == 2.0 and "measured from 3 seed pairs" in t_chk.estimate.source_detail
    )
    assert out["z"].verdict == "proceed", out["z"].reasons
    assert "claimed exact" in out["z"].variant_verdicts[0].checks[0].estimate.source_detail


def test_floor_from_pairs_holds_its_level_by_simulation() -> None:
    """Through the project's estimate(): one seed at the bar, floor measured from 3 pairs."""
    rng = np.random.default_rng(7)
    n, hits = 4000, 0
    for _ in range(n):
        sd_hat = float(np.std(rng.normal(0, 1.0, 3), ddof=1))
        d = float(rng.normal(1.0, 1.0))
        est = estimate([[d]], 0.95, floor_source(NoiseFloor(sd=sd_hat, pairs=3)))
        hits += est is not None and est.lower > 1.0
    rate = hits / n
    assert rate < 0.05 + 2 * math.sqrt(0.05 * 0.95 / n)  # used as exact it is 12%
