"""Futility looks under two interim information models, through the report's decision functions.

Usage: python bench/futility_models.py [--reps 20000] [--seed 1]

Model (units of sigma_d, the sd of one seed's paired delta at the full budget): per-seed final
deltas d_s ~ N(delta, 1), ``min_effect`` (the bar) = 1, confidence 0.95, effect constant over
training. What an interim delta at token fraction f is worth is an assumption:

* precise (optimistic; bench/gate_calibration.py's model): delta + r e_s + sqrt(1 - r^2) u_{s,f},
  r = 0.7 -- as precise as the final delta;
* Brownian (the textbook information model): delta + W_s(f) / f with W_s a Brownian motion and
  W_s(1) = e_s -- sd 1 / sqrt(f), correlation sqrt(f) with the final delta.

Designs: one seed with a known floor (stages [1]) and seed stages [2, 4] O'Brien-Fleming, both
with futility looks at 25% and 50%; each with the bound as before issue 34 (declared 50% upper
bound, one-seed interim looks with the full-budget floor) and as now (the floor scaled to the
interim fraction, the futility confidence calibrated by olmoablate.stats.calibrated_futility).
Cells: power at 1x / 2x / 4x the bar and at bar + MDE (the effect where the design without
futility has 80% power), the power lost to futility there (common draws: the paired difference's
MC SE), variant-arm tokens of a null variant (delta = 0) as a share of the fixed design's.
Decisions: olmoablate.report.sequential (interim_decision, stage_decision, stage_levels,
futility_confidence, interim_noise); the floor through olmoablate.report.noise.floor_source.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from olmoablate.plan.gate import Gate, NoiseFloor, SequentialDesign  # noqa: E402
from olmoablate.plan.names import PROCEED  # noqa: E402
from olmoablate.report.noise import floor_source  # noqa: E402
from olmoablate.report.sequential import (  # noqa: E402
    CONTINUE,
    FUTILITY,
    futility_confidence,
    interim_decision,
    interim_noise,
    stage_decision,
    stage_levels,
)
from olmoablate.stats import BROWNIAN, INTERIM_CORR, PRECISE  # noqa: E402

CONF, ALPHA, BAR = 0.95, 0.05, 1.0
EFFECTS = {"1x": 1.0, "2x": 2.0, "4x": 4.0}
FLOOR = floor_source(NoiseFloor(sd=1.0, known=True))  # one seed: a floor known exactly


def design(stages: list[int], interim: list[float]) -> SequentialDesign:
    d = Gate.model_validate(
        {"stage": "1B", "sequential": {"seed_stages": stages[1:] and stages, "interim": interim}}
    ).sequential
    assert d is not None
    return d


def _stat(d: np.ndarray, sd1: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Mean, se and dof of the looked-at seeds (one seed: the given floor sd)."""
    n = d.shape[1]
    if n == 1:
        return d[:, 0], np.full(d.shape[0], sd1), math.inf
    return d.mean(axis=1), d.std(axis=1, ddof=1) / math.sqrt(n), float(n - 1)


