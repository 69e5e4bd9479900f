"""Monte-Carlo operating characteristics of every gate design, through the project's decisions.

Usage: python bench/gate_calibration.py [--reps 50000] [--holm-reps 20000] [--seed 0]
       [--check docs/gate-statistics.md | --write docs/gate-statistics.md]

Deterministic for (reps, holm-reps, seed): the defaults regenerate the block published in
docs/gate-statistics.md byte for byte (``--check`` compares, exit 1 on a difference; ``--write``
replaces it). Each row's MC standard error uses that row's own draw count.

Model (units of sigma_d, the sd of one seed's paired delta at the full budget): per-seed deltas
d_s ~ N(delta, 1); ``min_effect`` (the bar) = 1; confidence 0.95. Cells: false proceed at the bar
(delta = 1) and at 0, power at 2x and 4x the bar, and for sequential designs the expected
fraction of variant-arm tokens used relative to the fixed design with the same maximum seeds.

Interim looks: the paired delta at token fraction f is delta(f) + r e_s + sqrt(1 - r^2) u_{s,f}
(e_s: the seed's final noise, u: look-specific noise, r = 0.7), and delta(f) follows a
trajectory ending at delta: constant; growing (delta f); an early lead that fades
(delta + 2 (1 - f): ahead early, at delta by the end); a late bloomer (delta (2 f - 1): behind
until half-way). Decisions go through olmoablate.report.sequential (interim_decision,
stage_decision, stage_levels), the fixed designs through the same lower-bound rule, checked
draw for draw against olmoablate.report.verdict.quality_check on a subsample; Holm through
olmoablate.stats.holm and p_above. Prints MC standard errors.

Re-plans after a look (issue 34): the user looks, finds the gate inconclusive and changes it
with ``plan --replan`` (Holm family 2 -> 4 seeds; confidence 0.95 -> 0.90 with the same seeds;
+1 or +2 seeds; stages [2, 4] -> [2, 4, 6]). Decisions: the registration in force at the first
look and the changed gate, each through the rules above, combined by the report's own
olmoablate.report.sequential.replan_decision, and checked draw for draw against the report's
evaluate_gate (with plan.json's registration record) on a subsample. Rows marked "old" are the
rules before issue 34, for contrast.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from olmoablate.io import sha256_of
from olmoablate.plan.gate import (
    Gate,
    NoiseFloor,  # noqa: E402
)
from olmoablate.plan.names import INCONCLUSIVE, PROCEED, STOP
from olmoablate.plan.planfile import GateEntry, GateRegistration
from olmoablate.report.noise import estimate, floor_source  # noqa: E402
from olmoablate.report.sequential import (
    CONTINUE,
    FUTILITY,
    UNPLANNED,
    evaluate_gate,
    interim_decision,
    replan_decision,
    stage_decision,
    stage_levels,
)
from olmoablate.report.verdict import PairEvidence, quality_check
from olmoablate.stats import holm, p_above, t_ppf  # noqa: E402

CONF, ALPHA, BAR, R = 0.95, 0.05, 1.0, 0.7
EFFECTS = {"bar": 1.0, "0": 0.0, "2x": 2.0, "4x": 4.0}

Traj = Callable[[float, float], float]
TRAJ: dict[str, Traj] = {
    "constant": lambda d, f: d,
    "growing": lambda d, f: d * f,
    "fading early lead": lambda d, f: d + 2.0 * (1.0 - f),
    "late bloomer": lambda d, f: d * (2.0 * f - 1.0),
}


def fixed_decide(mean: np.ndarray, se: np.ndarray, dof: float) -> np.ndarray:
    """The fixed gate: one full-budget look at full alpha (the project's stage_decision)."""
    return stage_decision(mean, se, dof, BAR, ALPHA, CONF, True, 0.5)


def paired(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = d.shape[1]
    return d.mean(axis=1), d.std(axis=1, ddof=1) / math.sqrt(n)


@dataclass
class Row:
    design: str
    assumption: str
    cells: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, float] = field(default_factory=dict)
    reps: int = 0  # draws per cell (the MC SE is computed from the row's own count)
    #: re-plan rows: per effect, the share of verdicts `inconclusive (unplanned)` and the share
    #: of proceeds the changed (unplanned) gate alone would have given
    unplanned: dict[str, float] = field(default_factory=dict)
    plain: dict[str, float] = field(default_factory=dict)
    withheld: dict[str, float] = field(default_factory=dict)


def rate(x: np.ndarray) -> float:
    return float(np.mean(x))


# ---------------------------------------------------------------- fixed designs
def fixed_paired(n: int, reps: int, rng: np.random.Generator) -> Row:
    row = Row(f"paired t, {n} seeds", "exchangeable seeds, normal deltas")
    for k, delta in EFFECTS.items():
        m, se = paired(rng.normal(delta, 1.0, (reps, n)))
        row.cells[k] = rate(fixed_decide(m, se, n - 1) == PROCEED)
    return row


def floor_design(pairs: int | None, reps: int, rng: np.random.Generator, exact: bool) -> Row:
    name = (
        "1 seed, floor known exactly"
        if pairs is None
        else (f"1 seed, floor from {pairs} pairs" + (" used as exact (old)" if exact else ", t"))
    )
    row = Row(name, "floor measured on the same recipe and size")
    for k, delta in EFFECTS.items():
        d = rng.normal(delta, 1.0, reps)
        if pairs is None:
            sd, dof = np.ones(reps), math.inf
        else:
            sd = rng.normal(0.0, 1.0, (reps, pairs)).std(axis=1, ddof=1)
            dof = math.inf if exact else pairs - 1
        row.cells[k] = rate(fixed_decide(d, sd, dof) == PROCEED)
    return row


def aa_design(k: int, rho: float, ratio: float, reps: int, rng: np.random.Generator) -> Row:
    """One pair + k A/A baselines; variant run sd = ratio x baseline's, within-seed corr rho.
    Effects in units of the true paired-delta sd."""
    row = Row(f"A/A k={k}", f"within-seed corr {rho:g}, variant sd {ratio:g}x")
    sd_d = math.sqrt(1 + ratio**2 - 2 * rho * ratio)  # with baseline run sd 1
    for key, delta in EFFECTS.items():
        e1, e2 = rng.standard_normal((2, reps))
        b = e1
        v = ratio * (rho * e1 + math.sqrt(1 - rho**2) * e2)
        d = delta + (b - v) / sd_d  # improvement = baseline - variant, in units of sd_d
        aa = rng.standard_normal((reps, k))
        runs = np.column_stack([b, aa])
        se = math.sqrt(2.0) * runs.std(axis=1, ddof=1) / sd_d
        row.cells[key] = rate(fixed_decide(d, se, k) == PROCEED)
    return row


def holm_ps(mean: np.ndarray, se: np.ndarray, n: int) -> list[list[float]]:
    """Per draw, each variant's one-sided p-value (the report's p_above, scalar)."""
    return [
        [p_above(float(mean[i, j]), float(se[i, j]), BAR, n - 1) for j in range(mean.shape[1])]
        for i in range(mean.shape[0])
    ]


def holm_decide(mean: np.ndarray, se: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """The fixed gate over a family (draws x variants): Holm's rejections proceed (the report's
    holm on the report's p-values), a variant whose upper bound is below the bar stops."""
    out = np.full(mean.shape, "inconclusive", dtype=object)
    upper = mean + t_ppf(1 - alpha, n - 1) * se
    out[upper < BAR] = STOP
    for i, ps in enumerate(holm_ps(mean, se, n)):
        rejected, _ = holm(ps, alpha)
        out[i, np.array(rejected)] = PROCEED
    return out


def shared(delta: float, reps: int, n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Per-seed deltas of m variants sharing each seed's baseline (correlation 0.5)."""
    common = rng.standard_normal((reps, n, 1))
    return delta + math.sqrt(0.5) * common + math.sqrt(0.5) * rng.standard_normal((reps, n, m))


def holm_design(reps: int, rng: np.random.Generator) -> Row:
    """3 variants at the bar, 3 seeds, sharing each seed's baseline (corr 0.5): family-wise
    false proceed through the project's p_above and holm (scalar, per draw: holm_decide)."""
    row = Row("Holm, 3 variants, 3 seeds", "shared baselines (corr 0.5); all at the effect")
    n, m = 3, 3
    for key, delta in EFFECTS.items():
        if key in ("2x", "4x"):
            continue
        d = shared(delta, reps, n, m, rng)
        mean, se = d.mean(axis=1), d.std(axis=1, ddof=1) / math.sqrt(n)
        row.cells[key] = rate((holm_decide(mean, se, n, ALPHA) == PROCEED).any(axis=1))
    return row


def add_seeds_after_look(reps: int, rng: np.random.Generator, split: bool) -> Row:
    name = "2 seeds, +2 after inconclusive" + (", alpha/2 (old)" if split else ", full alpha (old)")
    row = Row(name, "unplanned re-plan (what the old message invited)")
    for key, delta in EFFECTS.items():
        d = rng.normal(delta, 1.0, (reps, 4))
        m2, se2 = paired(d[:, :2])
        first = fixed_decide(m2, se2, 1)
        m4, se4 = paired(d)
        level = ALPHA / 2 if split else ALPHA
        second = stage_decision(m4, se4, 3, BAR, level, CONF, True, 0.5)
        row.cells[key] = rate(
            (first == PROCEED) | ((first == "inconclusive") & (second == PROCEED))
        )
    return row


# ---------------------------------------------------------------- re-plans after a look
# A user looks, finds the gate inconclusive and changes it with `plan --replan` (more seeds, or
# another block). The report decides with olmoablate.report.sequential.replan_decision: the
# registration in force at the first look on its own seeds (`first`), the changed gate as
# registered on all seeds (`now`). The rows count a proceed of any variant (family-wise).


def _replan_row(name: str, assumption: str, reps: int) -> Row:
    return Row(name, assumption, reps=reps)


def _record(row: Row, key: str, first: np.ndarray, now: np.ndarray) -> None:
    """One effect's cells from the two registrations' decisions (draws, or draws x variants)."""
    final = replan_decision(first, now)
    fam = (lambda x: x.any(axis=1)) if final.ndim == 2 else (lambda x: x)
    row.cells[key] = rate(fam(final == PROCEED))
    row.unplanned[key] = rate(fam(final == UNPLANNED))
    # a plain proceed the unplanned look gave (the first registration did not): must be 0
    row.plain[key] = rate(fam((final == PROCEED) & (np.asarray(first) != PROCEED)))
    # proceeds of the changed gate the report withholds (the second chance it cannot afford)
    row.withheld[key] = rate(fam((final != PROCEED) & (np.asarray(now) == PROCEED)))


def holm_replan(reps: int, rng: np.random.Generator, old: bool = False) -> Row:
    """3 variants sharing baselines, 2 seeds under Holm; inconclusive -> re-planned to 4 seeds.
    ``old``: the rule before issue 34 (each variant re-tested alone at alpha / 2)."""
    name = "Holm, 3 variants, 2 -> 4 seeds after inconclusive" + (
        ", old: each alone at alpha/2" if old else ""
    )
    row = _replan_row(name, "unplanned re-plan, shared baselines (corr 0.5)", reps)
    for key, delta in EFFECTS.items():
        d = shared(delta, reps, 4, 3, rng)
        m2, s2 = d[:, :2].mean(axis=1), d[:, :2].std(axis=1, ddof=1) / math.sqrt(2)
        first = holm_decide(m2, s2, 2, ALPHA)
        m4, s4 = d.mean(axis=1), d.std(axis=1, ddof=1) / math.sqrt(4)
        if old:
            looked = (first == PROCEED).any(axis=1)
            alone = stage_decision(m4, s4, 3, BAR, ALPHA / 2, 1 - ALPHA / 2, True, 0.5)
            row.cells[key] = rate(looked | (alone == PROCEED).any(axis=1))
            continue
        # the family replans only when no variant proceeded at the first look
        now = np.where(
            (first == PROCEED).any(axis=1)[:, None], first, holm_decide(m4, s4, 4, ALPHA)
        )
        _record(row, key, first.astype(str), now.astype(str))
    return row


def block_replan(n: int, reps: int, rng: np.random.Generator, old: bool = False) -> Row:
    """n seeds at confidence 0.95; inconclusive -> the same seeds re-planned at 0.90."""
    name = f"{n} seeds, confidence 0.95 -> 0.90 after inconclusive" + (
        ", old: unflagged" if old else ""
    )
    row = _replan_row(name, "unplanned re-plan of the gate block, same seeds", reps)
    for key, delta in EFFECTS.items():
        m, se = paired(rng.normal(delta, 1.0, (reps, n)))
        first = fixed_decide(m, se, n - 1)
        now = stage_decision(m, se, n - 1, BAR, 0.10, 0.90, True, 0.5)
        if old:
            row.cells[key] = rate((first == PROCEED) | ((first == INCONCLUSIVE) & (now == PROCEED)))
            continue
        _record(row, key, first, now)
    return row


def extension_replan(n: int, k: int, reps: int, rng: np.random.Generator) -> Row:
    """n seeds, fixed gate; inconclusive -> re-planned to n + k seeds."""
    row = _replan_row(
        f"{n} seeds, +{k} after inconclusive", "unplanned re-plan (seeds added after a look)", reps
    )
    for key, delta in EFFECTS.items():
        d = rng.normal(delta, 1.0, (reps, n + k))
        first = fixed_decide(*paired(d[:, :n]), n - 1)
        now = fixed_decide(*paired(d), n + k - 1)
        _record(row, key, first, now)
    return row


def design_says(d: np.ndarray, stages: list[int], spending: str, fc: float = 0.5) -> np.ndarray:
    """A seed-stage design's verdict per draw, as the report words it with every stage's seeds
    trained: proceed, stop or inconclusive. A futility stop before the last stage is non-binding
    and the report overrides it when the next stage's seeds are there (the arms were trained
    on), so here every stage is looked at: the most chances to proceed (the worst case)."""
    design = Gate.model_validate(
        {"stage": "1B", "sequential": {"seed_stages": stages, "spending": spending,
                                       "futility_confidence": fc}}
    ).sequential  # fmt: skip
    assert design is not None
    levels = stage_levels(design, ALPHA, stages[-1])
    out = np.full(d.shape[0], CONTINUE, dtype=object)
    for k, n in enumerate(stages):
        m, se = paired(d[:, :n])
        dec = stage_decision(m, se, n - 1, BAR, levels[k], CONF, k == len(stages) - 1, fc)
        out = np.where(out == CONTINUE, np.where(dec == FUTILITY, CONTINUE, dec), out)
    return out.astype(str)


def stages_replan(reps: int, rng: np.random.Generator) -> Row:
    """Seed stages [2, 4] O'Brien-Fleming, inconclusive at its last look -> re-planned to
    stages [2, 4, 6]."""
    row = _replan_row(
        "stages [2, 4] -> [2, 4, 6] after inconclusive", "unplanned re-plan of a design", reps
    )
    for key, delta in EFFECTS.items():
        d = rng.normal(delta, 1.0, (reps, 6))
        first = design_says(d[:, :4], [2, 4], "obrien_fleming")
        now = design_says(d, [2, 4, 6], "obrien_fleming")
        _record(row, key, first, now)
    return row


# ---------------------------------------------------------------- sequential designs
def sequential(
    stages: list[int],
    spending: str,
    interim: list[float],
    traj: str,
    reps: int,
    rng: np.random.Generator,
    futility_confidence: float = 0.5,
) -> Row:
    design = Gate.model_validate(
        {
            "stage": "1B",
            "sequential": {
                "seed_stages": stages if len(stages) > 1 else [],
                "spending": spending,
                "interim": interim,
                "futility_confidence": futility_confidence,
            },
        }
    ).sequential
    assert design is not None
    levels = stage_levels(design, ALPHA, stages[-1])
    name = f"stages {stages}" + (f" {spending}" if len(stages) > 1 else "")
    if interim:
        name += f" + futility at {', '.join(f'{f:.0%}' for f in interim)}"
        if futility_confidence != 0.5:
            name += f" (upper {futility_confidence:.0%} bound)"
    row = Row(name, f"effect {traj}")
    fn = TRAJ[traj]
    n_max, n1 = stages[-1], stages[0]
    for key, delta in EFFECTS.items():
        e = rng.standard_normal((reps, n_max))
        final = delta + e
        alive = np.ones(reps, dtype=bool)
        tokens = np.zeros(reps)
        proceed = np.zeros(reps, dtype=bool)
        for f in interim:
            u = rng.standard_normal((reps, n1))
            d = fn(delta, f) + R * e[:, :n1] + math.sqrt(1 - R * R) * u
            m, se = paired(d) if n1 >= 2 else (d[:, 0], np.ones(reps))
            dof = n1 - 1 if n1 >= 2 else math.inf  # 1 seed: a known floor (sd 1)
            stop = alive & (interim_decision(m, se, dof, BAR, futility_confidence) == FUTILITY)
            tokens[stop] += n1 * f
            alive &= ~stop
        prev = 0
        for k, n in enumerate(stages):
            tokens[alive] += n - prev
            prev = n
            d = final[:, :n]
            m, se = paired(d) if n >= 2 else (d[:, 0], np.ones(reps))
            dof = n - 1 if n >= 2 else math.inf
            dec = stage_decision(
                m, se, dof, BAR, levels[k], CONF, k == len(stages) - 1, futility_confidence
            )
            proceed |= alive & (dec == PROCEED)
            alive &= dec == "continue"
        row.cells[key] = rate(proceed)
        row.tokens[key] = float(tokens.mean()) / n_max
    return row


def cross_check(reps: int, rng: np.random.Generator) -> int:
    """Vectorised fixed decisions vs the report's scalar quality_check, draw for draw."""
    bad = 0
    for n in (1, 2, 3):
        d = rng.normal(1.0, 1.0, (reps, n))
        sd_floor = rng.normal(0, 1, (reps, 3)).std(axis=1, ddof=1)
        if n == 1:
            vec = fixed_decide(d[:, 0], sd_floor, 2)
        else:
            vec = fixed_decide(*paired(d), n - 1)
        for i in range(reps):
            src = floor_source(NoiseFloor(sd=float(sd_floor[i]), pairs=3)) if n == 1 else None
            est = estimate([[float(x)] for x in d[i]], CONF, src)
            chk = quality_check("vs baseline", est, BAR, CONF, "m")
            bad += (chk.outcome == "pass") != (vec[i] == PROCEED)
    return bad


#: The re-plan rows' cases for the cross-check: (variants, first block, its seeds, changed
#: block, its seeds), each block over ``{"stage": "1B", "min_effect": BAR, "last_n": 1}``.
REPLANS: list[tuple[int, dict, list[int], dict, list[int]]] = [
    (3, {}, [0, 1], {}, [0, 1, 2, 3]),
    (1, {}, [0, 1, 2], {"confidence": 0.9}, [0, 1, 2]),
    (1, {}, [0, 1], {}, [0, 1, 2]),
    (1, {}, [0, 1], {}, [0, 1, 2, 3]),
    (
        1,
        {"sequential": {"seed_stages": [2, 4]}},
        [0, 1, 2, 3],
        {"sequential": {"seed_stages": [2, 4, 6]}},
        [0, 1, 2, 3, 4, 5],
    ),
]


def _gate(block: dict) -> tuple[Gate, str]:
    g = Gate.model_validate({"stage": "1B", "min_effect": BAR, "last_n": 1, **block})
    return g, sha256_of(g.model_dump(mode="json"))


def _says(block: dict, d: np.ndarray) -> np.ndarray:
    """One registration's verdict per variant on deltas ``d`` (seeds x variants), through the
    vectorised rules the rows use."""
    g, _ = _gate(block)
    n, m = d.shape
    if g.sequential is not None:
        return design_says(d.T, list(g.sequential.seed_stages), g.sequential.spending)
    alpha = 1 - g.confidence
    mean, se = d.mean(axis=0), d.std(axis=0, ddof=1) / math.sqrt(n)
    if m > 1:
        return holm_decide(mean[None], se[None], n, alpha)[0].astype(str)
    return stage_decision(mean, se, n - 1, BAR, alpha, g.confidence, True, 0.5).astype(str)


def replan_cross_check(draws: int, rng: np.random.Generator) -> tuple[int, int]:
    """The re-plan rows' composition (first registration, changed gate, replan_decision) vs the
    report's evaluate_gate on the same deltas with plan.json's registration record, draw for
    draw (effects cycling through EFFECTS). Returns (disagreements, draws)."""
    bad = total = 0
    for m, b0, s0, b1, s1 in REPLANS:
        g0, h0 = _gate(b0)
        g1, h1 = _gate(b1)
        reg = GateRegistration(created="look", seeds=s0, gate_sha256=h0, gate=g0, after_runs=True)
        entry = GateEntry(name="gate", gate=g1, gate_sha256=h1, gate_raw_sha256=None, seeds=s1,
                          history=[reg])  # fmt: skip
        deltas = list(EFFECTS.values())
        for i in range(draws):
            d = rng.normal(deltas[i % len(deltas)], 1.0, (len(s1), m))
            ev = {
                f"v{j}": [
                    PairEvidence(
                        f"s{s}",
                        s,
                        improvement=[float(x)],
                        curve_x=[1.0],
                        curve=[float(x)],
                        tokens=1.0,
                    )  # fmt: skip
                    for s, x in zip(s1, d[:, j], strict=True)
                ]
                for j in range(m)
            }
            got = evaluate_gate(g1, ev, list(ev), entry=entry).label
            final = replan_decision(_says(b0, d[: len(s0)]), _says(b1, d))
            if (final == PROCEED).any():
                want = PROCEED
            elif (final == STOP).all():
                want = STOP
            else:
                want = UNPLANNED if (final == UNPLANNED).any() else INCONCLUSIVE
            bad += got != want
            total += 1
    return bad, total


def claimed_valid(r: Row) -> bool:
    """Rows of designs the project offers under their stated assumptions (not the old or
    unplanned practices shown for contrast, not A/A with a noisier variant). Re-plan rows are
    claimed: they are what the report now does after an unplanned change."""
    if "(old)" in r.design or "old:" in r.design or "full alpha" in r.design:
        return False
    return not ("A/A" in r.design and "sd 1x" not in r.assumption)


def se_pts(p: float, reps: int) -> float:
    return 100 * math.sqrt(max(p * (1 - p), 1e-12) / reps)


def _pct(c: dict[str, float], k: str, reps: int) -> str:
    return f"{100 * c[k]:.2f} ± {se_pts(c[k], reps):.2f}" if k in c else "—"


def table(rows: list[Row]) -> str:
    head = (
        "| design | assumption / effect over training | false proceed at the bar | at 0 | "
        "power 2x / 4x the bar | variant tokens vs fixed (null / 4x) |\n"
        "|---|---|---|---|---|---|\n"
    )
    out = []
    for r in rows:
        c = r.cells
        pw = f"{100 * c['2x']:.1f} / {100 * c['4x']:.1f}" if "2x" in c else "—"
        tk = f"{100 * r.tokens['0']:.0f}% / {100 * r.tokens['4x']:.0f}%" if r.tokens else "—"
        at_bar, at_0 = _pct(c, "bar", r.reps), _pct(c, "0", r.reps)
        out.append(f"| {r.design} | {r.assumption} | {at_bar} | {at_0} | {pw} | {tk} |")
    return head + "\n".join(out)


def replan_table(rows: list[Row]) -> str:
    """The re-plan rows' verdicts at the bar / at 4x the bar: how often `inconclusive
    (unplanned)`, how often the unplanned look gave a plain proceed (the first registration did
    not proceed; 0 by construction, measured), and how often the changed gate alone would have
    proceeded where the report withholds it."""
    head = (
        "| re-plan | inconclusive (unplanned), bar / 4x | plain proceeds from the unplanned "
        "look, bar / 4x | withheld proceeds of the changed gate, bar / 4x |\n|---|---|---|---|\n"
    )
    out = []
    for r in rows:
        if not r.unplanned:
            continue
        cells = [
            f"{_pct(c, 'bar', r.reps)} / {100 * c['4x']:.1f}"
            for c in (r.unplanned, r.plain, r.withheld)
        ]
        out.append(f"| {r.design} | " + " | ".join(cells) + " |")
    return head + "\n".join(out)


def run(
    reps: int, holm_reps: int, seed: int, cross: int = 300, replan_cross: int = 40
) -> tuple[list[Row], list[str]]:
    """Every row, deterministic for (reps, holm_reps, seed, cross, replan_cross), and the
    cross-checks' lines (``cross``, ``replan_cross``: their draws per case)."""
    rng = np.random.default_rng(seed)
    bad = cross_check(cross, rng)
    lines = [
        f"cross-check: vectorised vs report quality_check disagree on {bad} of {3 * cross} draws"
    ]
    rows: list[Row] = [fixed_paired(n, reps, rng) for n in (2, 3, 5)]
    rows.append(floor_design(None, reps, rng, True))
    for m in (3, 5):
        rows.append(floor_design(m, reps, rng, True))
        rows.append(floor_design(m, reps, rng, False))
    for rho in (0.0, 0.5, 0.9):
        for k in (1, 2, 4):
            rows.append(aa_design(k, rho, 1.0, reps, rng))
    for ratio in (1.5, 2.0):
        rows.append(aa_design(1, 0.0, ratio, reps, rng))
        rows.append(aa_design(4, 0.0, ratio, reps, rng))
    for r in rows:
        r.reps = reps
    rows.append(holm_design(holm_reps, rng))
    rows[-1].reps = holm_reps
    rows.append(add_seeds_after_look(reps, rng, False))
    rows.append(add_seeds_after_look(reps, rng, True))
    rows[-2].reps = rows[-1].reps = reps
    rows.append(holm_replan(holm_reps, rng, old=True))
    rows.append(holm_replan(holm_reps, rng))
    rows[-2].reps = holm_reps
    rows.append(block_replan(3, reps, rng, old=True))
    rows.append(block_replan(3, reps, rng))
    rows[-2].reps = reps
    for k in (1, 2):
        rows.append(extension_replan(2, k, reps, rng))
    rows.append(stages_replan(reps, rng))
    bad, total = replan_cross_check(replan_cross, rng)
    lines.append(
        f"re-plan cross-check: the rows' composition vs the report's evaluate_gate (with "
        f"plan.json's registration record) disagree on {bad} of {total} draws"
    )
    for stages, spending in (
        ([2, 4], "obrien_fleming"),
        ([2, 4], "pocock"),
        ([2, 4, 6], "obrien_fleming"),
    ):
        rows.append(sequential(stages, spending, [], "constant", reps, rng))
    for stages, interim, fc in (
        ([3], [0.25, 0.5], 0.5),
        ([3], [0.25, 0.5], 0.9),
        ([3], [0.5], 0.5),
        ([2, 4], [0.25, 0.5], 0.5),
        ([1], [0.25, 0.5], 0.5),
    ):
        for traj in TRAJ:
            rows.append(sequential(stages, "obrien_fleming", interim, traj, reps, rng, fc))
    for r in rows:
        r.reps = r.reps or reps
    return rows, lines


#: The markers around the published table in docs/gate-statistics.md (``--check``/``--write``).
BEGIN, END = "<!-- gate_calibration.py table: begin -->", "<!-- gate_calibration.py table: end -->"


def published(rows: list[Row], args: argparse.Namespace) -> str:
    """The block docs/gate-statistics.md publishes, byte for byte: the command, the table, the
    re-plan verdicts and the summary (no timings, so it is reproducible)."""
    claimed = [r for r in rows if claimed_valid(r)]
    over = [r for r in claimed if r.cells["bar"] > 0.05 + 2 * se_pts(r.cells["bar"], r.reps) / 100]
    worst = max(claimed, key=lambda r: r.cells["bar"] - 2 * se_pts(r.cells["bar"], r.reps) / 100)
    cmd = f"python bench/gate_calibration.py --reps {args.reps} --holm-reps {args.holm_reps}"
    return "\n".join(
        [
            BEGIN,
            f"`{cmd + (f' --seed {args.seed}' if args.seed else '')}`: {args.reps:,} draws per "
            f"cell (Holm rows {args.holm_reps:,}), MC SE in points after ±.",
            "",
            table(rows),
            "",
            replan_table(rows),
            "",
            f"Designs claimed valid: {len(claimed)}; above 5% + 2 MC SE at the bar: {len(over)}; "
            f"closest: {worst.design} ({worst.assumption}) {100 * worst.cells['bar']:.2f}%.",
            END,
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--holm-reps", type=int, default=20_000)
    ap.add_argument("--check", type=Path, help="exit 1 unless FILE publishes this very block")
    ap.add_argument("--write", type=Path, help="replace the block published in FILE")
    args = ap.parse_args()
    t0 = time.time()
    rows, lines = run(args.reps, args.holm_reps, args.seed)
    block = published(rows, args)
    print("\n".join(lines))
    print(block)
    print(f"elapsed {time.time() - t0:.0f} s")
    for path, write in ((args.check, False), (args.write, True)):
        if path is not None:
            ok, said = sync(path, block, write)
            print(said)
            if not ok:
                sys.exit(1)


def sync(path: Path, block: str, write: bool) -> tuple[bool, str]:
    """Compare ``block`` with the one published in ``path`` between the markers (``write``:
    replace it). Returns (ok, what to say)."""
    text = path.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        return False, f"{path}: no block between {BEGIN} and {END}"
    head, rest = text.split(BEGIN, 1)
    old, tail = rest.split(END, 1)
    if write:
        path.write_text(head + block + tail, encoding="utf-8")
        return True, f"wrote the block into {path}"
    if BEGIN + old + END != block:
        return False, f"{path}: the published block differs from this run (rerun with --write)"
    return True, f"{path}: the published block is this run's, byte for byte"


if __name__ == "__main__":
    main()
