"""The paired-delta plot of a verdict card: what the gate decided on, per seed, with the bar.

Why this plot on the card: the gate's number is the mean over seeds of the paired improvement at
the last eval points; drawing each seed's improvement at matched tokens (positive = the variant
is better), the estimate's one-sided interval and ``min_effect`` shows at a glance whether the
seeds agree, whether the curve has settled and how far the interval is from the bar.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from olmoablate.report.build import Report
from olmoablate.report.gate.verdict import Estimate, VariantVerdict
from olmoablate.report.render.cards import card_plot_name, headline_variant
from olmoablate.report.render.figure import figure_hash, pyplot, save_png


def _vs_baseline(v: VariantVerdict) -> Estimate | None:
    """The estimate of the check against the baseline (not the reference's)."""
    return next((c.estimate for c in v.checks if "reference" not in c.name), None)


def card_key(r: Report) -> str:
    """Hash of everything :func:`plot_card` draws for one gate, plus this module's source and
    the matplotlib version: equal hashes mean byte-identical figures (the plot cache's key)."""
    h = figure_hash(__file__)
    v = headline_variant(r)
    g = r.results.gate
    est = _vs_baseline(v) if v is not None else None
    head = [r.gate_name, g.metric, g.rule, g.min_effect, g.tolerance, v.variant if v else None]
    head.append([est.mean, est.lower, est.upper] if est is not None else None)
    for e in r.evidence.get(v.variant, []) if v is not None else []:
        head.append([e.seed, e.valid, e.series_x, e.series, len(e.improvement)])
    h.update(json.dumps(head, default=repr).encode())
    return h.hexdigest()


def plot_card(r: Report, out: Path) -> Path | None:
    """``plots/gate__<name>.png`` for one gate's report; None without evidence to draw."""
    v = headline_variant(r)
    if v is None:
        return None
    evidence = [e for e in r.evidence.get(v.variant, []) if e.valid and e.series]
    if not evidence:
        return None
    g = r.results.gate
    # the plotted series is vs the baseline: its check's estimate (quality_per_param decides vs
    # the reference first; its check vs the baseline is the tolerance one), and its bar
    est = _vs_baseline(v)
    qpp = g.rule == "quality_per_param"
    bar, bar_label = (-g.tolerance, f"-tolerance {g.tolerance:g}") if qpp else (g.min_effect, "")
    bar_label = bar_label or f"min_effect {g.min_effect:g}"
    plt = pyplot()
    from matplotlib.ticker import EngFormatter, MaxNLocator

    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, e in enumerate(evidence):
        c = colors[i % len(colors)]
        ax.plot(e.series_x, e.series, "o-", color=c, ms=3, lw=1.2, label=f"seed {e.seed}")
        n = len(e.improvement)
        if n:
            ax.plot(e.series_x[-n:], e.series[-n:], "o", color=c, ms=6, mfc="none")
    if est is not None and math.isfinite(est.mean):
        x0, x1 = min(e.series_x[0] for e in evidence), max(e.series_x[-1] for e in evidence)
        label = "mean"
        if math.isfinite(est.lower) and math.isfinite(est.upper):  # one seed: no interval
            ax.axhspan(est.lower, est.upper, color="#1f6feb", alpha=0.12, lw=0)
            label = "mean, one-sided interval"
        ax.hlines(est.mean, x0, x1, color="#1f6feb", lw=1.5, label=label)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.axhline(bar, color="#cf222e", ls="--", lw=1, label=bar_label)
    ax.set_title(
        f"{v.variant} − baseline: paired improvement in {g.metric}", fontsize=9
    )
    ax.set_xlabel("tokens (circled: the last_n points the gate averages)", fontsize=8)
    ax.set_ylabel("improvement (+ = better)", fontsize=8)
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.yaxis.set_major_locator(MaxNLocator(5))
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.subplots_adjust(left=0.13, right=0.98, bottom=0.17, top=0.88)
    return save_png(fig, out / card_plot_name(r.gate_name), dpi=100)  # 640 px: the card's width
