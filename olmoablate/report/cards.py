"""One verdict card per proposal (gate): the verdict, the effect with its interval, the deciding
reason in one sentence and the paired-delta plot, as plain data for every renderer; the full
reasons, statistics and per-variant table follow in the gate's details.
"""

from __future__ import annotations

import functools
import hashlib
import io
import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmoablate.io import write_bytes_atomic
from olmoablate.plan.names import STOP
from olmoablate.report.assemble import Report
from olmoablate.report.ladder import LadderResult
from olmoablate.report.noise import Estimate
from olmoablate.report.sequential import SequentialResult
from olmoablate.report.verdict import VariantVerdict
from olmoablate.scaling import unit_word


def statistics_lines(report: Report) -> list[str]:
    """The gate's statistics in words, one line per fact, for every renderer (noise source, seeds
    needed, Holm, the overhead interval: what makes a verdict checkable)."""
    out: list[str] = []
    if report.results.prereg_broken:
        out.append(report.results.prereg_broken)
    if report.family_note:
        out.append(report.family_note)
    for v in report.variant_verdicts:
        tag = f"[{v.variant}, {v.role}]"
        if v.noise:
            out.append(f"{tag} {v.noise}")
        if v.checks and v.checks[0].seeds_line:
            out.append(f"{tag} {v.checks[0].seeds_line}")
        if v.step_time is not None:
            out.append(f"{tag} {v.step_time.reason}")
        if v.jitter:
            out.append(f"{tag} {v.jitter}")
        out.extend(f"{tag} {n}" for n in dict.fromkeys(v.notes))
    for variant, res in report.sequential.items():
        out.extend(f"[{variant}] {line}" for line in look_lines(res))
    for variant, lad in report.ladders.items():
        out.extend(f"[{variant}] {line}" for line in ladder_lines(lad))
    fac = report.factorial
    if fac is not None:
        arms = ", ".join(f"{k} = {v}" for k, v in fac.arms.items())
        out.append(f"factorial arms: {arms}; improvements over each seed's shared baseline run")
        for i, seed in enumerate(fac.seeds):
            d = {k: fac.improvements[k][i] for k in ("A", "B", "AB")}
            out.append(
                f"seed {seed}: d_A {d['A']:+.4g}, d_B {d['B']:+.4g}, d_AB {d['AB']:+.4g}; "
                f"interaction {fac.interaction.per_seed[i]:+.4g}"
            )
    src = report.noise
    if src is not None and src.runs:
        vals = ", ".join(f"{r} {v:.4g}" for r, v in zip(src.runs, src.run_values, strict=True))
        out.append(f"A/A baselines at matched tokens (last_n mean of the gate metric): {vals}")
    out.extend(report.noise_notes)
    return out


def look_lines(res: SequentialResult) -> list[str]:
    """The sequential design's look history: one line per look, then the flags and savings."""
    out = []
    for lk in res.looks:
        est = (
            f"; improvement {lk.mean:+.4g}, bounds [{lk.lower:+.4g}, {lk.upper:+.4g}]"
            if lk.mean is not None and lk.lower is not None and lk.upper is not None
            else ""
        )
        out.append(
            f"look {lk.index} of {lk.of} ({lk.kind}, {lk.fraction:.0%} of tokens, {lk.seeds} "
            f"seed(s)): {lk.decision}; boundary: {lk.boundary}{est}"
            + (f"; {lk.note}" if lk.note else "")
        )
    out.extend(res.flags)
    if res.gpu_hours_saved:
        out.append(f"{res.status_line}: {res.gpu_hours_saved:.4g} GPU-hours of variant arms saved")
    return out


def times(m: float | None) -> str:
    """A multiplier as ``1.12x`` (``inf``/``n/a`` where unbounded or undefined)."""
    if m is None or math.isnan(m):
        return "n/a"
    if math.isinf(m):
        return "inf"
    return f"{m:.2f}x" if 0.1 <= m < 10 else f"{m:.3g}x"


def bounds(iv: Any) -> str:
    """An interval's bounds as ``[1.05, 1.19]``."""
    return f"[{times(iv.lower).rstrip('x')}, {times(iv.upper).rstrip('x')}]"


def bounded(iv: Any) -> str:
    """``1.12x [1.05, 1.19]``."""
    return f"{times(iv.estimate)} {bounds(iv)}"


