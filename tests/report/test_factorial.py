"""The factorial gate (``rule: complementary``, issue 33): synthetic truths get their verdicts, the
paired-seed interaction interval covers at its nominal level under correlated arms (a shared
baseline and seed effects), the gate block checks, and a results folder end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from olmoablate.plan.gate import Gate
from olmoablate.plan.load import SpecError, load_spec
from olmoablate.report.assemble import build
from olmoablate.report.cards import cards, statistics_lines
from olmoablate.report.collect import collect
from olmoablate.report.factorial import (
    COMPLEMENTARY,
    INTERFERING,
    REDUNDANT,
    factorial_estimate,
    naive_interaction,
)
from olmoablate.testing import MINIMAL_SPEC
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results

EVAL = "eval/lm/demo-heldout/CE loss"
SN, DA = {"siamese_norm": {"output_norms": False}}, {"depth_attention": {"stride": 8}}
VARIANTS = {
    "siamese_only": SN,
    "depth_only": DA,
    "siamese_depth": {**SN, **DA},
}
FACTORIAL = {"rule": "complementary", "of": ["siamese_only", "depth_only"],
             "combined": "siamese_depth", "metric": EVAL, "tolerance": 0.01}  # fmt: skip


def draw(
    rng: np.random.Generator, n: int, mu: dict[str, float], seed_sd: float, run_sd: float
) -> dict[str, np.ndarray]:
    """Per-seed losses of the four arms: a seed effect shared by all four arms of a seed plus
    independent run noise; ``mu``: each arm's true loss (baseline 'base')."""
    seed = rng.normal(0.0, seed_sd, n)
    return {k: m + seed + rng.normal(0.0, run_sd, n) for k, m in mu.items()}


