"""Student-t quantiles (no scipy) against published table values, and the seed-count rule."""

from __future__ import annotations

import math

import pytest

from olmoablate.stats import holm, mde, p_above, seeds_needed, t_cdf, t_ppf

# (dof, p, t) from standard t tables
TABLE = [
    (1, 0.95, 6.3138),
    (2, 0.95, 2.9200),
    (3, 0.975, 3.1824),
    (4, 0.99, 3.7469),
    (10, 0.95, 1.8125),
    (30, 0.975, 2.0423),
]


@pytest.mark.parametrize(("dof", "p", "t"), TABLE)
def test_t_ppf_matches_tables(dof: int, p: float, t: float) -> None:
    assert t_ppf(p, dof) == pytest.approx(t, abs=5e-4)
    assert t_cdf(t_ppf(p, dof), dof) == pytest.approx(p, abs=1e-9)


def test_symmetry_and_normal_limit() -> None:
    assert t_ppf(0.05, 5) == pytest.approx(-t_ppf(0.95, 5))
    assert t_ppf(0.95, math.inf) == pytest.approx(1.6449, abs=1e-4)
    assert t_ppf(0.95, 10_000) == pytest.approx(1.6449, abs=1e-3)
    with pytest.raises(ValueError):
        t_ppf(1.0, 3)


def test_seeds_needed() -> None:
    # gap 0.04, sd 0.02: n=3 gives t(2)*0.02/sqrt(3)=0.0337 < 0.04, n=2 gives 0.089
    assert seeds_needed(0.05, 0.02, 0.01, 0.95) == 3
    # below the bar: the count toward stop (the bug was answering "none" here)
    n = seeds_needed(0.005, 0.02, 0.01, 0.95)
    assert n is not None and t_ppf(0.95, n - 1) * 0.02 / math.sqrt(n) < 0.005
    assert t_ppf(0.95, n - 2) * 0.02 / math.sqrt(n - 1) >= 0.005
    assert seeds_needed(0.01, 0.02, 0.01, 0.95) is None  # exactly on the bar
    # a known sd (declared floor) uses the normal quantile: fewer seeds
    assert seeds_needed(0.05, 0.02, 0.01, 0.95, known_sd=True) == 2
    assert seeds_needed(0.0100001, 1.0, 0.01, 0.95) is None  # needs more than the limit
    assert seeds_needed(0.05, 0.0, 0.01, 0.95) == 2


def test_holm_step_down() -> None:
    # alpha 0.05, 3 tests: 0.005 <= 0.0167 rejected; 0.03 > 0.025 stops the procedure
    rejected, adjusted = holm([0.03, 0.005, 0.04], 0.05)
    assert rejected == [False, True, False]
    assert adjusted == pytest.approx([0.06, 0.015, 0.06])
    assert holm([0.01, 0.04], 0.05)[0] == [True, True]  # second tested at alpha / 1


def test_p_above_and_mde() -> None:
    assert p_above(0.05, 0.01, 0.01, math.inf) == pytest.approx(1 - 0.9999683, abs=1e-6)
    assert p_above(0.0, math.nan, 0.01, 3) == 1.0
    # known sd, one pair: (1.645 + 0.842) * sd
    assert mde(0.02, 1, 0.95, dof=math.inf) == pytest.approx(2.4865 * 0.02, rel=1e-3)
    assert mde(0.02, 1, 0.95) == math.inf  # sd to be estimated from one seed: impossible
