"""contract/arch.py: the architecture blocks' shared rules, defined once."""

from __future__ import annotations

import pytest

from olmoablate.errors import UserError
from olmoablate.plan.arch import Architecture, DepthAttention, Looped, parse_architecture


def test_loops_at_step_is_one_based_like_olmo_core() -> None:
    lp = Looped(
        body_layers=4, loops=6, tail=2, curriculum={"start": 2, "increment": 2, "interval_steps": 3}
    )
    assert [lp.loops_at_step(s) for s in range(1, 11)] == [2, 2, 2, 4, 4, 4, 6, 6, 6, 6]
    assert sum(n for _, n in lp.loop_schedule(10)) == 10
    assert lp.loop_schedule(10) == [(2, 3), (4, 3), (6, 4)]
    assert Looped(body_layers=4, loops=3).loops_at_step(1) == 3


def test_curriculum_increment_must_be_at_least_one() -> None:
    """The schema and the model builder used to disagree (>= 1 vs >= 0); there is one rule now."""
    with pytest.raises(
        UserError, match=r"looped\.curriculum\.increment: .*greater than or equal to 1"
    ):
        parse_architecture(
            {
                "looped": {
                    "body_layers": 4,
                    "loops": 4,
                    "curriculum": {"start": 1, "increment": 0, "interval_steps": 5},
                }
            }
        )


def test_sources_and_parse() -> None:
    assert DepthAttention(stride=2, recent_window=1).sources(5) == [0, 2, 4]
    a = parse_architecture({"siamese_norm": True, "depth_attention": {"stride": 4}})
    assert a.as_mapping() == {
        "siamese_norm": {"output_norms": False},
        "depth_attention": {"stride": 4, "recent_window": 0},
    }
    assert parse_architecture(None).is_baseline and parse_architecture(a) is a
    assert Architecture(layers={"n_layers": 4}).n_physical_layers(16) == 4
    with pytest.raises(UserError, match=r"siamese_norm\.bogus: unknown key"):
        parse_architecture({"siamese_norm": {"bogus": 1}})
    with pytest.raises(UserError, match="cannot be combined"):
        parse_architecture({"looped": {"body_layers": 4, "loops": 2}, "siamese_norm": {}})
