"""Gate cards say what decided and plot the comparison their verdict decides (issue 35, 13-14).

Synthetic results with a known truth (:mod:`olmoablate.testing.synthetic`), through the report's
own collect/build and :func:`olmoablate.report.cards.cards`/:func:`card_series`.
"""

from __future__ import annotations

from pathlib import Path

from olmoablate.report.assemble import Report, build
from olmoablate.report.cards import cards
from olmoablate.report.collect import collect
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results

EVAL = "eval/lm/demo-heldout/CE loss"
GATE = {"metric": EVAL, "min_effect": 0.01, "noise": {"floor": {"sd": 0.005, "known": True}}}


def _report(tmp_path: Path, spec: SynthSpec, truths: dict[str, ArmTruth]) -> Report:
    root = tmp_path / spec.name
    make_results(root, spec, truths)
    return build(collect(root, use_cache=False, workers=1))


def test_a_stop_on_step_time_alone_says_so_and_that_quality_is_undecided(
    tmp_path: Path,
) -> None:
    """Case 13: +30% step time (whole interval over the 10% limit), a quality effect within the
    noise: the verdict is stop, and the card's one line says cost alone decided it."""
    truths = {
        "baseline": ArmTruth(step_time_s=0.5, step_time_jitter=0.05),
        "sn_da": ArmTruth(offset=-0.008, step_time_s=0.65, step_time_jitter=0.05),
    }
    gate = {**GATE, "max_step_time_overhead": 0.10}
    rep = _report(tmp_path, SynthSpec(name="cost", gate=gate), truths)
    assert rep.verdict == "stop"
    assert [c.outcome for c in rep.variant_verdicts[0].checks] == ["inconclusive"]
    card = cards(rep)[0]
    assert card.reason.startswith("stop on cost alone: step time overhead +"), card.reason
    assert "> limit 10%" in card.reason and card.reason.endswith("; quality undecided."), card.reason


def _looped(tmp_path: Path, looped: float, ref: float) -> Report:
    spec = SynthSpec(
        name="loop",
        variants={
            "looped": {
                "looped": {"body_layers": 4, "loops": 4, "tail": 2, "input_injection": True}
            },
            "ref4": {"layers": {"n_layers": 4}},
        },
        gate={**GATE, "rule": "quality_per_param", "reference": "ref4", "tolerance": 0.2},
    )
    return _report(tmp_path, spec, {"looped": ArmTruth(offset=looped), "ref4": ArmTruth(offset=ref)})


def test_a_quality_per_param_card_plots_variant_vs_reference(tmp_path: Path) -> None:
    """Case 14: looped is worse than the baseline by 0.02 and the reference 0.12 better than
    looped: the verdict decides on looped - ref4 (negative, stop); the card's plot shows that
    comparison, named, with the reference check's estimate - not looped - baseline."""
    from olmoablate.report.cards import card_series

    rep = _looped(tmp_path, looped=0.02, ref=-0.1)
    assert rep.verdict == "stop", rep.reasons
    v = rep.variant_verdicts[0]
    cs = card_series(rep)
    assert cs is not None
    assert cs.title.startswith("looped − reference ref4 (parameter-matched"), cs.title
    assert cs.estimate is v.checks[0].estimate and "reference" in v.checks[0].name
    ys = [y for _, _, series, _ in cs.seeds for y in series]
    assert ys and max(ys) < -0.08, ys  # looped - ref4 = -0.12 (vs baseline it is -0.02)
    card = cards(rep)[0]
    assert card.comparison.startswith("looped vs reference ref4"), card.comparison
