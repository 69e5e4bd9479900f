"""The report's plots (matplotlib, Agg): per (size, variant) curves at matched tokens, the
FLOPs-matched and looped views, quality-vs-cost trade-offs and consistency across sizes.

Why a plot cache and forked workers: matplotlib spends ~0.2-0.5 s per figure and a ladder has
dozens; a figure whose inputs hash the same as when it was last drawn is not drawn again, and the
rest are drawn in parallel by forked processes that share the report copy-on-write.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import math
import multiprocessing
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from olmoablate.io import write_json_atomic
from olmoablate.report.assemble import Report
from olmoablate.report.cards import (
    card_key,
    card_plot_name,
    figure_hash,
    plot_card,
    pyplot,
    safe_name,
    save_png,
    token_axes,
)
from olmoablate.report.compare import LOSS, Aligned, PairResult
from olmoablate.report.depth import ArmProfile
from olmoablate.report.ladder import LadderResult
from olmoablate.scaling import unit_word

#: A fixed title height: matplotlib's automatic one measures every tick label of the axes
#: to dodge them (about a fifth of a figure's drawing time).
_TITLE_Y = 1.03


def _decimate(al: Aligned, n: int = 500) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, baseline and variant of ``al`` at no more than ``n`` evenly spaced points."""
    if al.x.size <= n:
        return al.x, al.baseline, al.variant
    idx = np.linspace(0, al.x.size - 1, n).astype(np.int64)
    return al.x[idx], al.baseline[idx], al.variant[idx]


def _gate_eval_key(report: Report, pairs: Sequence[PairResult]) -> str | None:
    metric = report.results.gate.metric
    for p in pairs:
        if metric in p.evals:
            return metric
    for p in pairs:
        for k in p.evals:
            if "CE loss" in k:
                return k
    return next((k for p in pairs for k in p.evals), None)


