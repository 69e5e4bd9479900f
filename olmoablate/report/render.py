"""Render a built report: plots (matplotlib, Agg), report.md, self-contained report.html,
comparison.csv and gate.json, plus the terminal verdict table.

Why self-contained HTML: results are read on laptops, in air-gapped clusters, attached to issues.
Every plot is embedded as a base64 PNG and there is no script, font or stylesheet to fetch.
"""

from __future__ import annotations

import base64
import gc
import hashlib
import html
import json
import math
import multiprocessing
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from olmoablate.io import write_bytes_atomic, write_json_atomic, write_text_atomic
from olmoablate.report.build import Report
from olmoablate.report.compare import LOSS, PairResult, metric_direction
from olmoablate.report.gate_text import (
    GATES_HEADER,
    GATES_TEXT,
    gate_tag,
    gate_text,
    gates_rows,
    statistics_lines,
)
from olmoablate.report.links import wandb_section

_VERDICT_COLOR = {"proceed": "#1a7f37", "stop": "#cf222e", "inconclusive": "#9a6700"}


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.{digits}g}"
        return f"{v:.{digits}f}".rstrip("0").rstrip(".") if "." in f"{v:.{digits}f}" else f"{v}"
    return str(v)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


# ----------------------------------------------------------------------------------------------
# plots
# ----------------------------------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    import io

    buf = io.BytesIO()
    # zlib level 1: a few % larger PNGs, several times less encoding time
    fig.savefig(buf, format="png", dpi=72, pil_kwargs={"compress_level": 1})
    _plt().close(fig)
    write_bytes_atomic(path, buf.getvalue())
    return path


#: A fixed title height: matplotlib's automatic one measures every tick label of the axes
#: to dodge them (about a fifth of a figure's drawing time).
_TITLE_Y = 1.03


def _decimate(x: np.ndarray, y: np.ndarray, n: int = 500) -> tuple[np.ndarray, np.ndarray]:
    if x.size <= n:
        return x, y
    idx = np.linspace(0, x.size - 1, n).astype(np.int64)
    return x[idx], y[idx]


