"""The ladder estimator (olmoablate/scaling.py) against synthetic truths: the fit, the multiplier
in each unit, the projection, its refusals and the gate's three outcomes. Its calibration (the
intervals' coverage cell by cell) is bench/ladder_calibration.py; here a small simulation keeps
the coverage from silently breaking."""

from __future__ import annotations

import math

import numpy as np
import pytest

from olmoablate.scaling import (
    CLEARS,
    FALLS_SHORT,
    UNDECIDED,
    DeclaredNoise,
    Law,
    Rung,
    Target,
    Truth,
    chance_to_resolve,
    decide,
    fit_ladder,
    simulate,
)

LAW = Law(E=1.8, A=400.0, alpha=0.15)


def design(n: int, extra: float = 1.03) -> list[Rung]:
    """Rungs 4x apart in compute; parameters x2 and tokens x2 per rung (C = 6 N D)."""
    out = []
    for i in range(n):
        params, tokens = 1e6 * 2**i, 2e7 * 2**i
        c = 6 * params * tokens
        out.append(Rung(f"r{i}", c, c * extra, tokens, tokens, params, params, {}, {}))
    return out


def truth(m0: float = 1.2, gamma: float = 0.0, sd: float = 0.015, **kw: float) -> Truth:
    return Truth(LAW, m0, gamma, design(4)[-1].flops_v, sd, 2 * sd, **kw)


def targets(top: Rung) -> list[Target]:
    return [Target(f"x{k}", top.flops_v * k, top.tokens_v * k**0.5, top.params_v * k**0.5) for k in (10, 100)]


def test_fit_recovers_the_law_the_multipliers_and_the_trend_without_noise() -> None:
    t = truth(m0=1.15, gamma=0.04, sd=1e-6)
    rungs = simulate(t, design(4), 2, np.random.default_rng(0))
    fit = fit_ladder(rungs, targets(rungs[-1]))
    assert fit.law is not None and fit.trend is not None
    assert fit.law.E == pytest.approx(LAW.E, rel=1e-3)
    assert fit.law.alpha == pytest.approx(LAW.alpha, rel=1e-3)
    for r, m in zip(rungs, fit.rungs, strict=True):
        assert m.multiplier is not None
        assert math.log(m.multiplier.estimate) == pytest.approx(t.true_log_multiplier(r.flops_v), abs=1e-4)
    assert fit.gamma is not None and fit.gamma.estimate == pytest.approx(0.04, abs=1e-4)
    # the projection is the trend at the target (printed unless a lack-of-fit test rejects,
    # which it does by chance in about 1 ladder in 10 even here)
    for tg in targets(rungs[-1]):
        band = fit.trend.band(tg.flops_v, 0.95)
        assert math.log(band.estimate) == pytest.approx(t.true_log_multiplier(tg.flops_v), abs=1e-3)
        assert band.lower < band.estimate < band.upper


def test_the_units_read_the_same_baseline_compute_along_the_ladder_path() -> None:
    """Tokens and parameters each grow as C^(1/2) on this ladder and the variant costs no extra
    FLOPs, so a FLOP multiplier m is m^(1/2) in tokens and in parameters."""
    t = truth(m0=1.21, sd=1e-6)
    rungs = simulate(t, design(4, extra=1.0), 2, np.random.default_rng(0))
    by_unit = {u: fit_ladder(rungs, unit=u) for u in ("flops", "tokens", "params")}
    for i in range(4):
        m = by_unit["flops"].rungs[i].multiplier
        assert m is not None and m.estimate == pytest.approx(1.21, rel=1e-3)
        for u in ("tokens", "params"):
            mu = by_unit[u].rungs[i].multiplier
            assert mu is not None and mu.estimate == pytest.approx(1.1, rel=1e-3)


def test_a_variant_at_or_below_E_has_no_multiplier_and_no_projection() -> None:
    rungs = simulate(truth(sd=1e-4), design(4), 2, np.random.default_rng(0))
    rungs[2] = Rung(**{**rungs[2].__dict__, "loss_v": {0: 1.7, 1: 1.7001}})
    fit = fit_ladder(rungs, targets(rungs[-1]))
    assert fit.rungs[2].multiplier is None
    assert "irreducible loss E" in fit.rungs[2].why_undefined
    assert fit.projections == [] and "r2" in fit.refused


def test_one_seed_needs_a_declared_floor_and_enough_rungs() -> None:
    rng = np.random.default_rng(1)
    four = simulate(truth(), design(4), 1, rng)
    assert "noise.floor" in fit_ladder(four).refused
    three = simulate(truth(), design(3), 1, rng)
    assert "add a seed or a rung" in fit_ladder(three, declared=DeclaredNoise(0.015, 4)).refused
    fit = fit_ladder(four, targets(four[-1]), declared=DeclaredNoise(0.015, 4))
    assert fit.refused == "" and len(fit.projections) == 2
    assert "noise.floor" in fit.noise_source
    assert [t.p for t in fit.lack_of_fit][0] is None  # the law's fit is not testable then


def test_lack_of_fit_refuses_the_projection_when_the_law_is_curved() -> None:
    refused = 0
    rng = np.random.default_rng(2)
    for _ in range(20):
        rungs = simulate(truth(sd=0.005, curvature=0.02), design(5), 3, rng)
        fit = fit_ladder(rungs, targets(rungs[-1]))
        refused += fit.refused.startswith("lack of fit")
        assert (fit.projections == []) == bool(fit.refused)
    assert refused >= 15