def plot_group(
    report: Report, size: str, variant: str, pairs: Sequence[PairResult], out: Path
) -> list[Path]:
    """Train loss, train-loss delta, eval metric and eval delta of every seed of one
    (size, variant): EMA lines over faint raw values, all at matched tokens."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    (a_loss, a_dloss), (a_eval, a_deval) = axes
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    eval_key = _gate_eval_key(report, pairs)
    for i, p in enumerate(pairs):
        c = colors[i % len(colors)]
        tag = f"seed {p.seed}" + ("" if p.valid else " INVALID")
        if len(p.train):
            x, yb, yv = _decimate(p.train)
            a_loss.plot(x, yb, color="0.6", alpha=0.25, lw=0.6)
            a_loss.plot(x, yv, color=c, alpha=0.25, lw=0.6)
            a_dloss.plot(x, yv - yb, color=c, alpha=0.2, lw=0.6)
        if len(p.train_smooth):
            x, yb, yv = _decimate(p.train_smooth)
            a_loss.plot(x, yb, color="0.3", lw=1.2, label="baseline" if i == 0 else None)
            # one legend entry per arm here; the seeds' colours are listed on the eval-delta panel
            # (legends are the costliest artists to draw: ~0.1 s for ten entries)
            a_loss.plot(
                x, yv, color=c, lw=1.4, label=f"{variant} (colour: seed)" if i == 0 else None
            )
            a_dloss.plot(x, yv - yb, color=c, lw=1.4, label=tag)
        if eval_key and eval_key in p.evals:
            al = p.evals[eval_key]
            a_eval.plot(al.x, al.baseline, "o-", color="0.3", ms=3, lw=1)
            a_eval.plot(al.x, al.variant, "o-", color=c, ms=3, lw=1.2)
            a_deval.plot(al.x, al.delta, "o-", color=c, ms=3, label=tag if i < 8 else None)
    for ax in (a_dloss, a_deval):
        ax.axhline(0.0, color="k", lw=0.8)
    a_loss.set_title(f"{LOSS} (EMA over raw), matched tokens", y=_TITLE_Y)
    a_dloss.set_title(f"Δ {LOSS}: {variant} − baseline (EMA over raw)", y=_TITLE_Y)
    a_eval.set_title(f"{eval_key or 'no eval metric'} at matched tokens", y=_TITLE_Y)
    a_deval.set_title(f"Δ {eval_key or 'eval'}: {variant} − baseline", y=_TITLE_Y)
    for ax in axes.ravel():
        token_axes(ax, "tokens")
    # a fixed corner: "best" searches every line's points for the emptiest spot
    for ax in (a_loss, a_deval):
        if ax.get_legend_handles_labels()[0]:  # no metrics yet: no lines, no legend (a warning)
            ax.legend(fontsize=7, loc="upper right")
    invalid = any(not p.valid for p in pairs)
    fig.suptitle(
        f"{size}: {variant} vs baseline" + ("  —  CONTAINS INVALID PAIRS" if invalid else ""),
        color="#cf222e" if invalid else "black",
    )
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.08, top=0.9, wspace=0.22, hspace=0.4)
    paths = [save_png(fig, out / f"{safe_name(size)}__{safe_name(variant)}.png")]
    flops = [p for p in pairs if p.train_flops is not None and len(p.train_flops)]
    if flops:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
        for p, c in zip(flops, itertools.cycle(colors)):
            assert p.train_flops is not None
            x, yb, yv = _decimate(p.train_flops)
            a1.plot(x, yb, color="0.3", lw=1, label=f"baseline seed {p.seed}")
            a1.plot(x, yv, color=c, lw=1.2, label=f"{variant} seed {p.seed}")
            if eval_key and eval_key in p.evals_flops:
                al = p.evals_flops[eval_key]
                a2.plot(al.x, al.delta, "o-", color=c, ms=3, label=f"seed {p.seed}")
        a1.set_title(f"{LOSS} at matched training FLOPs", y=_TITLE_Y)
        a2.set_title(f"Δ {eval_key or 'eval'} at matched FLOPs (variant interpolated)", y=_TITLE_Y)
        a2.axhline(0.0, color="k", lw=0.8)
        from matplotlib.ticker import EngFormatter

        for ax in (a1, a2):
            ax.set_xlabel("training FLOPs")
            ax.xaxis.set_major_formatter(EngFormatter())
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper right")
        fig.suptitle(f"{size}: {variant} — FLOPs-matched view ({flops[0].flops_label})", fontsize=9)
        fig.subplots_adjust(left=0.09, right=0.97, bottom=0.15, top=0.86, wspace=0.25)
        paths.append(save_png(fig, out / f"{safe_name(size)}__{safe_name(variant)}__flops.png"))
    looped = [p for p in pairs if p.looped]
    # a panel only where there is a curve to see: one loop count at eval is one point per seed
    # (the eval table says it), one H norm is one number
    by_loops = any(len(s["loops"]) > 1 for p in looped for s in (p.looped or {})["sets"].values())
    by_t = any(len((p.looped or {})["h_norm"] or {}) > 1 for p in looped)
    if by_loops or by_t:
        n_ax = int(by_loops) + int(by_t)
        fig, axs = plt.subplots(1, n_ax, figsize=(5.5 * n_ax, 3.8), squeeze=False)
        a1 = axs[0][0] if by_loops else None
        a2 = axs[0][-1] if by_t else None
        for p, c in zip(looped, itertools.cycle(colors)):
            info = p.looped or {}
            if a1 is not None:
                for key, s in info["sets"].items():
                    a1.plot(s["loops"], s["loss"], "o-", color=c, label=f"seed {p.seed} {key}")
                    if s.get("baseline_final") is not None:
                        a1.axhline(s["baseline_final"], color="0.4", ls="--", lw=0.8)
                a1.axvline(info["trained_loops"], color="k", ls=":", lw=1)
            if a2 is not None and info["h_norm"]:
                hn = info["h_norm"]
                a2.plot(list(hn), list(hn.values()), "o-", color=c, label=f"seed {p.seed}")
        if a1 is not None:
            a1.set_title("eval loss vs loop count (dotted: trained b; dashed: baseline)", y=_TITLE_Y)
            a1.set_xlabel("loops at eval")
        if a2 is not None:
            a2.set_title("H norm per loop (end of training)", y=_TITLE_Y)
            a2.set_xlabel("loop t")
        for ax in (a for a in (a1, a2) if a is not None):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper right")
        fig.subplots_adjust(left=0.09, right=0.97, bottom=0.15, top=0.86, wspace=0.25)
        paths.append(save_png(fig, out / f"{safe_name(size)}__{safe_name(variant)}__loops.png"))
    return paths


def tradeoff_points(
    report: Report, pairs: Sequence[PairResult]
) -> dict[str, dict[str, list[float]]]:
    """What :func:`plot_tradeoffs` draws: per arm, the gate metric at the last matched point and
    the arm's unique parameters and total training FLOPs, one entry per valid pair."""
    metric = report.results.gate.metric
    points: dict[str, dict[str, list[float]]] = {}
    for p in pairs:
        if not p.valid:
            continue
        for run in (p.baseline, p.variant):
            col = run.column(metric)
            if col is None or not np.isfinite(col).any():
                continue
            tok = run.tokens
            assert tok is not None
            ok = np.isfinite(col) & (tok <= p.matched_tokens)
            if not ok.any():
                continue
            arm = run.entry.arm
            d = points.setdefault(arm, {"q": [], "params": [], "flops": []})
            d["q"].append(float(col[ok][-1]))
            d["params"].append(float(run.entry.unique_params or run.entry.params))
            d["flops"].append(float(run.entry.total_train_flops))
    return points