def improvements(loss: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b = loss["base"]
    return b - loss["A"], b - loss["B"], b - loss["AB"]


def truth(d_a: float, d_b: float, d_ab: float) -> dict[str, float]:
    return {"base": 3.0, "A": 3.0 - d_a, "B": 3.0 - d_b, "AB": 3.0 - d_ab}


TRUTHS = {
    "additive": (truth(0.05, 0.04, 0.09), COMPLEMENTARY),
    "super-additive": (truth(0.05, 0.04, 0.13), COMPLEMENTARY),
    "redundant": (truth(0.05, 0.05, 0.05), REDUNDANT),
    "interfering": (truth(0.05, 0.04, -0.03), INTERFERING),
}


@pytest.mark.parametrize("name", list(TRUTHS))
def test_truth_gets_its_verdict(name: str) -> None:
    # 8 seeds, seed effect sd 0.05 (cancels in the paired contrasts), run noise sd 0.005;
    # tolerance 0.02. Over 200 draws the truth's verdict is the usual one (>= 90%) and a wrong
    # decisive verdict is rare (<= 5%: each claim is tested at alpha 0.05).
    mu, want = TRUTHS[name]
    rng = np.random.default_rng(33)
    got: dict[str, int] = {}
    for _ in range(200):
        d = improvements(draw(rng, 8, mu, 0.05, 0.005))
        v = factorial_estimate(*d, confidence=0.95, tolerance=0.02).verdict
        got[v] = got.get(v, 0) + 1
    assert got.get(want, 0) >= 180, got
    wrong = sum(c for v, c in got.items() if v not in (want, "inconclusive"))
    assert wrong <= 10, got


def test_one_seed_is_inconclusive() -> None:
    res = factorial_estimate([0.05], [0.04], [0.09], confidence=0.95, tolerance=0.02)
    assert res.verdict == "inconclusive"
    assert "fewer than 2" in res.line


def test_estimate_is_the_per_seed_contrast() -> None:
    d_a, d_b, d_ab = [0.05, 0.06, 0.04], [0.02, 0.03, 0.01], [0.08, 0.1, 0.05]
    res = factorial_estimate(d_a, d_b, d_ab, confidence=0.95, tolerance=0.02)
    inter = np.array(d_ab) - np.array(d_a) - np.array(d_b)
    assert res.interaction.per_seed == pytest.approx(inter.tolist())
    se = inter.std(ddof=1) / math.sqrt(3)
    assert res.interaction.lower == pytest.approx(inter.mean() - 2.919986 * se, rel=1e-5)
    assert res.margin_a.mean == pytest.approx(np.mean(np.array(d_ab) - d_a))


def coverage(
    n_sim: int, n_seeds: int, seed_sd: float, run_sd: float, rng_seed: int = 7
) -> tuple[float, float, float, float]:
    """Coverage of the true interaction by the paired-seed two-sided 95% interval (each bound
    one-sided 97.5%) and by the naive one, and each one's mean width."""
    rng = np.random.default_rng(rng_seed)
    mu = truth(0.05, 0.04, 0.08)  # true interaction -0.01
    true_i = -0.01
    hit_p = hit_n = 0
    w_p = w_n = 0.0
    for _ in range(n_sim):
        d = improvements(draw(rng, n_seeds, mu, seed_sd, run_sd))
        res = factorial_estimate(*d, confidence=0.975, tolerance=0.02)
        lo, hi = res.interaction.lower, res.interaction.upper
        hit_p += lo <= true_i <= hi
        w_p += hi - lo
        lo_n, hi_n = naive_interaction(*d, 0.975)
        hit_n += lo_n <= true_i <= hi_n
        w_n += hi_n - lo_n
    return hit_p / n_sim, hit_n / n_sim, w_p / n_sim, w_n / n_sim


def test_interaction_coverage_under_correlated_arms() -> None:
    # 2000 draws of 5 seeds: shared seed effect sd 0.03 and run noise sd 0.01. MC se of a 95%
    # coverage: sqrt(.95 * .05 / 2000) = 0.0049. The paired interval is within 2 points of 95%;
    # the naive one (three per-arm intervals taken as independent) over-covers: its variance
    # 6 sd^2 counts the shared baseline three times where the contrast has 4 sd^2.
    paired, naive, w_p, w_n = coverage(2000, 5, 0.03, 0.01)
    assert abs(paired - 0.95) <= 0.02, paired
    assert naive > 0.97, naive
    assert w_n > 1.1 * w_p


def test_gate_fields_keep_old_hashes_and_check() -> None:
    old = Gate.model_validate({"stage": "1B", "metric": EVAL}).model_dump()
    assert "of" not in old and "combined" not in old
    g = Gate.model_validate({"stage": "1B", **FACTORIAL})
    assert g.model_dump()["of"] == ["siamese_only", "depth_only"]
    with pytest.raises(ValueError, match="only for rule complementary"):
        Gate.model_validate({"stage": "1B", "of": ["a", "b"]})


def _spec_problems(tmp_path: Path, **gate: Any) -> list[tuple[str, str]]:
    doc = yaml.safe_load(MINIMAL_SPEC.read_text())
    doc["variants"] = {
        "a": {"depth_attention": {"stride": 2}},
        "b": {"siamese_norm": {"output_norms": False}},
        "ab": {"depth_attention": {"stride": 2}, "siamese_norm": {"output_norms": False}},
        "other": {"depth_attention": {"stride": 2}, "sizes": ["tiny"]},
    }
    doc["seeds"] = gate.pop("seeds", [0, 1])
    doc["gate"] = {"stage": "tiny", "rule": "complementary", "metric": "train/CE loss", **gate}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        load_spec(path)
    except SpecError as e:
        return [(p.field, p.message) for p in e.problems]
    return []


def test_spec_checks_name_the_field(tmp_path: Path) -> None:
    assert _spec_problems(tmp_path, of=["a", "b"], combined="ab") == []
    got = dict(_spec_problems(tmp_path, of=["a"], combined="ab"))
    assert "two distinct" in got["gate.of"]
    got = dict(_spec_problems(tmp_path, of=["a", "a"], combined="ab"))
    assert "two distinct" in got["gate.of"]
    got = dict(_spec_problems(tmp_path, of=["a", "b"]))
    assert "needs combined" in got["gate.combined"]
    got = dict(_spec_problems(tmp_path, of=["a", "b"], combined="b"))
    assert "third variant" in got["gate.combined"]
    got = dict(_spec_problems(tmp_path, of=["a", "zz"], combined="ab"))
    assert "unknown variant 'zz'" in got["gate.of[1]"]
    got = dict(_spec_problems(tmp_path, of=["a", "b"], combined="ab", seeds=[0]))
    assert ">= 2 seeds" in got["gate.rule"]
    assert all("\n" not in m for _, m in _spec_problems(tmp_path, of=["a", "zz"], combined="q"))


def test_synthetic_folder_end_to_end(tmp_path: Path) -> None:
    # 4 seeds, additive truth on the held-out CE (sn -0.05, da -0.04, both -0.09): complementary
    # -> proceed, with the factorial record in gate.json and the per-seed lines on the card.
    spec = SynthSpec(
        seeds=(0, 1, 2, 3), variants=VARIANTS,
        gate={"stage": "1B", **FACTORIAL},
    )  # fmt: skip
    truths = {
        "siamese_only": ArmTruth(offset=-0.05, eval_noise=0.002),
        "depth_only": ArmTruth(offset=-0.04, eval_noise=0.002),
        "siamese_depth": ArmTruth(offset=-0.09, eval_noise=0.002),
        "baseline": ArmTruth(eval_noise=0.002),
    }
    make_results(tmp_path / "r", spec, truths)
    rep = build(collect(tmp_path / "r", use_cache=False, workers=1))
    assert rep.verdict == "proceed", rep.reasons
    assert rep.factorial is not None and rep.factorial.verdict == COMPLEMENTARY
    assert rep.factorial.seeds == [0, 1, 2, 3]
    assert rep.factorial.interaction.mean == pytest.approx(0.0, abs=0.01)
    assert rep.factorial.margin_a.mean == pytest.approx(0.04, abs=0.01)
    rec = json.loads(json.dumps(rep.gate_json()))
    assert rec["factorial"]["verdict"] == COMPLEMENTARY
    assert rec["rule"] == "complementary"
    assert "factorial: complementary" in rep.reasons[0]
    card = cards(rep)[0]
    assert card.verdict == "proceed" and "factorial: complementary" in card.reason
    assert card.effect_text.startswith("factorial COMPLEMENTARY: interaction")
    assert any(line.startswith("seed 3: d_A") for line in statistics_lines(rep))


def test_the_board_shows_the_factorial_word(tmp_path: Path) -> None:
    """A complementary gate's row on the board reads its verdict and the factorial word."""
    from olmoablate.report.assemble import build_all
    from olmoablate.report.board import build_board, rows
    from olmoablate.report.document import write_all

    spec = SynthSpec(seeds=(0, 1, 2), variants=VARIANTS, gate={"stage": "1B", **FACTORIAL})
    truths = {  # the combination no better than SiameseNorm alone: redundant -> stop
        "siamese_only": ArmTruth(offset=-0.05, eval_noise=0.001),
        "depth_only": ArmTruth(offset=-0.04, eval_noise=0.001),
        "siamese_depth": ArmTruth(offset=-0.05, eval_noise=0.001),
        "baseline": ArmTruth(eval_noise=0.001),
    }
    root = tmp_path / "results" / "fac"
    make_results(root, spec, truths)
    write_all(build_all(collect(root, use_cache=False, workers=1)), root, ["json"])
    (row,) = [p for p in build_board(tmp_path / "results").proposals if p.role == "primary"]
    assert (row.verdict, row.factorial) == ("stop", "redundant")
    assert any("stop (redundant)" in cells for cells in rows(build_board(tmp_path / "results")))