def ladder_sentence(lad: LadderResult, verdict: str) -> str:
    """The card's sentence: the largest rung's multiplier and each target's projection, in the
    gate's unit, with one-sided bounds: ``worth 1.12x compute [1.05, 1.19] at 760M; projected
    1.08x [0.98, 1.17] at 7B: inconclusive (one-sided 95% bounds)``."""
    word = unit_word(lad.unit)
    fit = lad.fit
    defined = [r for r in fit.rungs if r.multiplier is not None]
    if defined:
        top = max(defined, key=lambda r: r.flops_v)
        m = top.multiplier
        parts = [f"worth {times(m.estimate)} {word} {bounds(m)} at {top.size}"]
    else:
        why = next((r.why_undefined for r in fit.rungs if r.why_undefined), "")
        parts = [f"no {word} multiplier at any rung" + (f" ({why})" if why else "")]
    if fit.refused:
        parts.append(f"projection refused: {fit.refused}")
    elif fit.projections:
        shown = ", ".join(f"{bounded(p.multiplier)} at {p.size}" for p in fit.projections)
        parts.append(f"projected {shown}")
    return f"{'; '.join(parts)}: {verdict} (one-sided {lad.confidence:.0%} bounds)"


def factorial_sentence(r: Report) -> str:
    """A complementary gate's effect line: the factorial word, the interaction and both margins
    with their one-sided bounds ("" for any other gate)."""
    f = r.factorial
    if f is None:
        return ""
    c = f"{f.confidence:.0%}"
    parts = [
        f"{k.name} {k.mean:+.4g} [{_b(k.lower)}, {_b(k.upper)}]"
        for k in (f.interaction, f.margin_a, f.margin_b)
    ]
    return f"factorial {f.verdict.upper()}: {', '.join(parts)} (one-sided {c}), {len(f.seeds)} seeds"


def _b(x: float) -> str:
    return f"{x:+.4g}" if math.isfinite(x) else ("+inf" if x > 0 else "-inf")


def ladder_sizes(r: Report) -> list[str]:
    """The rung sizes of a multiplier gate's report (as the plan lists them)."""
    entry = r.results.plan.gate_entry()
    ladder = getattr(entry, "ladder", None)
    return [str(x) for x in getattr(ladder, "rungs", None) or r.results.gate.rungs]


def _p(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.3g}"


def ladder_lines(lad: LadderResult) -> list[str]:
    """A ladder's statistics in words: the law, gamma, the lack-of-fit tests, the noise and the
    other units' projections (shown, not decided on)."""
    fit = lad.fit
    conf = f"one-sided {lad.confidence:.0%}"
    out = []
    if fit.law is not None:
        law = fit.law
        out.append(
            f"baseline law L(C) = {law.E:.4g} + {law.A:.4g} * C^-{law.alpha:.4g} (C in training "
            f"FLOPs), fitted on {len(lad.rungs)} rung(s) with every seed of both arms"
        )
    if fit.gamma is not None:
        g = fit.gamma
        trend = "grows" if g.lower > 0 else ("shrinks" if g.upper < 0 else "may grow or shrink")
        out.append(
            f"trend of the multiplier with scale: gamma {g.estimate:+.3g} ({conf} bounds "
            f"[{g.lower:+.3g}, {g.upper:+.3g}], {g.dof:.3g} dof): the gain {trend} with compute"
        )
    for t in fit.lack_of_fit:
        if not t.dof:
            out.append(f"lack of fit, {t.name}: not testable ({t.why_untestable})")
            continue
        res = "rejects the model" if t.rejects else "no evidence against the model"
        test = f"F {t.statistic:.3g} on ({t.dof}, {t.dof_denominator:.3g}) dof, p {_p(t.p)}"
        out.append(f"lack of fit, {t.name}: {test}: {res}")
    if fit.sd_delta is not None:
        out.append(
            f"seed noise: sd of the paired difference {fit.sd_delta:.3g}, of the pair's mean "
            f"{fit.sd_mean if fit.sd_mean is not None else math.nan:.3g} ({fit.noise_source})"
        )
    for unit, other in lad.fits.items():
        if unit == lad.unit or not other.projections or other.refused:
            continue
        shown = ", ".join(f"{bounded(p.multiplier)} at {p.size}" for p in other.projections)
        out.append(f"in {unit_word(unit)} (shown, not decided on): projected {shown}")
    return out