def _gate_eval_key(report: Report, pairs: Sequence[PairResult]) -> str | None:
    metric = str(report.results.gate["metric"])
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
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    (a_loss, a_dloss), (a_eval, a_deval) = axes
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    eval_key = _gate_eval_key(report, pairs)
    for i, p in enumerate(pairs):
        c = colors[i % len(colors)]
        tag = f"seed {p.seed}" + ("" if p.valid else " INVALID")
        if len(p.train):
            x, yb = _decimate(p.train.x, p.train.baseline)
            _, yv = _decimate(p.train.x, p.train.variant)
            a_loss.plot(x, yb, color="0.6", alpha=0.25, lw=0.6)
            a_loss.plot(x, yv, color=c, alpha=0.25, lw=0.6)
            a_dloss.plot(x, yv - yb, color=c, alpha=0.2, lw=0.6)
        if len(p.train_smooth):
            x, yb = _decimate(p.train_smooth.x, p.train_smooth.baseline)
            _, yv = _decimate(p.train_smooth.x, p.train_smooth.variant)
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
    from matplotlib.ticker import EngFormatter, MaxNLocator

    for ax in axes.ravel():
        ax.set_xlabel("tokens")
        ax.xaxis.set_major_formatter(EngFormatter())
        # ~5 ticks per axis: every tick is three artists (mark, grid line, label) to draw
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.yaxis.set_major_locator(MaxNLocator(5))
        ax.grid(alpha=0.3)
    # a fixed corner: "best" searches every line's points for the emptiest spot
    a_loss.legend(fontsize=7, loc="upper right")
    a_deval.legend(fontsize=7, loc="upper right")
    invalid = any(not p.valid for p in pairs)
    fig.suptitle(
        f"{size}: {variant} vs baseline" + ("  —  CONTAINS INVALID PAIRS" if invalid else ""),
        color="#cf222e" if invalid else "black",
    )
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.08, top=0.9, wspace=0.22, hspace=0.4)
    paths = [_save(fig, out / f"{_safe(size)}__{_safe(variant)}.png")]
    flops = [p for p in pairs if p.train_flops is not None and len(p.train_flops)]
    if flops:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
        for i, p in enumerate(flops):
            c = colors[i % len(colors)]
            assert p.train_flops is not None
            x, yb = _decimate(p.train_flops.x, p.train_flops.baseline)
            _, yv = _decimate(p.train_flops.x, p.train_flops.variant)
            a1.plot(x, yb, color="0.3", lw=1, label=f"baseline seed {p.seed}")
            a1.plot(x, yv, color=c, lw=1.2, label=f"{variant} seed {p.seed}")
            if eval_key and eval_key in p.evals_flops:
                al = p.evals_flops[eval_key]
                a2.plot(al.x, al.delta, "o-", color=c, ms=3, label=f"seed {p.seed}")
        a1.set_title(f"{LOSS} at matched training FLOPs", y=_TITLE_Y)
        a2.set_title(f"Δ {eval_key or 'eval'} at matched FLOPs (variant interpolated)", y=_TITLE_Y)
        a2.axhline(0.0, color="k", lw=0.8)
        for ax in (a1, a2):
            ax.set_xlabel("training FLOPs")
            ax.xaxis.set_major_formatter(EngFormatter())
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper right")
        fig.suptitle(f"{size}: {variant} — FLOPs-matched view ({flops[0].flops_label})", fontsize=9)
        fig.subplots_adjust(left=0.09, right=0.97, bottom=0.15, top=0.86, wspace=0.25)
        paths.append(_save(fig, out / f"{_safe(size)}__{_safe(variant)}__flops.png"))
    looped = [p for p in pairs if p.looped]
    if looped:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
        for i, p in enumerate(looped):
            c = colors[i % len(colors)]
            info = p.looped or {}
            for key, s in info["sets"].items():
                a1.plot(s["loops"], s["loss"], "o-", color=c, label=f"seed {p.seed} {key}")
                if s.get("baseline_final") is not None:
                    a1.axhline(s["baseline_final"], color="0.4", ls="--", lw=0.8)
            if info["h_norm"]:
                a2.plot(
                    list(info["h_norm"]),
                    list(info["h_norm"].values()),
                    "o-",
                    color=c,
                    label=f"seed {p.seed}",
                )
            a1.axvline(info["trained_loops"], color="k", ls=":", lw=1)
        a1.set_title("eval loss vs loop count (dotted: trained b; dashed: baseline)", y=_TITLE_Y)
        a1.set_xlabel("loops at eval")
        a2.set_title("H norm per loop (end of training)", y=_TITLE_Y)
        a2.set_xlabel("loop t")
        for ax in (a1, a2):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper right")
        fig.subplots_adjust(left=0.09, right=0.97, bottom=0.15, top=0.86, wspace=0.25)
        paths.append(_save(fig, out / f"{_safe(size)}__{_safe(variant)}__loops.png"))
    return paths


