"""What a planned gate can resolve, said before any GPU time is spent (`validate` and `plan`).

Why at plan time: a one-seed gate with no declared noise source cannot give proceed or stop,
whatever the runs show; finding that out after 180 GPU-hours per 1B run is the expensive way.
From plan.json alone this prints the noise source the report will use, the minimum detectable
effect (MDE) of the planned seeds, and what each way of getting a noise source costs.
MDE = (q_conf + q_power) * sd / sqrt(n): a true effect of ``min_effect + MDE`` gives proceed with
probability ``POWER``. Pure Python (login node): no numpy, torch or pandas.
"""

from __future__ import annotations

import math
from typing import Any

from olmoablate.contract.gatespec import SequentialDesign
from olmoablate.contract.plan import GateRegistration, Plan
from olmoablate.contract.stats import mde

POWER = 0.8


def _hours(plan: Plan, size: str, arm: str, aa: bool = False) -> float:
    for r in plan.runs:
        if r.size == size and r.arm == arm and r.is_aa == aa:
            return r.gpu_hours
    return 0.0


def _cost(runs: int, hours: float) -> str:
    """Extra runs and their GPU-hours (CPU runs have none)."""
    return f"+{runs} run(s), {hours:.4g} GPU-h" if hours else f"+{runs} run(s)"


def gated_variants(plan: Plan) -> list[str]:
    """Variants the gate decides on at its stage: the primary, or every non-reference one."""
    g = plan.gate
    if g is None:
        return []
    at: list[str] = []
    for p in plan.pairs:
        if p.size == g.stage and p.variant not in at:
            at.append(p.variant)
    if g.variant:
        return [g.variant] if g.variant in at else []
    return [v for v in at if v != g.reference]


#: Within-seed correlations of the two arms' run noise at which the A/A MDE is shown.
RHOS = (0.0, 0.5, 0.9)


def aa_mde_text(k: int, confidence: float) -> str:
    """The A/A gate's MDE in sd_d (the sd of one seed's paired delta), as a function of the
    within-seed correlation rho of the two arms: the gate bounds with sqrt(2) sd_run, while
    sd_d = sqrt(2 (1 - rho)) sd_run, so its MDE is (q_conf + q_power) sd_d / sqrt(1 - rho)."""
    base = mde(1.0, 1, confidence, POWER, dof=k)
    vals = " / ".join(f"{base / math.sqrt(1.0 - r):.3g}" for r in RHOS)
    rhos = " / ".join(f"{r:g}" for r in RHOS)
    return f"MDE {vals} x sd_d at within-seed correlation {rhos}"


def design_lines(design: SequentialDesign, n: int, bar: float, alpha: float, m: int) -> list[str]:
    """The pre-registered looks and their boundaries, before any GPU time is spent."""
    from olmoablate.contract.seqdesign import t_stage_levels  # numpy: only with a design

    stages = list(design.seed_stages) or [n]
    a = alpha / max(1, m)
    levels = t_stage_levels(stages, a, design.spending)
    looks = [
        f"interim at {f:.0%} of tokens ({stages[0]} seed(s)): stop for futility if the "
        f"{design.futility_confidence:.0%} upper bound < {bar:g}, never proceed"
        for f in design.interim
    ]
    looks += [
        f"full budget, {k} seed(s): proceed if the one-sided p <= {lv:.3g} (t, {k - 1} dof)"
        for k, lv in zip(stages, levels, strict=True)
    ]
    head = (
        f"sequential design ({design.spending} spending of alpha {a:.3g}"
        + (f" = {alpha:.3g} / {m} variants" if m > 1 else "")
        + "; futility is non-binding: `olmoablate watch SPEC` cancels, resuming is allowed): "
    )
    return [head + "; ".join(f"look {i} of {len(looks)}: {t}" for i, t in enumerate(looks, 1))]


