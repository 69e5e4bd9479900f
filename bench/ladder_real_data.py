"""The baseline law on a real published scaling dataset, out of sample (issue 32, "Must show").

Data: bench/data/marin_moe_v16_isoflop_optima.csv, the compute-optimal envelope of Marin's grug-MoE
v16 iso-FLOP sweep (the best of several hidden sizes at each budget 1e18 ... 3e20 FLOPs, each a
separately trained run) and the measured 1e21 run; the file's header cites the source and commit.

For each split the law ``L(C) = E + A * C^(-alpha)`` is fitted on the smaller budgets only and
predicts the larger ones; the table puts the prediction beside the measured loss and, where the
source printed one for the same split, beside the source's own projection.

The fit: scipy.optimize.least_squares (trust region reflective), parametrised as
``E + exp(a - alpha * log(C / c_ref))`` (c_ref the geometric mean of the fitted budgets, so ``a``
is log-A on a well-scaled axis), bounds ``0 <= E < min(fitted loss)`` and ``alpha > 0``, started from
the best of a few E values, unweighted (one run per budget, no seeds, so no noise model). This is the
parametrisation and the bounds of ``olmoablate.scaling`` (its ``_Model`` / ``_fit``), but scaling.py
exposes no baseline-only fit (its one entry point, ``fit_ladder``, fits both arms of a ladder with a
seed noise model), so the fit is written here; the fitted law is ``olmoablate.scaling.Law`` and its
predictions are ``Law.loss``.

Cross-check through the project's own fitting code: where ``olmoablate.scaling.fit_ladder`` is
implemented, each free-E fit is repeated through it with the variant arm a copy of the baseline (one
seed per rung, a declared noise floor). The variant's free compute ``C*[r]`` then absorbs the variant
points, and with every run's variance equal the GLS objective reduces to the unweighted baseline
fit, so the two laws must agree; the script prints the largest difference in their predictions (or
that the cross-check was skipped, while scaling.py's bodies are not in the checkout).

The 95% prediction interval is a Wald interval from the fit's residual variance (s^2 on n - p dof,
Student t), for a new run at that budget (the law's uncertainty plus one run's scatter about it).
With 3-6 points it says how far the extrapolation can be trusted under the law, not whether the law
is right.

Run: ``PYTHONPATH=. /work/main/.venv/bin/python bench/ladder_real_data.py``
(``--csv PATH`` for another file with the same columns).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats
from scipy.optimize import least_squares

from olmoablate.scaling import Law

HERE = Path(__file__).resolve().parent
DEFAULT_CSV = HERE / "data" / "marin_moe_v16_isoflop_optima.csv"

#: The source's own projection to 1e21 FLOPs from its fit on the 1e18-3e20 optima
#: (experiments/grug/moe/README.md, commit 04331363a5e0159cf5b02b31551859948af3b383):
#: metric -> (printed projection, the source's law as printed (E, A, alpha)).
SOURCE_PROJECTION_1E21 = {
    "paloma_macro_loss": (2.606, (1.6, 95.18, 0.0941)),
    "c4_en_bpb": (0.7923, (0.4814, 25.97, 0.0915)),
}
SOURCE_SPLIT_MAX = 3e20  # the source fitted on budgets up to and including 3e20

#: The cases: (metric, E pinned or None for a free E). Paloma macro with E pinned at 1.6 is the
#: source's own law form; fitting it here and getting the source's numbers back checks the
#: transcription of the data.
CASES = (
    ("paloma_macro_loss", None),
    ("paloma_macro_loss", 1.6),
    ("c4_en_bpb", None),
)
#: Largest budget in the fitted part of each split.
SPLITS = (3e20, 1e20, 3e19)


@dataclass(frozen=True)
class Fit:
    law: Law
    n: int
    n_par: int
    rss: float
    cov: np.ndarray  # covariance of the free parameters (E?, a, alpha) from s^2 (J^T J)^-1
    c_ref: float
    pinned_E: float | None

    def prediction_interval(
        self, compute: float, level: float = 0.95
    ) -> tuple[float, float] | None:
        """Wald interval for a new run at ``compute``; None when the fit has no residual dof."""
        dof = self.n - self.n_par
        if dof < 1:
            return None
        s2 = self.rss / dof
        x = math.log(compute / self.c_ref)
        a = math.log(self.law.A) - self.law.alpha * math.log(self.c_ref)
        g = math.exp(a - self.law.alpha * x)
        grad = [g, -x * g] if self.pinned_E is not None else [1.0, g, -x * g]
        grad = np.array(grad)
        var = float(grad @ self.cov @ grad) + s2
        half = stats.t.ppf((1 + level) / 2, dof) * math.sqrt(var)
        mean = float(self.law.loss(compute))
        return mean - half, mean + half


def fit_law(compute: np.ndarray, loss: np.ndarray, pinned_E: float | None = None) -> Fit:
    """Least-squares fit of ``E + A * C^(-alpha)`` (module docstring)."""
    compute = np.asarray(compute, dtype=float)
    loss = np.asarray(loss, dtype=float)
    c_ref = math.exp(float(np.mean(np.log(compute))))
    x = np.log(compute / c_ref)
    e_max = float(loss.min()) * (1 - 1e-9)
    opts = dict(method="trf", x_scale="jac", xtol=1e-14, ftol=1e-14, gtol=1e-14, max_nfev=5000)

    if pinned_E is not None:

        def resid(p):
            return pinned_E + np.exp(p[0] - p[1] * x) - loss

        def jac(p):
            g = np.exp(p[0] - p[1] * x)
            return np.column_stack([g, -x * g])

        slope, icpt = np.polyfit(x, np.log(loss - pinned_E), 1)
        res = least_squares(
            resid,
            [icpt, max(-slope, 1e-3)],
            jac=jac,
            bounds=([-np.inf, 1e-6], [np.inf, 10.0]),
            **opts,
        )
        a, alpha = res.x
        E = pinned_E
    else:

        def resid(p):
            return p[0] + np.exp(p[1] - p[2] * x) - loss

        def jac(p):
            g = np.exp(p[1] - p[2] * x)
            return np.column_stack([np.ones_like(x), g, -x * g])

        res = None
        for frac in (0.0, 0.3, 0.6, 0.8, 0.9, 0.95):
            e0 = frac * float(loss.min())
            slope, icpt = np.polyfit(x, np.log(loss - e0), 1)
            r = least_squares(
                resid,
                [e0, icpt, max(-slope, 1e-3)],
                jac=jac,
                bounds=([0.0, -np.inf, 1e-6], [e_max, np.inf, 10.0]),
                **opts,
            )
            if res is None or r.cost < res.cost:
                res = r
        E, a, alpha = res.x
    if not res.success:
        raise RuntimeError(f"least_squares did not converge: {res.message}")
    J = res.jac
    n_par = J.shape[1]
    rss = float((res.fun**2).sum())
    dof = len(loss) - n_par
    s2 = rss / dof if dof > 0 else math.nan
    cov = s2 * np.linalg.pinv(J.T @ J)
    law = Law(float(E), float(math.exp(a) * c_ref**alpha), float(alpha))
    return Fit(law, len(loss), n_par, rss, cov, c_ref, pinned_E)


def cross_check(compute: np.ndarray, loss: np.ndarray, at: np.ndarray) -> float | str:
    """Largest |difference| between this script's free-E predictions at ``at`` and those of the law
    ``olmoablate.scaling.fit_ladder`` fits with a mirrored variant arm (module docstring); a string
    saying why not where it cannot run."""
    from olmoablate.scaling import DeclaredNoise, Rung, fit_ladder

    rungs = [
        Rung(f"r{i}", float(c), float(c), 1.0, 1.0, 1.0, 1.0, {0: float(y)}, {0: float(y)})
        for i, (c, y) in enumerate(zip(compute, loss, strict=True))
    ]
    try:
        ladder = fit_ladder(rungs, declared=DeclaredNoise(0.01, math.inf))
    except NotImplementedError:
        return "skipped: olmoablate.scaling.fit_ladder is not implemented in this checkout"
    if ladder.law is None:
        return f"fit_ladder gave no law: {ladder.refused}"
    ours = fit_law(compute, loss).law
    return float(np.max(np.abs(np.asarray(ladder.law.loss(at)) - np.asarray(ours.loss(at)))))


def load(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def run(path: Path) -> list[dict]:
    rows = load(path)
    C = np.array([float(r["budget_flops"]) for r in rows])
    order = np.argsort(C)
    out = []
    checks = []
    for metric, pinned in CASES:
        y = np.array([float(r[metric]) for r in rows])[order]
        c = C[order]
        for split in SPLITS:
            train = c <= split
            fit = fit_law(c[train], y[train], pinned)
            if pinned is None:
                checks.append((metric, split, cross_check(c[train], y[train], c[~train])))
            for ci, yi in zip(c[~train], y[~train], strict=True):
                pred = float(fit.law.loss(ci))
                pi = fit.prediction_interval(ci)
                src = None
                if split == SOURCE_SPLIT_MAX and ci == 1e21:
                    printed, (sE, sA, sal) = SOURCE_PROJECTION_1E21[metric]
                    src = (printed, sE + sA * ci ** (-sal))
                out.append(
                    dict(
                        metric=metric,
                        pinned=pinned,
                        train=(c[train].min(), split),
                        n_train=int(train.sum()),
                        fit=fit,
                        compute=ci,
                        actual=yi,
                        pred=pred,
                        pi=pi,
                        source=src,
                    )
                )
    return out, checks


def _e(x: float) -> str:
    m, e = f"{x:.0e}".split("e")
    return f"{m}e{int(e)}"


def table(results: list[dict]) -> str:
    lines = [
        "| metric | E | fitted on | fitted law | test budget | predicted | actual | error | rel. error "
        "| 95% PI (new run) | source's projection (error) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        law = r["fit"].law
        err = r["pred"] - r["actual"]
        pi = "—" if r["pi"] is None else f"[{r['pi'][0]:.4f}, {r['pi'][1]:.4f}]"
        if r["source"] is None:
            src = "— (none for this split)"
        else:
            printed, law_value = r["source"]
            src = (
                f"{printed:.4f} ({printed - r['actual']:+.4f}, {abs(printed - r['actual']) / r['actual']:.2%}); "
                f"its law evaluates to {law_value:.4f} ({law_value - r['actual']:+.4f})"
            )
        lines.append(
            f"| {'Paloma macro loss' if r['metric'] == 'paloma_macro_loss' else 'c4_en BPB'} "
            f"| {'free' if r['pinned'] is None else 'pinned ' + str(r['pinned'])} "
            f"| {_e(r['train'][0])}–{_e(r['train'][1])} ({r['n_train']} runs) "
            f"| {law.E:.4f} + {law.A:.4g}·C^(−{law.alpha:.4f}) "
            f"| {_e(r['compute'])} | {r['pred']:.4f} | {r['actual']:.4f} | {err:+.4f} "
            f"| {abs(err) / r['actual']:.2%} | {pi} | {src} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    args = ap.parse_args(argv)
    results, checks = run(args.csv)
    print(f"data: {args.csv}")
    print(
        "fit: scipy.optimize.least_squares (trf), L = E + exp(a - alpha*log(C/c_ref)), "
        "0 <= E < min(fitted loss), alpha > 0, unweighted; law = olmoablate.scaling.Law\n"
    )
    print(table(results))
    # one summary line per case on the source's split
    print()
    for r in results:
        if r["source"] is not None:
            printed = r["source"][0]
            print(
                f"{r['metric']} (E {'free' if r['pinned'] is None else r['pinned']}), fit on "
                f"1e18-3e20, at 1e21: ours {r['pred']:.4f} (error {r['pred'] - r['actual']:+.4f}), "
                f"source {printed:.4f} (error {printed - r['actual']:+.4f}), actual {r['actual']:.4f}"
            )
    print(
        "\ncross-check, the same free-E fits through olmoablate.scaling.fit_ladder (mirrored variant arm):"
    )
    for metric, split, d in checks:
        what = d if isinstance(d, str) else f"largest |prediction difference| {d:.2e}"
        print(f"  {metric}, fitted up to {_e(split)}: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