def gate_text(report: Report) -> str:
    """The gate's settings in one plain sentence (no markup: every renderer formats it)."""
    g = report.results.gate
    bar = f"min_effect {g.min_effect}"
    variant = g.variant or "(all)"
    if report.ladders:  # a multiplier gate: its bar, unit and targets
        bar = f"min_multiplier {g.min_multiplier} in {g.unit} at {', '.join(g.targets)}"
    if g.rule == "complementary" and g.of:  # a factorial gate: its arms and tolerance
        variant = f"{g.combined} (AB; A = {g.of[0]}, B = {g.of[1]})"
        bar = f"tolerance {g.tolerance}"
    txt = (
        f"Variant {variant}, stage {report.stage}, rule {g.rule}, "
        f"metric {g.metric} ({g.direction} is better), {bar}, "
        f"confidence {g.confidence}, last_n {g.last_n}"
        + (f", reference {g.reference}" if g.reference else "")
        + f"; pre-registered (sha256 {str(report.results.plan.gate_sha256)[:12]})."
    )
    if report.notes:
        txt += " " + " ".join(f"{n}." for n in report.notes)
    return txt


def estimate_cells(est: Any) -> list[Any]:
    """A check's estimate as a table's four number cells: effect, bounds, seeds (0 for none)."""
    if est is None:
        return [None, None, None, 0]
    return [est.mean, est.lower, est.upper, est.n_seeds]


#: The per-variant table of a gate's details.
VERDICT_HEADER = [
    "variant", "role", "verdict", "improvement", "lower bound", "upper bound", "seeds",
    "invalid pairs", "noise", "checks",
]  # fmt: skip


@dataclass(frozen=True)
class Card:
    """One gate's verdict at a glance, and its details."""

    name: str
    variant: str
    rule: str
    metric: str
    stage: str
    verdict: str
    effect: float | None
    lower: float | None
    upper: float | None
    seeds: int
    confidence: float
    #: the deciding reason, one sentence
    reason: str
    #: the paired-delta plot (``plots/gate__<name>.png``), when drawn
    plot: Path | None
    #: details: the gate's settings in words, every reason, the statistics, the variant table
    description: str
    reasons: list[str]
    statistics: list[str]
    table: tuple[list[str], list[list[Any]]]
    #: a multiplier gate's sentence (:func:`ladder_sentence`), shown in place of the effect
    sentence: str = ""
    #: what the effect is measured against: the baseline, or a quality_per_param gate's reference
    against: str = "baseline"

    @property
    def title(self) -> str:
        """``Gate`` for the unnamed gate of a ``gate:`` spec."""
        return "Gate" if self.name == "gate" else self.name

    @property
    def details_title(self) -> str:
        return "Gate" if self.name == "gate" else f"Gate {self.name}"

    @property
    def effect_text(self) -> str:
        """``+0.21, one-sided 95% interval [+0.12, +0.30], 2 seeds`` (or why there is none);
        a multiplier gate's sentence."""
        if self.sentence:
            return self.sentence
        if self.effect is None:
            return "no estimate (no valid pair with the gate metric)"
        lo = "-inf" if self.lower is None else f"{self.lower:+.4g}"
        hi = "+inf" if self.upper is None else f"{self.upper:+.4g}"
        return (
            f"{self.effect:+.4g}, one-sided {self.confidence:.0%} interval [{lo}, {hi}], "
            f"{self.seeds} seed{'s' if self.seeds != 1 else ''}"
        )

    @property
    def comparison(self) -> str:
        """``sn_da vs baseline at 1B, rule quality, metric eval/lm/x/CE loss``."""
        return (
            f"{self.variant} vs {self.against} at {self.stage}, rule {self.rule}, "
            f"metric {self.metric}"
        )


def headline_variant(r: Report) -> VariantVerdict | None:
    """The verdict that decides the gate: its ``gate.variant``, else the first gated one."""
    g = r.results.gate
    return next(
        (x for x in r.variant_verdicts if x.variant == g.variant),
        r.variant_verdicts[0] if r.variant_verdicts else None,
    )


_BOUNDS = re.compile(r"\s*\((?:one-sided|two-sided)[^()]*(?:\([^()]*\)[^()]*)*\)")


def one_sentence(reason: str) -> str:
    """A reason without its bounds in parentheses (the card shows them) and cut at its first
    clause: ``vs baseline: improvement +0.21 > min_effect 0.01.``"""
    text = _BOUNDS.sub("", reason).split("; ")[0].strip()
    text = re.sub(r"^\[[^\]]+\]\s*", "", text)  # the verdict's own [variant] tag
    return text if not text or text.endswith(".") else text + "."


