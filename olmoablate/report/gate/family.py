"""Several variants under one gate: a primary decides, or Holm controls the family-wise error.

Why: gating k variants each at its own 95% bound promotes a null variant with probability up to
1 - 0.95^k. With ``gate.variant`` set, that one variant decides (the others are *exploratory*:
shown uncorrected, never promoted). Without it, every gated variant is in the family and Holm's
step-down procedure keeps the chance of promoting any null variant at 1 - confidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from olmoablate.contract.plan import GateEntry
from olmoablate.contract.schema import Gate
from olmoablate.contract.stats import holm
from olmoablate.report.gate.design_gate import apply_design
from olmoablate.report.gate.noise import NoiseSource
from olmoablate.report.gate.sequential import SequentialResult
from olmoablate.report.gate.verdict import (
    INCONCLUSIVE,
    PROCEED,
    STOP,
    PairEvidence,
    VariantVerdict,
    as_gate,
    evaluate_variant,
)


def apply_holm(
    verdicts: Sequence[VariantVerdict], confidence: float
) -> tuple[list[VariantVerdict], str]:
    """Family-wise error control over the gated variants (Holm): the new verdicts, and the
    sentence to say (empty, and the verdicts unchanged, for fewer than two variants).

    The tested hypothesis per variant is its first (quality) check, H0: improvement <= min_effect.
    A variant that passes on its own but not after Holm becomes inconclusive with the reason.
    """
    m = len(verdicts)
    if m < 2:
        return list(verdicts), ""
    alpha = 1.0 - confidence
    ps = [
        (v.checks[0].p_value if v.checks and v.checks[0].p_value is not None else 1.0)
        for v in verdicts
    ]
    rejected, adjusted = holm(ps, alpha)
    out: list[VariantVerdict] = []
    for v, rej, adj in zip(verdicts, rejected, adjusted, strict=True):
        if not v.checks:
            out.append(replace(v, role="family"))
            continue
        chk = replace(v.checks[0], holm_p=adj)
        if chk.outcome == "pass" and not rej:
            chk = replace(
                chk,
                outcome=INCONCLUSIVE,
                reason=chk.reason
                + f"; but not after Holm correction over {m} variants (adjusted p {adj:.3g} > "
                f"{alpha:.3g})",
            )
        elif chk.outcome == "pass":
            chk = replace(
                chk, reason=chk.reason + f"; survives Holm over {m} variants (adjusted p {adj:.3g})"
            )
        out.append(v.revised(role="family", checks=[chk, *v.checks[1:]]))
    note = (
        f"family-wise error controlled by Holm over {m} gated variants "
        f"({', '.join(v.variant for v in verdicts)}) at {alpha:.3g}"
    )
    return out, note


@dataclass
class GateOutcome:
    verdict: str
    reasons: list[str]
    verdicts: list[VariantVerdict]
    family_note: str = ""
    #: per gated variant: the sequential design's look history (`olmoablate.report.gate.sequential`)
    sequential: dict[str, SequentialResult] = field(default_factory=dict)


def evaluate_gate(
    cfg: Gate | Mapping[str, Any],
    evidence: Mapping[str, Sequence[PairEvidence]],
    family: Sequence[str],
    exploratory: Sequence[str] = (),
    noise: NoiseSource | None = None,
    way_out: str = "",
    legacy: bool = False,
    entry: GateEntry | None = None,
) -> GateOutcome:
    """One gate block -> the headline verdict.

    ``family`` are the variants the gate decides on: one primary variant (``gate.variant``) or,
    without it, every gated variant, then under Holm's family-wise correction (promoted: those
    that survive it). ``exploratory`` variants are evaluated and shown, uncorrected, never
    promoted and never part of the headline.
    """
    cfg = as_gate(cfg)
    conf = cfg.confidence
    fam = [evaluate_variant(v, evidence.get(v, []), cfg, noise, way_out, legacy) for v in family]
    note = ""
    if cfg.sequential is None:
        fam, note = apply_holm(fam, conf)
    fam, seq = apply_design(cfg, fam, evidence, noise, entry, legacy)
    expl = [
        replace(
            v,
            role="exploratory",
            notes=[*v.notes, "exploratory: not gated, uncorrected for multiplicity, never promoted"],
        )
        for v in (
            evaluate_variant(x, evidence.get(x, []), cfg, noise, way_out, legacy)
            for x in exploratory
        )
    ]
    if not fam:
        return GateOutcome(INCONCLUSIVE, ["no variant to gate (no pairs at the stage size)"], expl)
    if len(fam) == 1:
        verdict, reasons = fam[0].verdict, [f"[{fam[0].variant}] {r}" for r in fam[0].reasons]
    else:
        if any(v.verdict == PROCEED for v in fam):
            verdict = PROCEED
        elif all(v.verdict == STOP for v in fam):
            verdict = STOP
        else:
            verdict = INCONCLUSIVE
        reasons = [note] + [f"[{v.variant}] {r}" for v in fam for r in v.reasons]
    return GateOutcome(verdict, reasons, fam + expl, note, seq)