def plot_tradeoffs(report: Report, size: str, pairs: Sequence[PairResult], out: Path) -> list[Path]:
    """Quality vs unique parameters and quality vs training FLOPs: two separate plots, so a
    parameter saving is never read as a compute saving."""
    points = tradeoff_points(report, pairs)
    if len(points) < 2:
        return []
    plt = pyplot()
    metric = report.results.gate.metric
    paths = []
    for key, label, fname in (
        ("params", "unique parameters", "quality_vs_unique_params"),
        ("flops", "training FLOPs (total, plan)", "quality_vs_train_flops"),
    ):
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for arm, d in points.items():
            xs = [x for x in d[key] if x > 0]
            if not xs:
                continue
            at = (np.mean(xs), np.mean(d["q"]))
            ax.scatter(*at, s=40, label=arm)
            ax.annotate(arm, at, fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(metric, fontsize=7)
        ax.set_title(
            f"{size}: quality vs {label}\n(last matched point, mean over seeds)", fontsize=8
        )
        ax.grid(alpha=0.3)
        fig.subplots_adjust(left=0.17, right=0.96, bottom=0.13, top=0.9)
        paths.append(save_png(fig, out / f"{safe_name(size)}__{fname}.png"))
    return paths


def consistency_rows(report: Report) -> list[Any]:
    """What :func:`plot_consistency` draws: the size rows that have an estimate."""
    return [r for r in report.size_rows if r.estimate is not None]


def plot_consistency(report: Report, out: Path) -> Path | None:
    rows = consistency_rows(report)
    if not rows:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    order = {s: i for i, s in enumerate(report.sizes)}
    variants = sorted({r.variant for r in rows})
    for j, v in enumerate(variants):
        mine = sorted((r for r in rows if r.variant == v), key=lambda r: order.get(r.size, 99))
        xs = [order.get(r.size, 99) + 0.08 * j for r in mine]
        ests = [r.estimate for r in mine if r.estimate]
        ys = [e.mean for e in ests]
        lo = [e.mean - e.lower if math.isfinite(e.lower) else 0 for e in ests]
        hi = [e.upper - e.mean if math.isfinite(e.upper) else 0 for e in ests]
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", capsize=3, label=v)
    ax.axhline(0.0, color="k", lw=0.8)
    me = report.results.gate.min_effect
    if me:
        ax.axhline(me, color="#1a7f37", ls="--", lw=0.8, label="min_effect")
    ax.set_xticks(range(len(report.sizes)), report.sizes)
    ax.set_ylabel(f"improvement in {report.results.gate.metric}")
    ax.set_title("gate metric improvement by size (one-sided CI bounds)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    fig.subplots_adjust(left=0.17, right=0.96, bottom=0.13, top=0.9)
    return save_png(fig, out / "consistency.png")


def _log_flops_axes(ax: Any) -> None:
    from matplotlib.ticker import EngFormatter

    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs (plan)", fontsize=8)
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3, which="both")


def plot_ladder_loss(gate: str, lad: LadderResult, metric: str, out: Path) -> Path | None:
    """``plots/ladder__<gate>__<variant>__loss.png``: every seed's loss against its training
    FLOPs, per arm, and the fitted baseline law extended to the targets (log x): how well the
    law goes through the baseline points, and where the variant sits against it."""
    if not lad.rungs:
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, 3.6))
    for arm, color, fx, ly in (
        ("baseline", "0.3", "flops_b", "loss_b"), (lad.variant, "#1f6feb", "flops_v", "loss_v"),
    ):  # fmt: skip
        pts = np.array([(getattr(r, fx), y) for r in lad.rungs for y in getattr(r, ly).values()])
        ax.plot(pts[:, 0], pts[:, 1], "o", color=color, ms=4, label=f"{arm} (one point per seed)")
    at = {t.size: t.flops_v for t in lad.targets}
    for c in lad.checks:  # results at a target, where they exist (its mean)
        for y, color in ((c.variant_loss, "#1f6feb"), (c.baseline_loss, "0.3")):
            ax.plot([at[c.size]], [y], "s", mfc="none", color=color)
    if (law := lad.fits["flops"].law) is not None:
        hi = max([r.flops_v for r in lad.rungs] + [t.flops_v for t in lad.targets])
        x = np.geomspace(min(r.flops_b for r in lad.rungs) / 1.5, hi * 1.5, 200)
        ax.plot(x, law.loss(x), "-", color="0.3", lw=1, label="fitted baseline law")
        for t in lad.targets:
            ax.axvline(t.flops_v, color="0.6", ls=":", lw=0.8)
            ax.annotate(t.size, (t.flops_v, law.loss(t.flops_v)), fontsize=7)
    _log_flops_axes(ax)
    ax.set_ylabel(metric, fontsize=7)
    ax.set_title(f"{lad.variant} vs baseline: loss against training FLOPs", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.subplots_adjust(left=0.13, right=0.97, bottom=0.15, top=0.9)
    name = f"ladder__{safe_name(gate)}__{safe_name(lad.variant)}__loss.png"
    return save_png(fig, out / name, dpi=100)


def plot_depth(profiles: Sequence[ArmProfile], out: Path) -> Path | None:
    """``plots/depth__<size>__<set>.png``: the effective-depth diagnostic of every arm of one
    size on one eval set (docs/depth.md): logit-lens CE per layer (or per loop), seeds thin and
    their mean thick, the first layer within the margin of the final dotted; beside it
    Depth-Attention's mean weight per source layer when an arm has it. Not a gate input."""
    if not profiles:
        return None
    from olmoablate.plan.metrics import DEPTH_MARGIN_NATS

    has_da = any(p.da_weight for p in profiles)
    fig, axes = pyplot().subplots(1, 2 if has_da else 1, figsize=(10 if has_da else 6.4, 3.6))
    axes = np.atleast_1d(axes)
    ax = axes[0]
    for k, p in enumerate(profiles):
        color = f"C{k}"
        for run in p.ce_runs:
            ax.plot(p.indices, run, color=color, alpha=0.3, lw=0.8)
        ax.plot(p.indices, p.ce, color=color, lw=1.8, marker="o", ms=3,
                label=f"{p.arm} ({len(p.seeds)} seed(s))")  # fmt: skip
        firsts = [f for f in p.first_within if f is not None]
        if firsts:
            ax.axvline(min(firsts), color=color, ls=":", lw=1)
    p0 = profiles[0]
    ax.set_xlabel(f"{p0.unit} (0 = embeddings)" if p0.unit == "layer" else "loop", fontsize=8)
    ax.set_ylabel(f"{p0.set}: CE through the model's own head (nats)", fontsize=7)
    ax.set_title(
        f"{p0.size}: CE per {p0.unit} (dotted: first within {DEPTH_MARGIN_NATS:g} nats of final)",
        fontsize=9,
    )
    ax.legend(fontsize=7)
    if has_da:
        bx = axes[1]
        with_da = [(k, p) for k, p in enumerate(profiles) if p.da_weight]  # k: the arm's color
        width = 0.8 / len(with_da)
        for n, (k, p) in enumerate(with_da):
            js = np.array(sorted(p.da_weight))
            bx.bar(js + width * n, [p.da_weight[j] for j in js], width=width, color=f"C{k}",
                   label=p.arm)  # fmt: skip
        bx.set_xlabel("source layer (0 = embeddings)", fontsize=8)
        bx.set_ylabel("mean depth-softmax weight", fontsize=7)
        bx.set_title("Depth-Attention: weight on each earlier layer's value", fontsize=9)
        bx.legend(fontsize=7)
    fig.suptitle("Effective depth: a diagnostic, not a gate input", fontsize=9)
    fig.tight_layout()
    name = f"depth__{safe_name(p0.size)}__{safe_name(p0.set)}.png"
    return save_png(fig, out / name, dpi=100)


def depth_groups(report: Report) -> dict[tuple[str, str], list[ArmProfile]]:
    """The depth figures' data: each (size, eval set)'s arm profiles."""
    got: dict[tuple[str, str], list[ArmProfile]] = {}
    for p in report.depth:
        got.setdefault((p.size, p.set), []).append(p)
    return got


def _errbar(ax: Any, pts: list[tuple[float, Any]], top: float, **kw: Any) -> None:
    """Intervals as error bars, an open (inf) or far end drawn to the top of the axes."""
    if pts:
        x = [f for f, _ in pts]
        m = [iv.estimate for _, iv in pts]
        lo = [iv.estimate - iv.lower for _, iv in pts]
        hi = [max(min(iv.upper, top) - iv.estimate, 0.0) for _, iv in pts]
        ax.errorbar(x, m, yerr=[lo, hi], fmt="o", capsize=3, **kw)


def plot_multiplier(lad: LadderResult, min_multiplier: float, path: Path) -> Path | None:
    """The multiplier against the variant's training FLOPs: each rung's interval, the trend
    through them (gamma) extended to the targets, each target's projection interval, 1x and the
    bar. The bounds are one-sided ``confidence`` bounds, as the card says."""
    fit = lad.fit
    rungs = [(r.flops_v, r.multiplier) for r in fit.rungs if r.multiplier is not None]
    if not rungs:  # no rung multiplier defined: the card says why
        return None
    projs = [(p.flops_v, p.multiplier) for p in fit.projections]
    ivs = [iv for _, iv in rungs + projs]
    # the y range: every estimate, 1x and the bar; the intervals up to 3x the largest of those
    est = [iv.estimate for iv in ivs] + [1.0, min_multiplier]
    ups = [iv.upper for iv in ivs if math.isfinite(iv.upper)]
    top = min(max(est + ups), 3 * max(est)) * 1.05
    fig, ax = pyplot().subplots(figsize=(6.4, 3.0))
    _errbar(ax, rungs, top, color="0.3", label="rungs")
    _errbar(ax, projs, top, color="#1f6feb", label="projections")
    if fit.trend is not None and fit.gamma is not None:
        x = np.geomspace(min(f for f, _ in rungs + projs), max(f for f, _ in rungs + projs), 60)
        band = [fit.trend.band(float(c), fit.level) for c in x]
        ax.fill_between(x, [b.lower for b in band], [min(b.upper, top) for b in band],
                        color="#1f6feb", alpha=0.12, lw=0)  # fmt: skip
        ax.plot(x, [b.estimate for b in band], "--", color="#1f6feb", lw=1,
                label=f"trend, gamma {fit.gamma.estimate:+.3g}")  # fmt: skip
    for p in fit.projections:
        ax.annotate(p.size, (p.flops_v, p.multiplier.estimate), fontsize=7, xytext=(4, 4),
                    textcoords="offset points")  # fmt: skip
    ax.axhline(1.0, color="k", lw=0.8)
    bar = f"min_multiplier {min_multiplier:g}"
    ax.axhline(min_multiplier, color="#cf222e", ls="--", lw=1, label=bar)
    _log_flops_axes(ax)
    ax.set_ylim(max(0.0, min([iv.lower for iv in ivs] + est) * 0.95), top)
    word = unit_word(lad.unit)
    ax.set_ylabel(f"multiplier ({word})", fontsize=8)
    title = f"{lad.variant}: {word} multiplier, one-sided {lad.confidence:.0%} bounds"
    why = fit.refused.split(":")[0][:45]  # its first clause; the card has the whole reason
    ax.set_title(title + (f"; projection refused ({why})" if why else ""), fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.17, top=0.88)
    return save_png(fig, path, dpi=100)  # 640 px: the card's width


#: The report being plotted, shared with forked plot workers (no pickling of curves).
_FORK_REPORT: Report | None = None


def _worker_init() -> None:
    """A forked worker dies on SIGTERM (``Pool.terminate``), whatever handler the parent had
    installed (a job wrapper's, a test's): otherwise leaving the pool waits for it forever."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _plot_job(job: tuple[str, str, str, str]) -> list[Path]:
    kind, size, variant, out_s = job
    report = _FORK_REPORT
    assert report is not None
    out = Path(out_s)
    if kind == "group":
        ps = [p for p in report.pairs if p.size == size and p.variant_name == variant]
        return plot_group(report, size, variant, ps, out)
    if kind == "depth":
        d = plot_depth(depth_groups(report).get((size, variant), []), out)
        return [] if d is None else [d]
    if kind == "tradeoff":
        return plot_tradeoffs(report, size, [p for p in report.pairs if p.size == size], out)
    if kind in ("card", "ladder"):
        gate = next(r for r in report.gates or [report] if r.gate_name == size)
        g = gate.results.gate
        if kind == "ladder":
            path = plot_ladder_loss(size, gate.ladders[variant], g.metric, out)
        elif gate.ladders:  # a multiplier gate's card: the multiplier against compute
            lad = gate.ladders.get(g.variant or "") or next(iter(gate.ladders.values()))
            path = plot_multiplier(lad, g.min_multiplier, out / card_plot_name(size))
        else:
            path = plot_card(gate, out)
        return [] if path is None else [path]
    c = plot_consistency(report, out)
    return [] if c is None else [c]


def _group_key(report: Report, size: str, variant: str) -> str:
    """Hash of everything ``plot_group`` draws for one (size, variant) (see figure_hash)."""
    h = figure_hash(__file__)
    pairs = [p for p in report.pairs if p.size == size and p.variant_name == variant]
    h.update(json.dumps([size, variant, report.results.gate.metric]).encode())
    for p in pairs:
        head = [p.pair_id, p.seed, p.valid, p.flops_label, p.looped, sorted(p.evals)]
        h.update(json.dumps(head, sort_keys=True, default=repr).encode())
        curves = [p.train, p.train_smooth, *p.evals.values(), *p.evals_flops.values()]
        curves.append(p.train_flops)
        for al in curves:
            if al is None:
                h.update(b"none")
                continue
            for arr in (al.x, al.baseline, al.variant):
                a = np.ascontiguousarray(arr, dtype=np.float64)
                h.update(len(a).to_bytes(8, "little"))
                h.update(a.tobytes())
    return h.hexdigest()


_PLOT_CACHE = ".plot-cache.json"


def _cache_name(job: tuple[str, str, str, str]) -> str:
    """A job's entry in the plot cache: ``size\tvariant`` (as before cards), else
    ``<kind>\t<size or gate>`` (``card``, ``tradeoff``, ``consistency``)."""
    if job[0] in ("ladder", "depth"):
        return f"{job[0]}\t{job[1]}\t{job[2]}"
    return f"{job[1]}\t{job[2]}" if job[0] == "group" else f"{job[0]}\t{job[1]}"


def _data_key(report: Report, data: Any) -> str:
    """Hash of what a figure draws (its data, as JSON; see figure_hash)."""
    h = figure_hash(__file__)
    gate = report.results.gate
    h.update(json.dumps([gate.metric, gate.min_effect, report.sizes, data], default=repr).encode())
    return h.hexdigest()


def make_plots(report: Report, out: Path, workers: int | None = None) -> list[Path]:
    """Every plot of the report, cached and drawn in parallel (the module docstring)."""
    global _FORK_REPORT
    o = str(out)
    keys: dict[tuple[str, str, str, str], str] = {}  # every figure's job -> its cache key
    for p in report.pairs:
        if ("group", p.size, p.variant_name, o) not in keys:
            keys[("group", p.size, p.variant_name, o)] = _group_key(report, p.size, p.variant_name)
    for size in report.sizes:  # the tradeoff and consistency figures, keyed by the data they draw
        ps = [p for p in report.pairs if p.size == size]
        if any(p.looped for p in ps):
            keys[("tradeoff", size, "", o)] = _data_key(report, [size, tradeoff_points(report, ps)])
    for (size, set_name), profs in depth_groups(report).items():
        keys[("depth", size, set_name, o)] = _data_key(
            report, [size, set_name, [dataclasses.asdict(p) for p in profs]]
        )
    rows = [[r.variant, r.size, dataclasses.asdict(r.estimate)] for r in consistency_rows(report)]
    keys[("consistency", "", "", o)] = _data_key(report, rows)
    # the cards' plots (the job's "size" slot names the gate); a ladder's, keyed by its data
    for r in report.gates or [report]:
        lads = [lad.as_dict() for lad in r.ladders.values()]
        keys[("card", r.gate_name, "", o)] = _data_key(r, lads) if lads else card_key(r)
        for v, lad in r.ladders.items():
            keys[("ladder", r.gate_name, v, o)] = _data_key(r, [r.gate_name, lad.as_dict()])
    jobs = list(keys)
    try:
        cache = json.loads((out / _PLOT_CACHE).read_text(encoding="utf-8"))
        cache = cache if isinstance(cache, dict) else {}
    except (OSError, ValueError):
        cache = {}
    done: dict[tuple[str, str, str, str], list[Path]] = {}
    for j, key in keys.items():
        hit = cache.get(_cache_name(j))
        if isinstance(hit, list) and len(hit) == 2 and hit[0] == key:
            paths = [out / str(name) for name in hit[1]]
            if all(path.is_file() for path in paths):
                done[j] = paths
    todo = [j for j in jobs if j not in done]
    n = workers if workers is not None else min(os.cpu_count() or 1, 4)
    _FORK_REPORT = report
    try:
        if n > 1 and len(todo) > 3 and "fork" in multiprocessing.get_all_start_methods():
            pyplot()  # import matplotlib once, before forking
            # the report's objects are shared copy-on-write with the workers; keep the workers'
            # garbage collector from walking (and so copying) every page of them
            gc.freeze()
            try:
                with multiprocessing.get_context("fork").Pool(n, _worker_init) as pool:
                    nested = pool.map(_plot_job, todo, chunksize=1)
            finally:
                gc.unfreeze()
        else:
            nested = [_plot_job(j) for j in todo]
    finally:
        _FORK_REPORT = None
    done.update(zip(todo, nested, strict=True))
    new_cache = {
        _cache_name(j): [key, [p.relative_to(out).as_posix() for p in done[j]]]
        for j, key in keys.items()
    }
    if new_cache != cache:
        try:
            write_json_atomic(out / _PLOT_CACHE, new_cache)
        except OSError:
            pass
    return [path for j in jobs for path in done[j]]