def deciding_reason(r: Report, v: VariantVerdict | None) -> str:
    """What decided: a broken pre-registration, else the variant's first stop, blocker or the
    first quality check that did not pass (its first check when all passed)."""
    if r.results.prereg_broken or v is None:
        return one_sentence(r.reasons[0]) if r.reasons else "no reason recorded."
    if v.stops:
        if any(c.outcome == STOP for c in v.checks):  # quality stops too: its line decides
            return one_sentence(v.stops[0])
        # a cost limit alone decides: say so, and what quality said (often: nothing yet)
        quality = (
            "not estimated"
            if not v.checks
            else "passed"
            if all(c.outcome == "pass" for c in v.checks)
            else "undecided"
        )
        return f"stop on cost alone: {one_sentence(v.stops[0]).rstrip('.')}; quality {quality}."
    if v.blockers:
        return one_sentence(v.blockers[0])
    failing = [c for c in v.checks if c.outcome != "pass"]
    chk = (failing or v.checks or [None])[0]
    if chk is not None and r.ladders:  # the card's sentence has the projections: say the test
        head, sep, how = chk.reason.rpartition("): ")
        return one_sentence(how if sep and head.startswith("projected") else chk.reason)
    if chk is not None:
        return one_sentence(chk.reason)
    return one_sentence(v.reasons[0]) if v.reasons else "no reason recorded."


def verdict_rows(report: Report) -> list[list[Any]]:
    rows = []
    for v in report.variant_verdicts:
        est = v.checks[0].estimate if v.checks else None
        cells = estimate_cells(est)
        noise = est.source if est else "—"
        if report.factorial is not None:  # its numbers are the contrasts (the card, statistics)
            cells[3], noise = len(report.factorial.seeds), "paired seeds (per-seed contrasts)"
        rows.append(
            [v.variant, v.role, v.verdict.upper(), *cells, len(v.excluded_pairs), noise,
             "; ".join(c.outcome for c in v.checks) or "—"]
        )  # fmt: skip
    return rows


def card_plot_name(gate_name: str) -> str:
    return f"gate__{safe_name(gate_name)}.png"


def cards(report: Report, plots: list[Path] | tuple[Path, ...] = ()) -> list[Card]:
    """One card per gate (``report.gates``; the report itself for a one-gate spec)."""
    by_name = {p.name: p for p in plots}
    out = []
    for r in report.gates or [report]:
        g = r.results.gate
        v = headline_variant(r)
        est = v.checks[0].estimate if v is not None and v.checks else None
        effect, lower, upper, seeds = estimate_cells(est)
        variant = v.variant if v is not None else (g.variant or "(none)")
        lad = r.ladders.get(variant)
        stage = r.stage if lad is None else "the rungs " + ", ".join(ladder_sizes(r))
        out.append(
            Card(
                r.gate_name, variant, g.rule, g.metric, stage, r.verdict, effect, lower, upper,
                seeds, g.confidence, deciding_reason(r, v),
                by_name.get(card_plot_name(r.gate_name)), gate_text(r), list(r.reasons),
                statistics_lines(r), (VERDICT_HEADER, verdict_rows(r)),
                ladder_sentence(lad, v.verdict if v else r.verdict) if lad is not None
                else factorial_sentence(r),
                f"reference {g.reference}" if g.rule == "quality_per_param" and g.reference
                else f"{g.of[0]}, {g.of[1]} and baseline (factorial)"
                if g.rule == "complementary" and g.of
                else "baseline",
            )
        )  # fmt: skip
    return out


# Matplotlib (Agg) set-up and the PNG writer shared by the report's figures.
def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path, dpi: int = 72) -> Path:
    buf = io.BytesIO()
    # zlib level 1: a few % larger PNGs, several times less encoding time
    fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
    pyplot().close(fig)
    write_bytes_atomic(path, buf.getvalue())
    return path


def token_axes(ax: Any, label: str, **label_kw: Any) -> None:
    """A tokens x axis (engineering notation), ~5 ticks per axis (every tick is three artists
    to draw: mark, grid line, label) and a light grid."""
    from matplotlib.ticker import EngFormatter, MaxNLocator

    ax.set_xlabel(label, **label_kw)
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.yaxis.set_major_locator(MaxNLocator(5))
    ax.grid(alpha=0.3)


@functools.cache
def _drawing_code(module_file: str) -> bytes:
    import matplotlib

    return (
        Path(module_file).read_bytes()
        + Path(__file__).read_bytes()  # the PNG writer's settings
        + matplotlib.__version__.encode()
    )


def figure_hash(module_file: str) -> Any:
    """A sha256 fed with what draws a figure (the drawing module's source, this module's, the
    matplotlib version); the plot cache adds the figure's data: equal keys, equal figures."""
    return hashlib.sha256(_drawing_code(module_file))