def gate_lines(plan: Plan) -> tuple[list[str], list[str]]:
    """(information lines, warnings) about the planned gate's statistics and their costs."""
    g = plan.gate
    if g is None:
        return [], []
    stage, conf = g.stage, g.confidence
    floor = g.noise.floor_sd
    fdof = g.noise.floor_dof
    k = g.noise.measure.aa_seeds if g.noise.measure is not None else 0
    variants = gated_variants(plan)
    seeds = {p.seed for p in plan.pairs if p.size == stage and p.variant in variants}
    n = len(seeds)
    base_h = _hours(plan, stage, "baseline")
    pair_h = base_h + sum(_hours(plan, stage, v) for v in variants)
    lines: list[str] = []
    warnings: list[str] = []
    me = g.min_effect
    unit = "sd_d (the sd of one seed's paired delta)"
    if n >= 2 and k:
        warnings.append(
            f"gate.noise.measure (A/A) is ignored: the stage {stage} has {n} seed pairs, whose "
            "spread is the gate's noise; no A/A runs are planned (drop noise.measure)"
        )
    if n >= 2:
        src = f"noise: paired seeds ({n} seeds at {stage}, Student t with {n - 1} dof)"
        if floor is not None:
            m = mde(floor, n, conf, POWER)
            src += f"; MDE with the declared floor {floor:g}: {m:.3g} (proceeds at {me + m:.3g})"
        else:
            src += f"; MDE = {mde(1.0, n, conf, POWER):.3g} x {unit}"
        lines.append(src)
    elif n == 1 and floor is not None:
        m = mde(floor, 1, conf, POWER, dof=fdof)
        how = "known: normal bound" if math.isinf(fdof) else f"t bound with {fdof:g} dof"
        lines.append(
            f"noise: declared floor sd_d = {floor:g} (one seed, {how}); MDE {m:.3g}: a "
            f"true effect of {me + m:.3g} proceeds with about {POWER:.0%} probability"
        )
    elif n == 1 and k:
        lines.append(
            f"noise: A/A baselines: {k} extra baseline(s) at {stage} with seeds "
            f"{', '.join(str(r.seed) for r in plan.runs if r.is_aa)} "
            f"({_cost(k, k * base_h)}), run-level sd sd_run with {k} dof (t bound, "
            f"conservative); {aa_mde_text(k, conf)}"
        )
    elif n == 1:
        warnings.append(
            f"gate at {stage} has one seed pair and no gate.noise source: it cannot resolve "
            "(the report will say inconclusive whatever the runs show); add "
            "gate.noise.floor (measured earlier), gate.noise.measure: {aa_seeds: k}, or a seed"
        )
    if n == 1:
        z = mde(1.0, 1, conf, POWER, 2.0)
        opts = [f"floor from 3 seed pairs: free if measured earlier (MDE {z:.3g} x sd_d)"]
        for kk in (1, 2, 4):
            opts.append(f"aa_seeds {kk}: {_cost(kk, kk * base_h)} ({aa_mde_text(kk, conf)})")
        opts.append(
            f"one more seed pair: {_cost(1 + len(variants), pair_h)} "
            f"(MDE {mde(1.0, 2, conf, POWER):.3g} x sd_d)"
        )
        lines.append("noise choices for one seed: " + "; ".join(opts))
    if g.sequential is not None:
        lines.extend(design_lines(g.sequential, n, g.min_effect, 1.0 - conf, len(variants)))
    if len(variants) > 1:
        lines.append(
            f"several gated variants ({', '.join(variants)}) and no gate.variant: Holm "
            f"family-wise correction at {1 - conf:.3g} (the best one is tested at "
            f"{(1 - conf) / len(variants):.3g}); set gate.variant to let one primary decide"
        )
    elif g.variant:
        others = [v for v in plan.variants if v not in (g.variant, g.reference)]
        if others:
            lines.append(
                f"primary variant {g.variant} decides; {', '.join(others)}: exploratory "
                "(shown uncorrected, never promoted)"
            )
    return lines, warnings


def carry_registrations(old: Any, plan: Plan) -> Plan:
    """``plan`` with each gate's earlier registrations from the plan.json it replaces (``old``,
    parsed, unvalidated), so seeds added by ``plan --replan`` stay visible to the report.

    A registration is kept when its seeds or gate hash differ from the new one; an old plan
    without design records (an earlier release) counts with its top-level ``seeds``.
    """
    if not isinstance(old, dict) or not isinstance(old.get("gates"), list):
        return plan
    prior = {g.get("name"): g for g in old["gates"] if isinstance(g, dict)}
    entries = []
    for e in plan.gates:
        o = prior.get(e.name)
        hist = list(e.history)
        if isinstance(o, dict):
            hist = [GateRegistration.model_validate(h) for h in o.get("history") or []] + hist
            seeds = o.get("seeds", old.get("seeds"))
            if seeds != e.seeds or o.get("gate_sha256") != e.gate_sha256:
                hist.append(
                    GateRegistration(
                        created=str(old.get("created", "")),
                        seeds=list(seeds) if isinstance(seeds, list) else None,
                        gate_sha256=o.get("gate_sha256"),
                    )
                )
        entries.append(e.model_copy(update={"history": hist}))
    return plan.model_copy(update={"gates": entries})