@pytest.mark.parametrize(
    ("m0", "sd", "outcome"),
    [(1.4, 0.005, CLEARS), (0.9, 0.005, FALLS_SHORT), (1.08, 0.03, UNDECIDED)],
)
def test_the_gate_clears_falls_short_or_stays_undecided(m0: float, sd: float, outcome: str) -> None:
    rungs = simulate(truth(m0=m0, sd=sd), design(4), 2, np.random.default_rng(3))
    fit = fit_ladder(rungs, targets(rungs[-1]), level=0.90)
    got, line = decide(fit, 1.05)
    assert got == outcome, line
    assert "one-sided 95% bounds" in line or fit.refused


def test_rung_and_projection_intervals_cover_in_a_small_simulation() -> None:
    """200 ladders of 4 rungs x 2 seeds: the 95% rung intervals cover 93-97% in the full bench;
    here the band is wide enough for 200 draws (MC SE about 1 point)."""
    rng = np.random.default_rng(4)
    t = truth(m0=1.1, gamma=0.03)
    hits, proj = [], []
    for _ in range(200):
        rungs = simulate(t, design(4), 2, rng)
        fit = fit_ladder(rungs, targets(rungs[-1]))
        for r, m in zip(rungs, fit.rungs, strict=True):
            assert m.multiplier is not None
            hits.append(m.multiplier.lower <= math.exp(t.true_log_multiplier(r.flops_v)) <= m.multiplier.upper)
        proj += [p.multiplier.lower <= math.exp(t.true_log_multiplier(p.flops_v)) <= p.multiplier.upper for p in fit.projections]
    assert 0.91 <= np.mean(hits) <= 0.99
    assert np.mean(proj) >= 0.90


def test_chance_to_resolve_is_a_probability_per_option() -> None:
    rungs = simulate(truth(m0=1.1, sd=0.02), design(4), 2, np.random.default_rng(5))
    fit = fit_ladder(rungs, targets(rungs[-1]), level=0.90)
    chances = chance_to_resolve(fit, rungs, targets(rungs[-1]), 1.1, draws=20)
    assert set(chances) == {"one more seed", "one more rung"}
    assert all(0.0 <= p <= 1.0 for p in chances.values())


def test_a_one_seed_ladder_in_tokens_gets_its_chances_from_the_declared_floor() -> None:
    """The resolve chances simulate from the FLOP trend; a tokens-unit gate on a one-seed ladder
    refits that trend with the floor its own fit used (it once refit with none: no chances)."""
    rungs = simulate(truth(m0=1.1, sd=0.02), design(4), 1, np.random.default_rng(5))
    floor = DeclaredNoise(0.02, 4)
    fit = fit_ladder(rungs, targets(rungs[-1]), unit="tokens", declared=floor)
    assert fit.refused == "", fit.refused
    chances = chance_to_resolve(fit, rungs, targets(rungs[-1]), 1.1, declared=floor, draws=10)
    assert set(chances) == {"one more seed", "one more rung"}


def test_a_far_projection_from_close_rungs_has_an_open_interval_not_an_error() -> None:
    """Two rungs 6% apart in compute and a target 20,000x beyond: the trend's interval there
    overflows exp; it must come back as inf, not raise (found by plan's width simulation)."""
    b = {0: 10.28, 1: 10.35}
    rungs = [
        Rung("r1", 1.30e11, 1.30e11, 6656, 6656, 6.46e6, 6.46e6, b, {0: 10.218, 1: 10.276}),
        Rung("r2", 5.170e11, 5.171e11, 13056, 13056, 1.30e7, 1.30e7, {0: 8.6547, 1: 8.6465}, {0: 8.6141, 1: 8.5839}),
        Rung("r3", 5.492e11, 5.495e11, 13312, 13312, 1.33e7, 1.33e7, {0: 8.6638, 1: 8.6451}, {0: 8.6208, 1: 8.5954}),
    ]
    fit = fit_ladder(rungs, [Target("1B", 1.14e16, 1.49e6, 1.48e9)], level=0.9)
    for p in fit.projections:
        assert p.multiplier.lower >= 0 and p.multiplier.upper > p.multiplier.lower
    decide(fit, 1.05)  # prints inf bounds rather than failing


def test_the_law_is_the_baseline_runs_alone() -> None:
    """Two proposals sharing a baseline ladder fit the same law: each rung's C* absorbs its
    variant points, so another variant's losses leave the law unchanged."""
    rng = np.random.default_rng(6)
    ours = simulate(truth(m0=1.1), design(4), 2, rng)
    other = simulate(truth(m0=1.4, sd=0.03), design(4), 2, rng)
    theirs = [Rung(**{**a.__dict__, "loss_v": b.loss_v}) for a, b in zip(ours, other, strict=True)]
    a, b = fit_ladder(ours).law, fit_ladder(theirs).law
    assert a is not None and b is not None
    assert (a.E, a.A, a.alpha) == pytest.approx((b.E, b.A, b.alpha), rel=1e-6)


def test_the_band_the_report_draws_is_the_projection_it_prints() -> None:
    rungs = simulate(truth(), design(4), 1, np.random.default_rng(7))
    fit = fit_ladder(rungs, targets(rungs[-1]), declared=DeclaredNoise(0.015, 4))
    assert fit.trend is not None and fit.projections
    for p in fit.projections:
        assert fit.trend.band(p.flops_v, fit.level) == p.multiplier