def plot_tradeoffs(report: Report, size: str, pairs: Sequence[PairResult], out: Path) -> list[Path]:
    """Quality vs unique parameters and quality vs training FLOPs: two separate plots, so a
    parameter saving is never read as a compute saving."""
    plt = _plt()
    metric = str(report.results.gate["metric"])
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
            arm = str(run.entry.get("arm"))
            d = points.setdefault(arm, {"q": [], "params": [], "flops": []})
            d["q"].append(float(col[ok][-1]))
            d["params"].append(
                float(run.entry.get("unique_params") or run.entry.get("params") or 0)
            )
            d["flops"].append(float(run.entry.get("total_train_flops") or 0))
    if len(points) < 2:
        return []
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
            ax.scatter(np.mean(xs), np.mean(d["q"]), s=40, label=arm)
            ax.annotate(
                arm,
                (np.mean(xs), np.mean(d["q"])),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(metric, fontsize=7)
        ax.set_title(
            f"{size}: quality vs {label}\n(last matched point, mean over seeds)", fontsize=8
        )
        ax.grid(alpha=0.3)
        fig.subplots_adjust(left=0.17, right=0.96, bottom=0.13, top=0.9)
        paths.append(_save(fig, out / f"{_safe(size)}__{fname}.png"))
    return paths


def plot_consistency(report: Report, out: Path) -> Path | None:
    rows = [r for r in report.size_rows if r.estimate is not None]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    order = {s: i for i, s in enumerate(report.sizes)}
    variants = sorted({r.variant for r in rows})
    for j, v in enumerate(variants):
        mine = sorted((r for r in rows if r.variant == v), key=lambda r: order.get(r.size, 99))
        xs = [order.get(r.size, 99) + 0.08 * j for r in mine]
        ys = [r.estimate.mean for r in mine if r.estimate]
        lo = [
            r.estimate.mean - r.estimate.lower if math.isfinite(r.estimate.lower) else 0
            for r in mine
            if r.estimate
        ]
        hi = [
            r.estimate.upper - r.estimate.mean if math.isfinite(r.estimate.upper) else 0
            for r in mine
            if r.estimate
        ]
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", capsize=3, label=v)
    ax.axhline(0.0, color="k", lw=0.8)
    me = float(report.results.gate.get("min_effect") or 0)
    if me:
        ax.axhline(me, color="#1a7f37", ls="--", lw=0.8, label="min_effect")
    ax.set_xticks(range(len(report.sizes)), report.sizes)
    ax.set_ylabel(f"improvement in {report.results.gate['metric']}")
    ax.set_title("gate metric improvement by size (one-sided CI bounds)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    fig.subplots_adjust(left=0.17, right=0.96, bottom=0.13, top=0.9)
    return _save(fig, out / "consistency.png")


#: The report being plotted, shared with forked plot workers (no pickling of curves).
_FORK_REPORT: Report | None = None


def _plot_job(job: tuple[str, str, str, str]) -> list[Path]:
    kind, size, variant, out_s = job
    report = _FORK_REPORT
    assert report is not None
    out = Path(out_s)
    if kind == "group":
        ps = [p for p in report.pairs if p.size == size and p.variant_name == variant]
        return plot_group(report, size, variant, ps, out)
    if kind == "tradeoff":
        return plot_tradeoffs(report, size, [p for p in report.pairs if p.size == size], out)
    c = plot_consistency(report, out)
    return [] if c is None else [c]


def _group_key(report: Report, size: str, variant: str) -> str:
    """Hash of everything ``plot_group`` draws for one (size, variant), plus this module's
    source and the matplotlib version: equal hashes mean byte-identical figures."""
    import matplotlib

    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(matplotlib.__version__.encode())
    pairs = [p for p in report.pairs if p.size == size and p.variant_name == variant]
    h.update(json.dumps([size, variant, str(report.results.gate["metric"])]).encode())
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


def make_plots(report: Report, out: Path, workers: int | None = None) -> list[Path]:
    """Every plot of the report; figures are drawn in parallel (fork) when there are many,
    because matplotlib spends ~0.2-0.5 s per figure and a ladder has dozens. A (size, variant)
    figure whose inputs hash the same as when it was last drawn here is not drawn again."""
    global _FORK_REPORT
    jobs: list[tuple[str, str, str, str]] = []
    seen: set[tuple[str, str]] = set()
    for p in report.pairs:
        if (p.size, p.variant_name) not in seen:
            seen.add((p.size, p.variant_name))
            jobs.append(("group", p.size, p.variant_name, str(out)))
    for size in report.sizes:
        if any(p.looped for p in report.pairs if p.size == size):
            jobs.append(("tradeoff", size, "", str(out)))
    jobs.append(("consistency", "", "", str(out)))
    try:
        cache = json.loads((out / _PLOT_CACHE).read_text(encoding="utf-8"))
        cache = cache if isinstance(cache, dict) else {}
    except (OSError, ValueError):
        cache = {}
    keys = {j: _group_key(report, j[1], j[2]) for j in jobs if j[0] == "group"}
    done: dict[tuple[str, str, str, str], list[Path]] = {}
    for j, key in keys.items():
        hit = cache.get(f"{j[1]}\t{j[2]}")
        if isinstance(hit, list) and len(hit) == 2 and hit[0] == key:
            paths = [out / str(name) for name in hit[1]]
            if all(path.is_file() for path in paths):
                done[j] = paths
    todo = [j for j in jobs if j not in done]
    n = workers if workers is not None else min(os.cpu_count() or 1, 4)
    _FORK_REPORT = report
    try:
        if n > 1 and len(todo) > 3 and "fork" in multiprocessing.get_all_start_methods():
            _plt()  # import matplotlib once, before forking
            # the report's objects are shared copy-on-write with the workers; keep the workers'
            # garbage collector from walking (and so copying) every page of them
            gc.freeze()
            try:
                with multiprocessing.get_context("fork").Pool(n) as pool:
                    nested = pool.map(_plot_job, todo, chunksize=1)
            finally:
                gc.unfreeze()
        else:
            nested = [_plot_job(j) for j in todo]
    finally:
        _FORK_REPORT = None
    done.update(zip(todo, nested, strict=True))
    new_cache = {
        f"{j[1]}\t{j[2]}": [key, [p.relative_to(out).as_posix() for p in done[j]]]
        for j, key in keys.items()
    }
    if new_cache != cache:
        try:
            write_json_atomic(out / _PLOT_CACHE, new_cache)
        except OSError:
            pass
    return [path for j in jobs for path in done[j]]


# ----------------------------------------------------------------------------------------------
# tables
# ----------------------------------------------------------------------------------------------


def comparison_rows(report: Report) -> list[dict[str, Any]]:
    """One row per pair and metric (final eval/train values, stability, cost)."""
    rows: list[dict[str, Any]] = []
    for p in report.pairs:
        base = {
            "pair_id": p.pair_id,
            "size": p.size,
            "seed": p.seed,
            "variant_name": p.variant_name,
            "valid": p.valid,
            "matched_tokens": p.matched_tokens,
        }
        for f in p.final:
            rows.append({**base, **f})
        for who, st in p.stability.items():
            rows.append(
                {
                    **base,
                    "metric": f"stability/{who} loss spikes",
                    "kind": "stability",
                    "variant": st.health.spikes if who == "variant" else None,
                    "baseline": st.health.spikes if who == "baseline" else None,
                }
            )
        sb, sv = p.stability.get("baseline"), p.stability.get("variant")
        if sb and sv:
            rows.append(
                {
                    **base,
                    "metric": "stability/max grad norm",
                    "kind": "stability",
                    "baseline": sb.health.max_grad_norm,
                    "variant": sv.health.max_grad_norm,
                }
            )
        if p.divergence is not None:
            rows.append(
                {
                    **base,
                    "metric": "stability/max EMA loss excess over baseline",
                    "kind": "stability",
                    "delta": p.divergence,
                }
            )
        for c in p.cost:
            rows.append(
                {
                    **base,
                    "metric": f"cost/{c['cost']}",
                    "kind": "cost",
                    "baseline": c["baseline"],
                    "variant": c["variant"],
                    "ratio": c["ratio"],
                    "source": c["source"],
                }
            )
    return rows


def _md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        out.append("| " + " | ".join(_fmt(x).replace("|", "\\|") for x in r) + " |")
    return "\n".join(out)


def _verdict_rows(report: Report) -> list[list[Any]]:
    rows = []
    for v in report.variant_verdicts:
        est = v.checks[0].estimate if v.checks else None
        rows.append(
            [
                v.variant,
                v.role,
                v.verdict.upper(),
                est.mean if est else None,
                est.lower if est else None,
                est.upper if est else None,
                est.n_seeds if est else 0,
                len(v.excluded_pairs),
                est.source if est else "—",
                "; ".join(c.outcome for c in v.checks) or "—",
            ]
        )
    return rows


_VERDICT_HEADER = [
    "variant",
    "role",
    "verdict",
    "improvement",
    "lower bound",
    "upper bound",
    "seeds",
    "invalid pairs",
    "noise",
    "checks",
]


def _plots_after(report: Report) -> int:
    """Plots go after the gate section(s), Pairs and Consistency, before the per-pair details."""
    return _PLOTS_AFTER + (len(report.gates) if len(report.gates) > 1 else 0)


def _sections(
    report: Report,
) -> list[tuple[str, str, list[tuple[list[str], list[list[Any]]]], list[str]]]:
    """(title, text, tables, plot names) per section, shared by the md and html renderers."""
    secs: list[tuple[str, str, list[tuple[list[str], list[list[Any]]]], list[str]]] = []
    if len(report.gates) > 1:  # one verdict per proposal: the overview first, then each gate
        secs.append(("Verdicts", GATES_TEXT, [(GATES_HEADER, gates_rows(report))], []))
        for r in report.gates:
            secs.append(
                (f"Gate {r.gate_name}", gate_text(r), [(_VERDICT_HEADER, _verdict_rows(r))], [])
            )
    else:
        secs.append(("Gate", gate_text(report), [(_VERDICT_HEADER, _verdict_rows(report))], []))
    pair_rows = []
    for p in report.pairs:
        st = p.stability.get("variant")
        pair_rows.append(
            [
                p.pair_id,
                p.size,
                p.seed,
                p.variant_name,
                "VALID" if p.valid else "INVALID",
                p.baseline.state,
                p.variant.state,
                p.matched_tokens,
                st.health.spikes if st else None,
                p.divergence,
            ]
        )
    secs.append(
        (
            "Pairs",
            "All comparisons are at matched tokens (up to the tokens both arms reached).",
            [
                (
                    [
                        "pair",
                        "size",
                        "seed",
                        "variant",
                        "certificate",
                        "baseline state",
                        "variant state",
                        "matched tokens",
                        "variant spikes",
                        "max EMA loss excess",
                    ],
                    pair_rows,
                )
            ],
            [],
        )
    )
    size_rows = [
        [
            r.variant,
            r.size,
            r.estimate.mean if r.estimate else None,
            r.estimate.lower if r.estimate else None,
            r.estimate.upper if r.estimate else None,
            r.estimate.n_seeds if r.estimate else 0,
            r.outside_noise,
        ]
        for r in report.size_rows
    ]
    cons = ", ".join(
        f"{v}: {'consistent' if c else ('not consistent' if c is False else 'n/a (one size)')}"
        for v, c in report.consistent.items()
    )
    secs.append(
        (
            "Consistency across sizes",
            f"Gate metric improvement per size (positive = variant better). {cons}",
            [
                (
                    ["variant", "size", "improvement", "lower", "upper", "seeds", "outside noise"],
                    size_rows,
                )
            ],
            [],
        )
    )
    for p in report.pairs:
        tables: list[tuple[list[str], list[list[Any]]]] = []
        tables.append(
            (
                ["metric", "tokens", "baseline", "variant", "Δ (v−b)", "relative", "better"],
                [
                    [
                        f["metric"],
                        f["tokens"],
                        f["baseline"],
                        f["variant"],
                        f["delta"],
                        f["relative"],
                        f["better"],
                    ]
                    for f in p.final
                ],
            )
        )
        stab = []
        for who, s in p.stability.items():
            stab.append(
                [
                    who,
                    s.health.state,
                    s.health.spikes,
                    s.job_spikes,
                    s.health.max_grad_norm,
                    s.health.nonfinite,
                    s.skipped_steps,
                    s.health.diverged,
                ]
            )
        tables.append(
            (
                [
                    "arm",
                    "state",
                    "loss spikes",
                    "spikes (job)",
                    "max grad norm",
                    "non-finite",
                    "skipped steps",
                    "diverged",
                ],
                stab,
            )
        )
        tables.append(
            (
                ["cost", "baseline", "variant", "ratio v/b", "source"],
                [[c["cost"], c["baseline"], c["variant"], c["ratio"], c["source"]] for c in p.cost],
            )
        )
        if p.looped:
            lrows = []
            for key, s in p.looped["sets"].items():
                for n, loss in zip(s["loops"], s["loss"], strict=False):
                    pos = (
                        "below"
                        if n < p.looped["trained_loops"]
                        else ("at" if n == p.looped["trained_loops"] else "beyond")
                    )
                    lrows.append([key, n, pos, loss, s["baseline_final"]])
                lrows.append(
                    [key, "post-horizon divergence", "", s["post_horizon_divergence"], None]
                )
            tables.append(
                (["eval set", "loops", "vs trained b", "variant loss", "baseline loss"], lrows)
            )
            if p.looped["h_norm"]:
                tables.append(
                    (["loop t", "H norm"], [[t, v] for t, v in p.looped["h_norm"].items()])
                )
        head = (
            ""
            if p.valid
            else "**INVALID PAIR — excluded from the gate:** "
            + "; ".join(p.invalid_reasons)
            + "\n\n"
        )
        notes = "; ".join(
            p.notes
            + ([f"FLOPs axis: {p.flops_label}"] if p.flops_label else [])
            + ([f"incomplete: {p.incomplete_reason}"] if p.incomplete_reason else [])
        )
        secs.append(
            (f"Pair {p.pair_id}" + ("" if p.valid else " (INVALID)"), head + notes, tables, [])
        )
    wandb = wandb_section(report.results)
    if wandb is not None:
        secs.append(wandb)
    return secs


#: Plots go after the Gate, Pairs and Consistency sections, before the per-pair details.
_PLOTS_AFTER = 3


def _issues(report: Report) -> list[str]:
    return list(report.results.issues)


def render_markdown(report: Report, plots: Sequence[Path], out: Path) -> str:
    r = report
    lines = [f"# olmoablate report: {r.results.spec_name}", ""]
    if len(r.gates) > 1:
        lines.append(
            "**Gate verdicts: "
            + "; ".join(f"{x.gate_name} {x.verdict.upper()} at {x.stage}" for x in r.gates)
            + "**"
        )
        lines += ["", _md_table(GATES_HEADER, gates_rows(r))]
    else:
        lines.append(
            f"**Gate verdict at {r.stage}: {r.verdict.upper()}**"
            + (f" (primary variant `{r.primary}`)" if r.primary else "")
        )
    lines.append("")
    for w in r.results.warnings:
        lines.append(f"> **WARNING: {w}**")
    for p in r.invalid_pairs:
        lines.append(f"> **INVALID PAIR {p.pair_id}: {'; '.join(p.invalid_reasons)}**")
    lines.append("")
    lines.append("Reasons:")
    lines.extend(f"- {gate_tag(r, g)}{line}" for g in r.gates or [r] for line in g.reasons)
    lines += ["", "Gate statistics (docs/gate-statistics.md):"]
    lines.extend(
        f"- {gate_tag(r, g)}{line}" for g in r.gates or [r] for line in statistics_lines(g)
    )
    if r.next_steps:
        lines += ["", "Next steps:", ""] + [f"    {s}" for s in r.next_steps]
    secs = _sections(r)
    for i, (title, text, tables, _) in enumerate(secs + [("", "", [], [])]):
        if i == min(_plots_after(r), len(secs)):
            lines += ["", "## Plots", ""]
            lines += [f"![{p.stem}]({p.relative_to(out).as_posix()})" for p in plots]
        if not title:
            break
        lines += ["", f"## {title}", "", text, ""]
        for header, rows in tables:
            if rows:
                lines += [_md_table(header, rows), ""]
    lines += ["", "## Data issues", ""]
    issues = _issues(r)
    lines.extend(f"- {i}" for i in issues) if issues else lines.append("none")
    return "\n".join(lines) + "\n"


def _html_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain escaped HTML table (string joins: a ladder report has hundreds of tables)."""
    e = html.escape
    head = "".join(f"<th>{e(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{e(_fmt(x))}</td>" for x in r) + "</tr>" for r in rows)
    return f"<table class='t'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: Report, plots: Sequence[Path]) -> str:
    r = report
    e = html.escape
    col = _VERDICT_COLOR.get(r.verdict, "#555")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>olmoablate report: {e(r.results.spec_name)}</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:24px;max-width:1180px}"
        "table.t{border-collapse:collapse;margin:8px 0;font-size:13px}"
        "table.t td,table.t th{border:1px solid #ccc;padding:3px 7px;text-align:left}"
        ".banner{padding:12px 16px;color:#fff;font-size:22px;font-weight:bold;border-radius:6px}"
        ".warn{background:#ffebe9;border:2px solid #cf222e;color:#82071e;padding:8px 12px;margin:6px 0;"
        "font-weight:bold}img{max-width:100%;border:1px solid #ddd;margin:6px 0}</style></head><body>",
        f"<h1>olmoablate report: {e(r.results.spec_name)}</h1>",
        f"<div class='banner' style='background:{col}'>Gate verdict at {e(r.stage)}: {e(r.verdict.upper())}"
        + (f" (primary variant {e(r.primary)})" if r.primary else "")
        + "</div>"
        if len(r.gates) <= 1
        else "<div class='banner' style='background:#444'>Gate verdicts: "
        + e("; ".join(f"{x.gate_name} {x.verdict.upper()} at {x.stage}" for x in r.gates))
        + "</div>"
        + _html_table(GATES_HEADER, gates_rows(r)),
    ]
    for w in r.results.warnings:
        parts.append(f"<div class='warn'>WARNING: {e(w)}</div>")
    for p in r.invalid_pairs:
        parts.append(
            f"<div class='warn'>INVALID PAIR {e(p.pair_id)} (excluded from the gate): {e('; '.join(p.invalid_reasons))}</div>"
        )
    gates = r.gates or [r]
    parts.append(
        "<h3>Reasons</h3><ul>"
        + "".join(f"<li>{e(gate_tag(r, g) + x)}</li>" for g in gates for x in g.reasons)
        + "</ul>"
    )
    parts.append(
        "<h3>Gate statistics</h3><ul>"
        + "".join(f"<li>{e(gate_tag(r, g) + x)}</li>" for g in gates for x in statistics_lines(g))
        + "</ul>"
    )
    if r.next_steps:
        parts.append("<h3>Next steps</h3><pre>" + e("\n".join(r.next_steps)) + "</pre>")
    secs = _sections(r)
    for i, (title, text, tables, _) in enumerate(secs + [("", "", [], [])]):
        if i == min(_plots_after(r), len(secs)):
            parts.append("<h2>Plots</h2>")
            for p in plots:
                data = base64.b64encode(p.read_bytes()).decode("ascii")
                parts.append(
                    f"<h4>{e(p.stem)}</h4><img alt='{e(p.stem)}' src='data:image/png;base64,{data}'>"
                )
        if not title:
            break
        parts.append(f"<h2>{e(title)}</h2><p>{e(text).replace('**', '')}</p>")
        for header, rows in tables:
            if rows:
                parts.append(_html_table(header, rows))
    parts.append("<h2>Data issues</h2>")
    issues = _issues(r)
    parts.append(
        "<ul>" + "".join(f"<li>{e(i)}</li>" for i in issues) + "</ul>" if issues else "<p>none</p>"
    )
    parts.append("</body></html>")
    return "\n".join(parts)


def _csv_cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return repr(v) if isinstance(v, float) else str(v)


def _csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as CSV, columns in first-seen order, empty cells for missing values and NaN (the
    csv module, not pandas: importing pandas would cost more than the whole table)."""
    import csv
    import io

    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(list(columns))
    for r in rows:
        writer.writerow([_csv_cell(r.get(c)) for c in columns])
    return buf.getvalue()


def write_all(report: Report, out: Path, formats: Sequence[str]) -> dict[str, Path]:
    """Write the requested formats (md, html, csv, json) and plots; returns name -> path."""
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    write_json_atomic(out / "gate.json", report.gate_json())
    written["json"] = out / "gate.json"
    if "csv" in formats:
        write_text_atomic(out / "comparison.csv", _csv_text(comparison_rows(report)))
        written["csv"] = out / "comparison.csv"
    plots: list[Path] = []
    if "md" in formats or "html" in formats:
        plots = make_plots(report, out / "plots")
    if "md" in formats:
        write_text_atomic(out / "report.md", render_markdown(report, plots, out))
        written["md"] = out / "report.md"
    if "html" in formats:
        write_text_atomic(out / "report.html", render_html(report, plots))
        written["html"] = out / "report.html"
    return written


def print_terminal(report: Report, written: dict[str, Path]) -> None:
    """The verdict table (rich), loud warnings, then `gate verdict: ...` and the report path."""
    from rich.table import Table

    from olmoablate.console import make_console, print_whole

    con = make_console()  # readable in CI logs too: no cut cells, no wrapped lines
    for w in report.results.warnings:
        con.print(f"[bold red]WARNING: {w}[/]")
    for p in report.invalid_pairs:
        con.print(
            f"[bold red]INVALID PAIR {p.pair_id} (excluded from the gate): {'; '.join(p.invalid_reasons)}[/]"
        )
    gates = report.gates or [report]
    for r in gates:
        title = f"{report.results.spec_name}: gate at {r.stage} ({r.results.gate['metric']})"
        if len(gates) > 1:
            title = f"{report.results.spec_name}: gate {r.gate_name} ({r.results.gate['rule']}) at {r.stage} ({r.results.gate['metric']})"
        table = Table(title=title)
        for h in _VERDICT_HEADER:
            table.add_column(h)
        for row in _verdict_rows(r):
            style = {"PROCEED": "green", "STOP": "red", "INCONCLUSIVE": "yellow"}.get(
                str(row[2]), ""
            )
            table.add_row(*[_fmt(x) for x in row], style=style)
        print_whole(con, table)
        for reason in r.reasons:
            con.print(f"  - {gate_tag(report, r)}{reason}", markup=False)
        for line in statistics_lines(r):
            con.print(f"  * {gate_tag(report, r)}{line}", markup=False)
    if report.results.issues:
        con.print(f"data issues: {len(report.results.issues)} (listed in the report)")
    for step in report.next_steps:
        con.print(f"next: {step}", markup=False)
    path = written.get("html") or written.get("md") or written.get("json")
    if len(gates) > 1:
        overview = Table(title=f"{report.results.spec_name}: one verdict per proposal")
        for h in GATES_HEADER:
            overview.add_column(h)
        for row in gates_rows(report):
            overview.add_row(*[_fmt(x) for x in row])
        print_whole(con, overview)
        shown = "; ".join(f"{r.gate_name}: {r.verdict}" for r in gates)
        con.print(f"gate verdicts: {shown} ({path})", markup=False)
    else:
        con.print(f"gate verdict: {report.verdict} ({path})", markup=False)


def metric_label(name: str) -> str:
    d = metric_direction(name)
    return f"{name} ({d} is better)" if d else name
