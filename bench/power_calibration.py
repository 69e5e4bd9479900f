"""Do the power statements come true as often as they say? Through the project's own decisions.

Usage: python bench/power_calibration.py [--reps 200000] [--seed 0] [--only mde|predictive]

Model (units of sigma_d, the sd of one seed's paired delta): per-seed deltas d_s ~ N(delta, 1);
the bar (``min_effect``) = 1; confidence 0.95 (issue 34).

1. `plan`'s MDE (olmoablate.stats.design_mde, what `plan` prints): at delta = bar + MDE the
   design's realised chance to proceed, against the stated 80%, for paired 2 and 3 seeds, A/A
   baselines k = 1 (and 2) at within-seed correlation 0 and 0.5 (runs simulated: the A/A
   baselines' spread includes the pair's own baseline, as olmoablate.report.noise.aa_source
   measures it), seed stages [2, 4] with O'Brien-Fleming and Pocock spending (a futility stop at
   the 2-seed look is obeyed), Holm over 3 variants (2 null). Decisions through
   olmoablate.report.sequential.stage_decision with the report's stage_levels, cross-checked
   draw for draw on a subsample against the report's scalar path (evaluate_variant with
   aa_source, evaluate_design with its look walk, evaluate_gate with Holm); the old shortcut's
   MDE, (q_conf + q_power) / sqrt(n), as contrast.
2. "k seeds give X%" (olmoablate.stats.predictive_resolve, what the report's seeds line says):
   truths theta = (delta - bar) uniform on [-30, 30] (an effect spread evenly in units of
   sigma_d: the law under which a statement made from scale-free statistics is calibrated); the
   first look with n seeds at full alpha; where it is inconclusive, the stated chance that n + k
   seeds resolve it, then k new seeds pooled with the old ones and decided as the report decides
   a gate changed by `plan --replan` after a look (olmoablate.report.sequential.replan_decision:
   below the bar a stop at the gate's own alpha; above it never a proceed, and the line states
   no chance), cross-checked draw for draw against evaluate_gate with that re-plan registered,
   and the seeds line's printed percent against the function; then the function at alpha / 2
   as a parameter (both directions). Table by decile of the stated chance, with MC standard
   errors; the old plug-in power (at the observed effect, full alpha) as contrast; and the mean
   stated vs realised chance at fixed truths (at the bar, 2x, 3x; level alpha / 2), where a
   predictive chance is not a power.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sst

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from olmoablate.plan.gate import Gate  # noqa: E402
from olmoablate.plan.names import INCONCLUSIVE, PROCEED, STOP  # noqa: E402
from olmoablate.plan.planfile import GateEntry, GateRegistration  # noqa: E402
from olmoablate.report.noise import aa_source, estimate  # noqa: E402
from olmoablate.report.sequential import (  # noqa: E402
    FUTILITY,
    PairCurve,
    evaluate_design,
    evaluate_gate,
    replan_decision,
    stage_decision,
    stage_levels,
)
from olmoablate.report.verdict import (  # noqa: E402
    PairEvidence,
    evaluate_variant,
    seeds_line,
)
from olmoablate.stats import (  # noqa: E402
    design_for,
    design_mde,
    predictive_resolve,
    t_ppf,
)

CONF, ALPHA, BAR, POWER = 0.95, 0.05, 1.0, 0.8
CHECK = 300  # draws per row cross-checked against the report's scalar path


def _gate(**extra: object) -> Gate:
    return Gate.model_validate({"stage": "1B", "metric": "m", "min_effect": BAR, **extra})


def _paired(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = d.shape[1]
    return d.mean(axis=1), d.std(axis=1, ddof=1) / math.sqrt(n)


def _evidence(d: np.ndarray) -> list[PairEvidence]:
    return [PairEvidence(f"p{i}", i, improvement=[float(x)]) for i, x in enumerate(d)]


def power_fixed(
    rng: np.random.Generator, reps: int, n: int, mde: float, m: int = 1
) -> tuple[float, int]:
    """Realised power of a fixed n-seed gate at bar + mde; with m > 1, m - 1 null variants beside
    it under Holm (p-values through the same t; cross-checked through evaluate_gate)."""
    d = rng.standard_normal((reps, n)) + BAR + mde
    mean, se = _paired(d)
    if m == 1:
        dec = stage_decision(mean, se, n - 1, BAR, ALPHA, CONF, True, 0.5)
        bad = 0
        for i in range(min(CHECK, reps)):
            v = evaluate_variant("v", _evidence(d[i]), _gate())
            bad += (v.verdict == PROCEED) != (dec[i] == PROCEED)
        return float(np.mean(dec == PROCEED)), bad
    nulls = rng.standard_normal((reps, m - 1, n)) + BAR
    p_real = sst.t.sf((mean - BAR) / se, n - 1)
    nm, ns = nulls.mean(axis=2), nulls.std(axis=2, ddof=1) / math.sqrt(n)
    p_null = sst.t.sf((nm - BAR) / ns, n - 1)
    ps = np.column_stack([p_real, p_null])
    order = np.sort(ps, axis=1)
    # Holm: the real one is rejected iff every p up to and including its rank passes its step
    steps = ALPHA / (m - np.arange(m))
    passed = np.cumprod(order <= steps, axis=1).astype(bool)
    rank = (ps < p_real[:, None]).sum(axis=1)
    rej = passed[np.arange(reps), rank]
    bad = 0
    for i in range(min(CHECK, reps)):
        ev = {"v0": _evidence(d[i]), **{f"v{j + 1}": _evidence(nulls[i, j]) for j in range(m - 1)}}
        out = evaluate_gate(_gate(), ev, [f"v{j}" for j in range(m)])
        bad += (out.verdicts[0].verdict == PROCEED) != bool(rej[i])
    return float(np.mean(rej)), bad


def power_aa(
    rng: np.random.Generator, reps: int, k: int, rho: float, mde: float
) -> tuple[float, int]:
    """One seed pair plus k A/A baselines; run sd 1, within-seed arm correlation rho."""
    sd_d = math.sqrt(2.0 * (1.0 - rho))
    seed0 = rng.standard_normal(reps) * math.sqrt(rho)
    nb, nv = rng.standard_normal((2, reps)) * math.sqrt(1.0 - rho)
    base = np.column_stack([seed0 + nb, rng.standard_normal((reps, k))])  # b0 is the pair's
    d = (BAR + mde) * sd_d + nv - nb  # the improvement, in sd_d units times sd_d
    se = base.std(axis=1, ddof=1) * math.sqrt(2.0)
    dec = stage_decision(d, se, k, BAR * sd_d, ALPHA, CONF, True, 0.5)
    bad = 0
    cfg = _gate(min_effect=BAR * sd_d)
    for i in range(min(CHECK, reps)):
        src = aa_source(list(base[i]), [f"r{j}" for j in range(k + 1)])
        v = evaluate_variant("v", _evidence(np.array([d[i]])), cfg, src)
        bad += (v.verdict == PROCEED) != (dec[i] == PROCEED)
    return float(np.mean(dec == PROCEED)), bad


def power_staged(
    rng: np.random.Generator, reps: int, stages: list[int], spending: str, mde: float
) -> tuple[float, float, int]:
    """Seed stages: proceed at any look; a futility stop at a non-final look is obeyed (the
    first number) or overridden, as evaluate_design reads it (the second)."""
    cfg = _gate(sequential={"seed_stages": stages, "spending": spending}, last_n=1)
    design = cfg.sequential
    assert design is not None
    levels = stage_levels(design, ALPHA, stages[-1])
    d = rng.standard_normal((reps, stages[-1])) + BAR + mde
    decs = []
    for k, n in enumerate(stages):
        mean, se = _paired(d[:, :n])
        final = k == len(stages) - 1
        decs.append(stage_decision(mean, se, n - 1, BAR, levels[k], CONF, final, 0.5))
    obeyed = np.zeros(reps, bool)
    overridden = np.zeros(reps, bool)
    alive = np.ones(reps, bool)
    for dec in decs:
        obeyed |= alive & (dec == PROCEED)
        overridden |= dec == PROCEED
        alive &= dec != FUTILITY
    bad = 0
    for i in range(min(CHECK, reps)):
        pairs = [PairCurve(s, [1.0], [float(d[i, s])], 1.0, True) for s in range(stages[-1])]
        res = evaluate_design(cfg, pairs, None)
        seen = [lk.decision for lk in res.looks if lk.kind == "seeds"]
        for k, got in enumerate(seen):
            if got == "not reached":
                continue
            bad += got != decs[k][i]
            if got == PROCEED:
                break
    return float(np.mean(obeyed)), float(np.mean(overridden)), bad


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / max(n, 1))


def mde_table(reps: int, seed: int) -> bool:
    rng = np.random.default_rng(seed)
    print(f"1. power at the printed MDE (stated {POWER:.0%}); {reps} draws per row")
    head = f"{'design':34s} {'MDE':>7s} {'realised':>9s} {'MC SE':>6s}  {'old MDE':>7s} {'its power':>9s}  check"
    print(head)
    ok = True

    def old(n: int, dof: float) -> float:
        return (t_ppf(CONF, dof) + t_ppf(POWER, dof)) / math.sqrt(n)

    rows: list[tuple[str, float, tuple[float, int], float, float]] = []
    notes: list[str] = []
    for n in (2, 3):
        m = design_mde(design_for([n], ALPHA), POWER)
        o = old(n, n - 1)
        rows.append(
            (
                f"paired, {n} seeds",
                m,
                power_fixed(rng, reps, n, m),
                o,
                power_fixed(rng, reps, n, o)[0],
            )
        )
    for k, rho in ((1, 0.0), (1, 0.5), (2, 0.0)):
        m = design_mde(design_for([1], ALPHA, aa_seeds=k, rho=rho), POWER)
        o = old(1, k) / math.sqrt(1 - rho)
        rows.append(
            (
                f"A/A k={k}, rho {rho:g}",
                m,
                power_aa(rng, reps, k, rho, m),
                o,
                power_aa(rng, reps, k, rho, o)[0],
            )
        )
    m = design_mde(design_for([3], ALPHA, variants=3), POWER)
    rows.append(
        (
            "Holm, 3 variants (2 null), 3 seeds",
            m,
            power_fixed(rng, reps, 3, m, 3),
            old(3, 2),
            power_fixed(rng, reps, 3, old(3, 2), 3)[0],
        )
    )
    for spending in ("obrien_fleming", "pocock"):
        m = design_mde(design_for([2, 4], ALPHA, spending), POWER)
        o = old(4, 3)
        ob, ov, bad = power_staged(rng, reps, [2, 4], spending, m)
        rows.append(
            (
                f"stages [2, 4], {spending}",
                m,
                (ob, bad),
                o,
                power_staged(rng, reps, [2, 4], spending, o)[0],
            )
        )
        notes.append(
            f"stages [2, 4], {spending}: with the 2-seed futility stop overridden (as evaluate_design reads it) {ov:.2%}"
        )
    for name, m, (p, bad), o, po in rows:
        se = _se(p, reps)
        good = abs(p - POWER) <= 0.02 and bad == 0
        ok &= good
        print(
            f"{name:34s} {m:7.3f} {p:9.2%} {se:6.2%}  {o:7.3f} {po:9.2%}  "
            f"{'ok' if good else 'OFF'} ({bad} of {CHECK} disagree with the scalar path)"
        )
    for line in notes:
        print(f"  {line}")
    return ok


def predictive_table(
    reps: int, seed: int, n: int, k: int, level: float | None = None, width: float = 30.0
) -> bool:
    """Stated vs realised by decile. ``level`` None: the report's rule (verdict.extension_level,
    the merged re-plan rule): toward stop the pooled seeds are tested at alpha, decided by
    replan_decision and cross-checked against evaluate_gate with the re-plan registered; toward
    proceed nothing is stated (a re-planned extension cannot proceed) and the bench counts how
    often one did. ``level`` given: the function at that level, both directions (a parameter)."""
    rng = np.random.default_rng(seed + 100 * n + k)
    theta = rng.uniform(-width, width, reps)
    d = theta[:, None] + rng.standard_normal((reps, n)) + BAR
    mean, se = _paired(d)
    q = t_ppf(CONF, n - 1)
    inc = (mean - q * se <= BAR) & (mean + q * se >= BAR)
    d, mean, theta = d[inc], mean[inc], theta[inc]
    sd = d.std(axis=1, ddof=1)
    gap = (mean - BAR) / sd
    toward = np.where(mean > BAR, PROCEED, STOP)
    new = theta[:, None] + rng.standard_normal((gap.size, k)) + BAR
    pooled = np.hstack([d, new])
    pm, ps = _paired(pooled)
    rule = level is None
    lv = ALPHA if rule else float(level)  # type: ignore[arg-type]
    if rule:
        now = stage_decision(pm, ps, n + k - 1, BAR, ALPHA, CONF, True, 0.5)
        dec = replan_decision(np.full(gap.size, INCONCLUSIVE), now)
        proceeded = int(np.sum(dec == PROCEED))
        keep = toward == STOP
    else:
        dec = stage_decision(pm, ps, n + k - 1, BAR, lv, 1 - lv, True, 0.5)
        keep = np.ones(gap.size, dtype=bool)
    real_all = dec == toward
    bad_dec = bad_line = 0
    if rule:  # cross-check: the report's path (evaluate_gate with the re-plan registered)
        cfg = _gate()
        seeds = list(range(n + k))
        reg = GateRegistration(created="t0", seeds=seeds[:n], gate_sha256="x", after_runs=True)
        entry = GateEntry(
            name="g", gate=cfg, gate_sha256="x", gate_raw_sha256=None, seeds=seeds, history=[reg]
        )
        for i in range(min(CHECK, gap.size)):
            out = evaluate_gate(cfg, {"v": _evidence(pooled[i])}, ["v"], entry=entry)
            want = STOP if dec[i] == STOP else INCONCLUSIVE
            bad_dec += out.verdicts[0].verdict != want
            est = estimate([[float(x)] for x in d[i]], CONF)
            assert est is not None
            line, _, _ = seeds_line(est, BAR, CONF)
            if toward[i] == STOP:
                p = predictive_resolve(abs(gap[i]), n, n + 1, ALPHA)[0]
                bad_line += f"{n + 1} paired seeds give a {p:.0%}" not in line
            else:
                bad_line += "none added by `plan --replan` can resolve toward proceed" not in line
    d_gap, real = np.abs(gap[keep]), real_all[keep]
    stated = np.concatenate(
        [predictive_resolve(d_gap[i : i + 500], n, n + k, lv) for i in range(0, d_gap.size, 500)]
    )
    # the old plug-in: power at the observed effect and spread, full alpha
    plug = sst.nct.sf(t_ppf(CONF, n + k - 1), n + k - 1, d_gap * math.sqrt(n + k))
    what = (
        f"the report's rule: toward stop at {ALPHA:g}, {int(keep.sum())} looks below the bar; "
        f"above it ({int((~keep).sum())} looks) a re-plan proceeded {proceeded} times"
        if rule
        else f"the function at level {lv:g} (a parameter), both directions"
    )
    print(f"\n2. n = {n} seeds seen, +{k}, {what}; {gap.size} inconclusive first looks of {reps}")
    if rule:
        print(
            f"   decisions vs evaluate_gate: {bad_dec} of {CHECK} differ; seeds line vs "
            f"predictive_resolve: {bad_line} of {CHECK} differ"
        )
    print(
        f"{'decile':8s} {'count':>6s} {'stated':>7s} {'realised':>9s} {'MC SE':>6s} {'plug-in':>8s}  within 5 points"
    )
    ok = bad_dec == 0 and bad_line == 0 and (not rule or proceeded == 0)
    bins = np.minimum((stated * 10).astype(int), 9)
    for b in range(10):
        w = bins == b
        c = int(w.sum())
        if c == 0:
            print(f"{b / 10:.1f}-{(b + 1) / 10:.1f}  {0:6d}")
            continue
        s, r = float(stated[w].mean()), float(real[w].mean())
        se = _se(r, c)
        # within 5 points, or within 5 points + 2 MC SE (a sparse decile's own noise)
        good, noisy = abs(s - r) <= 0.05, abs(s - r) <= 0.05 + 2 * se
        ok &= noisy
        word = "yes" if good else ("within MC error" if noisy else "NO")
        print(
            f"{b / 10:.1f}-{(b + 1) / 10:.1f}  {c:6d} {s:7.1%} {r:9.1%} {se:6.1%} "
            f"{float(plug[w].mean()):8.1%}  {word}"
        )
    print(
        f"overall: stated {stated.mean():.1%}, realised {real.mean():.1%}, plug-in said {plug.mean():.1%}"
    )
    return ok


def fixed_truths(reps: int, seed: int, n: int = 2, k: int = 1) -> None:
    """Mean stated vs realised at fixed truths: a predictive chance is not the power at a truth."""
    rng = np.random.default_rng(seed + 7)
    reps = min(reps, 40_000)  # each inconclusive draw costs a predictive integral
    level = ALPHA / 2  # a parameter: above the bar the report's rule states no chance
    print(
        f"\n   fixed truths (n = {n}, +{k} at level {level:g}, inconclusive above the bar): a predictive chance is "
        "an average over truths, not the power at one"
    )
    for name, delta in (("at the bar", 1.0), ("2x the bar", 2.0), ("3x the bar", 3.0)):
        d = rng.standard_normal((reps, n)) + delta
        mean, se = _paired(d)
        q = t_ppf(CONF, n - 1)
        inc = (mean - q * se <= BAR) & (mean + q * se >= BAR) & (mean > BAR)
        d, mean = d[inc], mean[inc]
        gap = (mean - BAR) / d.std(axis=1, ddof=1)
        stated = np.concatenate(
            [predictive_resolve(gap[i : i + 500], n, n + k, level) for i in range(0, gap.size, 500)]
        )
        plug = sst.nct.sf(t_ppf(CONF, n + k - 1), n + k - 1, gap * math.sqrt(n + k))
        pooled = np.hstack([d, rng.standard_normal((gap.size, k)) + delta])
        pm, ps = _paired(pooled)
        real = stage_decision(pm, ps, n + k - 1, BAR, level, 1 - level, True, 0.5) == PROCEED
        print(
            f"   truth {name}: {gap.size} draws; stated {stated.mean():.1%}, plug-in "
            f"{plug.mean():.1%}, realised {real.mean():.1%} (MC SE {_se(real.mean(), gap.size):.1%})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--reps", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=["mde", "predictive"], default=None)
    args = ap.parse_args()
    t0 = time.time()
    ok = True
    if args.only in (None, "mde"):
        ok &= mde_table(args.reps, args.seed)
    if args.only in (None, "predictive"):
        for n, k in ((2, 1), (2, 2), (2, 4), (3, 1)):
            ok &= predictive_table(args.reps, args.seed, n, k)
        ok &= predictive_table(args.reps, args.seed, 2, 1, ALPHA / 2)
        fixed_truths(args.reps, args.seed)
    print(f"\n{'all within tolerance' if ok else 'SOME ROWS OFF'} ({time.time() - t0:.0f} s)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