def simulate(
    des: SequentialDesign,
    stages: list[int],
    delta: float,
    model: str,
    fq: float | None,
    scaled: bool,
    reps: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per draw: proceeded with futility at confidence ``fq``, proceeded with futility ignored
    (same draws), variant-arm tokens as a share of the fixed design's."""
    n1, nk, fr = stages[0], stages[-1], list(des.interim)
    final = delta + rng.standard_normal((reps, nk))
    if model == BROWNIAN:
        cuts = [*fr, 1.0]
        path = np.cumsum(
            rng.standard_normal((reps, n1, len(cuts))) * np.sqrt(np.diff([0.0, *cuts])), axis=2
        )
        final[:, :n1] = delta + path[:, :, -1]
        looks = [delta + path[:, :, j] / f for j, f in enumerate(fr)]
    else:
        r = INTERIM_CORR
        looks = [
            delta
            + r * (final[:, :n1] - delta)
            + math.sqrt(1 - r * r) * rng.standard_normal((reps, n1))
            for _ in fr
        ]
    levels = stage_levels(des, ALPHA, nk)
    out = []
    for q in (fq, None):
        # seed stages keep the declared futility confidence; None: no futility anywhere
        sq = des.futility_confidence if q is not None else 1 - 1e-12
        alive = np.ones(reps, dtype=bool)
        tokens = np.zeros(reps)
        proceed = np.zeros(reps, dtype=bool)
        for f, d in zip(fr, looks, strict=True):
            if q is None:
                break
            src = interim_noise(FLOOR, f) if scaled else FLOOR
            assert src is not None
            m, se, dof = _stat(d, src.sd)
            stop = alive & (interim_decision(m, se, dof, BAR, q) == FUTILITY)
            tokens[stop] += n1 * f
            alive &= ~stop
        prev = 0
        for k, n in enumerate(stages):
            tokens[alive] += n - prev
            prev = n
            m, se, dof = _stat(final[:, :n], FLOOR.sd)
            last = k == len(stages) - 1
            dec = stage_decision(m, se, dof, BAR, levels[k], CONF, last, sq)
            proceed |= alive & (dec == PROCEED)
            alive &= dec == CONTINUE
        out.append((proceed, tokens / nk))
    return out[0][0], out[1][0], out[0][1]


def mde_effect(des: SequentialDesign, stages: list[int], rng: np.random.Generator) -> float:
    """The effect where the design without futility proceeds 80% of the time (bisection on a
    fixed set of draws)."""
    lo, hi = BAR, BAR + 12.0
    for _ in range(20):
        mid = 0.5 * (lo + hi)
        sub = np.random.default_rng(rng.integers(1 << 31))
        p = float(simulate(des, stages, mid, PRECISE, None, True, 20_000, sub)[1].mean())
        lo, hi = (mid, hi) if p < 0.8 else (lo, mid)
    return 0.5 * (lo + hi)


def se(p: float, reps: int) -> float:
    return 100 * math.sqrt(max(p * (1 - p), 1e-12) / reps)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--reps", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    reps, rng = args.reps, np.random.default_rng(args.seed)
    t0 = time.time()
    print(f"reps per cell: {reps}; MC SE in points after ±; bar = 1 sd_d; effect constant")
    print(
        "| design | bound | interim model | power 1x | power 2x | power 4x | power at bar + MDE "
        "(loss to futility) | null-variant tokens vs fixed |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for stages in ([1], [2, 4]):
        des = design(stages, [0.25, 0.5])
        now = futility_confidence(des, ALPHA, stages[-1], FLOOR.dof)
        eff = {**EFFECTS, "mde": mde_effect(des, stages, rng)}
        name = f"stages {stages} + futility at 25%, 50%" + (
            " (known floor)" if stages == [1] else ""
        )
        for label, fq, scaled in (
            ("before: 50% bound, full-budget floor", 0.5, False),
            (f"now: {now:.1%} bound, floor / sqrt(f)", now, True),
        ):
            if stages != [1]:  # paired seeds: the interim se is their own spread
                label = label.split(",")[0].replace("bound", "interim bound")
            for model in (PRECISE, BROWNIAN):
                cells = []
                for key, delta in eff.items():
                    p, base, _ = simulate(des, stages, delta, model, fq, scaled, reps, rng)
                    pw = float(p.mean())
                    if key == "mde":
                        loss = base & ~p
                        sd = 100 * float(loss.std(ddof=1)) / math.sqrt(reps)
                        cells.append(
                            f"{100 * pw:.1f} ± {se(pw, reps):.1f} at {delta:.2f} "
                            f"({100 * float(loss.mean()):.2f} ± {sd:.2f})"
                        )
                    else:
                        cells.append(
                            f"{100 * pw:.1f} ± {se(pw, reps):.1f} "
                            f"(−{100 * float((base & ~p).mean()):.1f})"
                        )
                _, _, tok = simulate(des, stages, 0.0, model, fq, scaled, reps, rng)
                tk = f"{100 * float(tok.mean()):.1f}% ± {100 * float(tok.std()) / math.sqrt(reps):.1f}"
                print(f"| {name} | {label} | {model} | " + " | ".join(cells) + f" | {tk} |")
    print(f"elapsed {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
