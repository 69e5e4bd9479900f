"""Holm's family-wise correction is a pure function: new verdicts out, the inputs untouched."""

from __future__ import annotations

import dataclasses

import pytest

from olmoablate.plan.names import INCONCLUSIVE, PROCEED
from olmoablate.report.sequential import apply_holm
from olmoablate.report.verdict import QualityCheck, VariantVerdict


def _verdict(name: str, p: float) -> VariantVerdict:
    chk = QualityCheck("vs baseline", "pass", f"{name} passes", None, p_value=p)
    return VariantVerdict(name, PROCEED, [chk.reason], [chk], [f"{name}-s0"], [])


def test_holm_returns_new_verdicts_and_leaves_its_inputs_alone() -> None:
    before = [_verdict("a", 0.04), _verdict("b", 0.5)]
    snapshot = [dataclasses.asdict(v) for v in before]
    after, note = apply_holm(before, confidence=0.95)
    assert [dataclasses.asdict(v) for v in before] == snapshot  # inputs unchanged
    assert "Holm over 2 gated variants" in note
    a, b = after
    assert a is not before[0] and a.role == "family" and b.role == "family"
    assert a.checks[0].outcome == INCONCLUSIVE and a.verdict == INCONCLUSIVE
    assert "not after Holm correction" in a.reasons[-1]
    assert a.checks[0].holm_p == pytest.approx(0.08)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.verdict = PROCEED  # type: ignore[misc]


def test_holm_of_one_variant_is_the_identity() -> None:
    one = [_verdict("a", 0.01)]
    after, note = apply_holm(one, confidence=0.95)
    assert note == "" and after == one
