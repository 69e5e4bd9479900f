"""The report as a document, built once: verdict cards, then the details (sections of title,
text and tables), the plots and the data issues; and the comparison rows.

Why a document model apart from the writers: report.md, report.html and the terminal show the
same cards, tables and lines in the same order, and comparison.csv (and
``olmoablate.results.comparisons``) the same rows; each template (``templates/``) only formats
what is built here, so the formats cannot drift apart. Every text here is plain (no markdown):
the markdown template adds the markup, the HTML one escapes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmoablate.report.build import Report
from olmoablate.report.read.links import wandb_section
from olmoablate.report.render.cards import Card, cards

#: One table: (header, rows).
Table = tuple[list[str], list[list[Any]]]
#: One section: (title, text, tables).
Section = tuple[str, str, list[Table]]


def fmt(v: Any, digits: int = 4) -> str:
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


#: Plots go after the Pairs and Consistency sections, before the per-pair details.
PLOTS_AFTER = 2


@dataclass(frozen=True)
class Document:
    """Everything a reader sees, in order, as plain data."""

    spec_name: str
    #: "Gate verdict at 1B: PROCEED" or "Gate verdicts: a PROCEED at 1B; b STOP at 1B"
    headline: str
    #: the gate's primary variant (one gate only)
    primary: str | None
    #: the one gate's verdict (the banner's colour); "" with several gates
    verdict: str
    warnings: list[str]
    invalid: list[str]
    cards: list[Card]
    eval_lines: list[str]
    next_steps: list[str]
    sections: list[Section]
    plots_after: int
    #: the plots not on a card, in the order drawn
    plots: list[Path]
    issues: list[str]


def headline(report: Report) -> str:
    gates = report.gates or [report]
    if len(gates) > 1:
        return "Gate verdicts: " + "; ".join(
            f"{x.gate_name} {x.verdict.upper()} at {x.stage}" for x in gates
        )
    return f"Gate verdict at {report.stage}: {report.verdict.upper()}"


def build_document(report: Report, plots: Sequence[Path] = ()) -> Document:
    """The document of a built report and its drawn plots (``make_plots``)."""
    cs = cards(report, list(plots))
    on_cards = {c.plot for c in cs if c.plot is not None}
    secs = sections(report)
    return Document(
        spec_name=report.results.spec_name,
        headline=headline(report),
        primary=report.primary if len(report.gates) <= 1 else None,
        verdict=report.verdict if len(report.gates) <= 1 else "",
        warnings=list(report.results.warnings),
        invalid=[
            f"INVALID PAIR {p.pair_id} (excluded from the gate): {'; '.join(p.invalid_reasons)}"
            for p in report.invalid_pairs
        ],
        cards=cs,
        eval_lines=list(report.eval_lines),
        next_steps=list(report.next_steps),
        sections=secs,
        plots_after=min(PLOTS_AFTER, len(secs)),
        plots=[p for p in plots if p not in on_cards],
        issues=data_issues(report),
    )


def sections(
    report: Report,
) -> list[Section]:
    """The details below the cards: (title, text, tables) per section."""
    secs: list[Section] = []
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
        )
    )
    for p in report.pairs:
        tables: list[Table] = []
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
            else "INVALID PAIR, excluded from the gate: " + "; ".join(p.invalid_reasons) + ". "
        )
        notes = "; ".join(
            p.notes
            + ([f"FLOPs axis: {p.flops_label}"] if p.flops_label else [])
            + ([f"incomplete: {p.incomplete_reason}"] if p.incomplete_reason else [])
        )
        secs.append((f"Pair {p.pair_id}" + ("" if p.valid else " (INVALID)"), head + notes, tables))
    wandb = wandb_section(report.results)
    if wandb is not None:
        secs.append(wandb)
    return secs


def data_issues(report: Report) -> list[str]:
    return list(report.results.issues)
