"""The gate's pre-registered design applied to its fixed-sample verdicts.

Why apart from `olmoablate.report.gate.family`: the fixed gate tests once at full alpha; a
sequential design (``gate.sequential``) replaces that test by its looks
(`olmoablate.report.gate.sequential`), and seeds added by an unplanned ``plan --replan`` (the plan's
gate entry keeps the earlier registrations) are never tested at full alpha. This module takes the
family's verdicts and rewrites their quality check accordingly, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from olmoablate.contract.plan import GateEntry
from olmoablate.contract.schema import Gate
from olmoablate.report.gate.noise import NoiseSource, estimate
from olmoablate.report.gate.sequential import (
    FUTILITY,
    PROCEED,
    PairCurve,
    SequentialResult,
    evaluate_design,
)
from olmoablate.report.gate.verdict import (
    INCONCLUSIVE,
    STOP,
    PairEvidence,
    VariantVerdict,
    quality_check,
)


def earlier_registrations(entry: GateEntry | None) -> int:
    """How many earlier registrations of this gate had other seeds (unplanned seed additions)."""
    if entry is None or entry.seeds is None:
        return 0
    now = sorted(entry.seeds)
    return len(
        {tuple(sorted(h.seeds or [])) for h in entry.history if sorted(h.seeds or []) != now}
    )


def apply_design(
    cfg: Gate,
    verdicts: Sequence[VariantVerdict],
    evidence: Mapping[str, Sequence[PairEvidence]],
    noise: NoiseSource | None,
    entry: GateEntry | None,
    legacy: bool = False,
) -> tuple[list[VariantVerdict], dict[str, SequentialResult]]:
    """The verdicts with each gated (non-exploratory) one's quality check rewritten by the design
    (new verdicts, same order), and the look history per variant (empty without a design)."""
    extra = earlier_registrations(entry)
    out: dict[str, SequentialResult] = {}
    family = [v for v in verdicts if v.role != "exploratory" and v.checks]
    m = max(1, len(family))
    revised: dict[int, VariantVerdict] = {}
    for v in family:
        chk = v.checks[0]
        blockers = v.blockers
        if cfg.sequential is not None:
            order = list(entry.seeds) if entry is not None and entry.seeds else []
            ranked = sorted(
                (p for p in evidence.get(v.variant, []) if p.valid),
                key=lambda e: (order.index(e.seed) if e.seed in order else len(order), e.seed),
            )
            pairs = [
                PairCurve(p.seed, p.curve_x, p.curve, p.tokens, p.complete, p.gpu_hours)
                for p in ranked
            ]
            # several variants: each design at alpha / m (Bonferroni; Holm does not apply
            # across sequential looks)
            sub = (
                cfg
                if m == 1
                else cfg.model_copy(update={"confidence": 1 - (1 - cfg.confidence) / m})
            )
            res = evaluate_design(sub, pairs, noise, extra)
            out[v.variant] = res
            if res.decision == PROCEED:
                outcome = "pass"
                # later stages' seeds are run only when needed: their pairs do not block
                used = next(lk.seeds for lk in res.looks if lk.decision == PROCEED)
                later = [f"pair {p.pair_id}:" for p in ranked[used:]]
                blockers = [b for b in blockers if not b.startswith(tuple(later) or ("\0",))]
            elif res.decision in (FUTILITY, STOP):
                outcome = STOP
            else:
                outcome = INCONCLUSIVE
            reason = f"{chk.name}: sequential design: {res.reason}" + "".join(
                f"; {f}" for f in res.flags
            )
            if m > 1:
                reason += f"; {m} gated variants: each design at alpha / {m} (Bonferroni)"
            chk = replace(chk, outcome=outcome, reason=reason)
        elif extra and chk.estimate is not None:
            conf = 1.0 - (1.0 - cfg.confidence) / (1 + extra)
            est = estimate(
                [p.improvement for p in evidence.get(v.variant, []) if p.valid], conf, noise
            )
            new = quality_check(chk.name, est, cfg.min_effect, conf, cfg.metric, "", legacy)
            chk = replace(
                chk,
                outcome=new.outcome,
                estimate=new.estimate,
                reason=(
                    f"{new.reason}; UNPLANNED: seeds were added by `plan --replan` after the gate "
                    f"was registered with other seeds ({extra} earlier registration(s)): tested at "
                    f"one-sided {conf:.4g} (alpha / {1 + extra}), never at full alpha; declare "
                    "gate.sequential.seed_stages to plan added seeds"
                ),
            )
        revised[id(v)] = v.revised(checks=[chk, *v.checks[1:]], blockers=blockers)
    return [revised.get(id(v), v) for v in verdicts], out
