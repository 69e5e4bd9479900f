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


def _floor_gates(root: Path, floors: dict[str, dict]) -> None:
    """Synthetic one-seed results with one quality gate per variant, each with its floor."""
    from olmoablate.io import read_json, sha256_of, write_json_atomic
    from olmoablate.plan.gate import Gate

    variants = {v: {"siamese_norm": {"output_norms": i == 0}} for i, v in enumerate(floors)}
    make_results(
        root,
        SynthSpec(variants=variants, gate={"metric": EVAL, "min_effect": 0.01}),
        {v: ArmTruth(offset=-0.02, eval_noise=0.0002) for v in floors},
    )
    plan = read_json(root / "plan.json")
    blocks = {
        f"g_{v}": Gate.model_validate(
            {"stage": "1B", "metric": EVAL, "min_effect": 0.01, "variant": v}
            | {"max_step_time_overhead": None, "noise": {"floor": fl}}
        ).model_dump()
        for v, fl in floors.items()
    }
    plan["gates"] = [
        {"name": n, "gate": b, "gate_sha256": sha256_of(b), "gate_raw_sha256": None}
        for n, b in blocks.items()
    ]
    write_json_atomic(root / "plan.json", plan)


def test_report_names_gates_sharing_a_few_pair_floor_and_its_range(tmp_path: Path) -> None:
    """Issue 34, item 7: two gates declare the same floor measured from 3 pairs. The report names
    both as sharing it, shows the sd's chi-square interval (2 dof) and the range of conditional
    false-proceed rates it implies, and warns (fewer than 5 pairs); gate.json holds the numbers."""
    import json

    from scipy.stats import chi2, norm

    from olmoablate.report.assemble import build_all
    from olmoablate.report.cards import statistics_lines
    from olmoablate.report.document import render_terminal

    root = tmp_path / "shared"
    _floor_gates(root, {"sn_a": {"sd": 0.01, "pairs": 3}, "sn_b": {"sd": 0.01, "pairs": 3}})
    rep = build_all(collect(root, use_cache=False, workers=1))
    terminal = " ".join(render_terminal(rep).split())
    assert "noise floor shared by gates g_sn_a, g_sn_b" in terminal, terminal
    assert "gate g_sn_a: the noise floor is measured from only 3 seed pairs" in terminal
    text = " ".join(" ".join(statistics_lines(rep.gates[1])).split())
    assert "noise floor shared by gates g_sn_a, g_sn_b" in text, text
    lo, hi = 0.01 * math.sqrt(2 / chi2.ppf(0.975, 2)), 0.01 * math.sqrt(2 / chi2.ppf(0.025, 2))
    assert f"the true sd may be {lo:.3g} to {hi:.3g}" in text
    q = t_ppf(0.95, 2)
    fp_high = 1 - norm.cdf(q * math.sqrt(chi2.ppf(0.025, 2) / 2))
    share = chi2.cdf(2 * (norm.ppf(0.9) / q) ** 2, 2)  # 17.5%: the 17.6% by simulation
    assert f"to {fp_high:.1%} of the time given this floor" in text
    assert f"({share:.1%} of floors from 3 seed pairs leave it above 10%)" in text
    assert "noise floor shared by gates g_sn_a, g_sn_b" in text
    gj = json.loads(json.dumps(rep.gate_json()))
    rec = {g["name"]: g for g in gj["gates"]}
    assert rec["g_sn_a"]["floor_shared_with"] == ["g_sn_b"]
    assert rec["g_sn_b"]["floor_uncertainty"]["fp_high"] == pytest.approx(fp_high, rel=1e-6)
    # synthetic truth for the range: floors from 3 pairs of a true sd, the share whose
    # conditional rate at the bar (1 - Phi(q s / sd)) exceeds 10%
    s = np.random.default_rng(5).normal(0, 1, (20_000, 3)).std(axis=1, ddof=1)
    sim = float(np.mean(1 - norm.cdf(q * s) > 0.10))
    assert sim == pytest.approx(share, abs=4 * math.sqrt(share * (1 - share) / 20_000))


def test_report_floor_from_enough_pairs_is_not_a_warning(tmp_path: Path) -> None:
    """Different floors are not shared; 6 pairs: the range is shown, no warning."""
    from olmoablate.report.assemble import build_all

    root = tmp_path / "apart"
    _floor_gates(root, {"sn_a": {"sd": 0.01, "pairs": 6}, "sn_b": {"sd": 0.02, "known": True}})
    rep = build_all(collect(root, use_cache=False, workers=1))
    a, b = rep.gates
    assert a.floor is not None and a.floor.pairs == 6 and a.floor.warning == ""
    assert b.floor is None and not a.floor_shared_with and not b.floor_shared_with
    assert not any("noise floor is measured from only" in w for w in rep.results.warnings)
    assert any(n.startswith("noise floor uncertainty: sd_d 0.01 measured from 6") for n in a.noise_notes)