def _vs_baseline(v: VariantVerdict) -> Estimate | None:
    """The estimate of the check against the baseline (not the reference's)."""
    return next((c.estimate for c in v.checks if "reference" not in c.name), None)


@dataclass(frozen=True)
class CardSeries:
    """What a gate card's plot draws: the comparison its verdict decides (variant vs baseline;
    quality_per_param: variant vs the parameter-matched reference, its first check), each seed's
    tail of paired improvements, that check's estimate and its bar."""

    title: str
    #: (seed, tokens, improvements, how many of the last points the gate averages)
    seeds: list[tuple[int, list[float], list[float], int]]
    estimate: Estimate | None
    bar: float
    bar_label: str


def card_series(r: Report) -> CardSeries | None:
    """The plotted comparison of one gate (None without evidence to draw). Why not always vs
    the baseline: a quality_per_param verdict is decided against the reference first, and a plot
    of "variant - baseline" (often positive) under a STOP decided against the reference (often
    negative) shows the reader the wrong number."""
    v = headline_variant(r)
    if v is None:
        return None
    g = r.results.gate
    valid = [e for e in r.evidence.get(v.variant, []) if e.valid]
    if g.rule == "quality_per_param" and g.reference:
        ref = next((c for c in v.checks if "reference" in c.name), None)
        seeds = [
            (e.seed, e.reference_series_x, e.reference_series, len(e.reference_improvement or []))
            for e in valid
            if e.reference_series
        ]
        title = (
            f"{v.variant} − reference {g.reference} (parameter-matched, what the verdict "
            f"decides): paired improvement in {g.metric}"
        )
        est, bar, bar_label = (ref.estimate if ref else None), g.min_effect, ""
    else:
        seeds = [(e.seed, e.series_x, e.series, len(e.improvement)) for e in valid if e.series]
        title = f"{v.variant} − baseline: paired improvement in {g.metric}"
        est, bar, bar_label = _vs_baseline(v), g.min_effect, ""
    if not seeds:
        return None
    return CardSeries(title, seeds, est, bar, bar_label or f"min_effect {g.min_effect:g}")


def card_key(r: Report) -> str:
    """Hash of everything :func:`plot_card` draws for one gate (the plot cache's key)."""
    h = figure_hash(__file__)
    cs = card_series(r)
    head: list[Any] = [r.gate_name]
    if cs is not None:
        est = cs.estimate
        head += [cs.title, cs.bar, cs.bar_label, cs.seeds]
        head.append([est.mean, est.lower, est.upper] if est is not None else None)
    h.update(json.dumps(head, default=repr).encode())
    return h.hexdigest()


def plot_card(r: Report, out: Path) -> Path | None:
    """``plots/gate__<name>.png`` for one gate's report (None without evidence to draw): each
    seed's improvement at matched tokens in the comparison the verdict decides
    (:func:`card_series`), the interval and the bar, so a reader sees whether the seeds agree,
    the curve has settled, and how far the bar is."""
    cs = card_series(r)
    if cs is None:
        return None
    est = cs.estimate
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for (seed, xs, ys, n), c in zip(cs.seeds, itertools.cycle(colors)):
        ax.plot(xs, ys, "o-", color=c, ms=3, lw=1.2, label=f"seed {seed}")
        if n:
            ax.plot(xs[-n:], ys[-n:], "o", color=c, ms=6, mfc="none")
    if est is not None and math.isfinite(est.mean):
        x0, x1 = min(s[1][0] for s in cs.seeds), max(s[1][-1] for s in cs.seeds)
        label = "mean"
        if math.isfinite(est.lower) and math.isfinite(est.upper):  # one seed: no interval
            ax.axhspan(est.lower, est.upper, color="#1f6feb", alpha=0.12, lw=0)
            label = "mean, one-sided interval"
        ax.hlines(est.mean, x0, x1, color="#1f6feb", lw=1.5, label=label)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.axhline(cs.bar, color="#cf222e", ls="--", lw=1, label=cs.bar_label)
    ax.set_title(cs.title, fontsize=8 if len(cs.title) > 80 else 9)
    token_axes(ax, "tokens (circled: the last_n points the gate averages)", fontsize=8)
    ax.set_ylabel("improvement (+ = better)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="best")
    fig.subplots_adjust(left=0.13, right=0.98, bottom=0.17, top=0.88)
    return save_png(fig, out / card_plot_name(r.gate_name), dpi=100)  # 640 px: the card's width
