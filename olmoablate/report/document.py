"""The report as a document, built once: verdict cards, details, plots, data issues; and the
comparison rows.

report.md, report.html and the terminal show the same things in the same order, comparison.csv
(and ``olmoablate.results.comparisons``) the same rows: each template only formats what is built
here, so the formats cannot drift apart. Texts are plain; the templates add markup or escape.
"""

from __future__ import annotations

import base64
import csv
import functools
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmoablate.io import make_console, write_json_atomic, write_text_atomic
from olmoablate.plan.metrics import DEPTH_MARGIN_NATS
from olmoablate.plan.names import (
    COMPARISON_FILE,
    GATE_FILE,
    INCONCLUSIVE,
    PROCEED,
    REPORT_HTML_FILE,
    REPORT_MD_FILE,
    STOP,
)
from olmoablate.report.assemble import Report
from olmoablate.report.cards import Card, bounded, cards, estimate_cells
from olmoablate.report.collect import wandb_section
from olmoablate.report.depth import ArmProfile
from olmoablate.report.ladder import LadderResult
from olmoablate.report.plots import make_plots
from olmoablate.scaling import unit_word

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
        rows.extend({**base, **f} for f in p.final)
        for who, st in p.stability.items():
            spikes = st.health.spikes
            rows.append(
                {**base, "metric": f"stability/{who} loss spikes", "kind": "stability",
                 "variant": spikes if who == "variant" else None,
                 "baseline": spikes if who == "baseline" else None}
            )  # fmt: skip
        sb, sv = p.stability.get("baseline"), p.stability.get("variant")
        if sb and sv:
            rows.append(
                {**base, "metric": "stability/max grad norm", "kind": "stability",
                 "baseline": sb.health.max_grad_norm, "variant": sv.health.max_grad_norm}
            )  # fmt: skip
        if p.divergence is not None:
            rows.append(
                {**base, "metric": "stability/max EMA loss excess over baseline",
                 "kind": "stability", "delta": p.divergence}
            )  # fmt: skip
        rows.extend(
            {**base, "metric": f"cost/{c['cost']}", "kind": "cost",
             **{k: c[k] for k in ("baseline", "variant", "ratio", "source")}}
            for c in p.cost
        )  # fmt: skip
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
            f"{x.gate_name} {x.verdict_label.upper()} at {x.stage}" for x in gates
        )
    return f"Gate verdict at {report.stage}: {report.verdict_label.upper()}"


def build_document(report: Report, plots: Sequence[Path] = ()) -> Document:
    """The document of a built report and its drawn plots (``make_plots``)."""
    cs = cards(report, list(plots))
    on_cards = {c.plot for c in cs if c.plot is not None}
    secs = sections(report)
    n_ladders = sum(len(r.ladders) for r in report.gates or [report])
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
        plots_after=min(PLOTS_AFTER + n_ladders, len(secs)),
        plots=[p for p in plots if p not in on_cards],
        issues=list(report.results.issues),
    )


#: The details' table headers.
PAIRS_HEADER = [
    "pair", "size", "seed", "variant", "certificate", "baseline state", "variant state",
    "matched tokens", "variant spikes", "max EMA loss excess",
]  # fmt: skip
SIZES_HEADER = ["variant", "size", "improvement", "lower", "upper", "seeds", "outside noise"]
FINAL_KEYS = ["metric", "tokens", "baseline", "variant", "delta", "relative", "better"]
FINAL_HEADER = ["metric", "tokens", "baseline", "variant", "Δ (v−b)", "relative", "better"]
STABILITY_HEADER = [
    "arm", "state", "loss spikes", "spikes (job)", "max grad norm", "non-finite",
    "skipped steps", "diverged",
]  # fmt: skip
COST_KEYS = ["cost", "baseline", "variant", "ratio", "source"]


DEPTH_HEADER = ["size", "eval set", "arm", "seeds", "CE per layer/loop (mean over seeds)",
                f"first within {DEPTH_MARGIN_NATS:g} nats (per seed)", "Depth-Attention top source"]  # fmt: skip


def depth_section(profiles: Sequence[ArmProfile]) -> Section:
    """The effective-depth diagnostic (docs/depth.md) as a table: one row per arm."""
    rows = []
    for p in profiles:
        top = ""
        if p.da_weight:
            j, w = max(p.da_weight.items(), key=lambda kv: kv[1])
            top = f"layer {j} ({w:.2f})" if j else f"embeddings ({w:.2f})"
        rows.append(
            [p.size, p.set, p.arm, len(p.seeds), " ".join(f"{v:.3f}" for v in p.ce),
             ", ".join("n/a" if f is None else f"{p.unit} {f}" for f in p.first_within), top]
        )  # fmt: skip
    text = (
        "A diagnostic, not a gate input (no verdict reads it; docs/depth.md). CE of the model's "
        "own final norm and LM head applied to the residual stream after each layer (index 0: "
        "the embeddings; Looped OLMo: after each loop), on the held-out set at each run's last "
        "eval point, for both arms by the same code on the same batches. Compare the shapes: "
        "arms with different output norms (SiameseNorm's merge) read out differently, and a "
        "high early CE may be a change of basis rather than missing computation."
    )
    return ("Effective depth (diagnostic)", text, [(DEPTH_HEADER, rows)])


def sections(report: Report) -> list[Section]:
    """The details below the cards: (title, text, tables) per section."""
    pair_rows = []
    for p in report.pairs:
        st = p.stability.get("variant")
        pair_rows.append(
            [p.pair_id, p.size, p.seed, p.variant_name, "VALID" if p.valid else "INVALID",
             p.baseline.state, p.variant.state, p.matched_tokens,
             st.health.spikes if st else None, p.divergence]
        )  # fmt: skip
    secs: list[Section] = [
        (
            "Pairs",
            "All comparisons are at matched tokens (up to the tokens both arms reached).",
            [(PAIRS_HEADER, pair_rows)],
        )
    ]
    size_rows = [
        [r.variant, r.size, *estimate_cells(r.estimate), r.outside_noise]
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
            [(SIZES_HEADER, size_rows)],
        )
    )
    for r in report.gates or [report]:
        secs.extend(ladder_section(r.gate_name, lad) for lad in r.ladders.values())
    if report.depth:
        secs.append(depth_section(report.depth))
    for p in report.pairs:
        stab = [
            [who, s.health.state, s.health.spikes, s.job_spikes, s.health.max_grad_norm,
             s.health.nonfinite, s.skipped_steps, s.health.diverged]
            for who, s in p.stability.items()
        ]  # fmt: skip
        tables: list[Table] = [
            (FINAL_HEADER, [[f[k] for k in FINAL_KEYS] for f in p.final]),
            (STABILITY_HEADER, stab),
            (["cost", "baseline", "variant", "ratio v/b", "source"],
             [[c[k] for k in COST_KEYS] for c in p.cost]),
        ]  # fmt: skip
        if p.looped:
            lrows = []
            b = p.looped["trained_loops"]
            for key, s in p.looped["sets"].items():
                for n, loss in zip(s["loops"], s["loss"], strict=False):
                    pos = "below" if n < b else ("at" if n == b else "beyond")
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


def _cell(iv: Any) -> str:
    return "undefined" if iv is None else bounded(iv)


def ladder_section(gate: str, lad: LadderResult) -> Section:
    """A multiplier gate's ladder: the rungs (each seed's loss averaged, the multiplier in every
    unit), the projections, the lack-of-fit tests and, where results exist, the projections
    checked at the targets. Bounds are one-sided ``confidence`` bounds."""
    units = list(lad.fits)
    words = [f"{unit_word(u)} x" for u in units]
    by_unit = {u: {r.size: r.multiplier for r in f.rungs} for u, f in lad.fits.items()}
    rungs = [
        [r.size, r.flops_b, r.flops_v, len(r.loss_v), sum(r.loss_b.values()) / len(r.loss_b),
         sum(r.loss_v.values()) / len(r.loss_v),
         *(_cell(by_unit[u].get(r.size)) for u in units)]
        for r in lad.rungs
    ]  # fmt: skip
    proj = {u: {p.size: p.multiplier for p in f.projections} for u, f in lad.fits.items()}
    targets = [
        [t.size, t.flops_v, *(_cell(proj[u].get(t.size)) if not lad.fits[u].refused
                              else "refused" for u in units)]
        for t in lad.targets
    ]  # fmt: skip
    lof = [
        [u, t.name, t.statistic, t.dof, t.dof_denominator, t.p, t.rejects]
        for u, f in lad.fits.items()
        for t in f.lack_of_fit
    ]
    track = [
        [c.size, c.seeds, c.realized, c.projected, c.lower, c.upper, c.inside, c.baseline_loss,
         c.baseline_predicted]
        for c in lad.checks
    ]  # fmt: skip
    conf = f"one-sided {lad.confidence:.0%}"
    text = [
        f"Gate unit: {lad.unit}; min_multiplier {lad.min_multiplier:g}; bounds are {conf} "
        f"bounds. Decision: {lad.line}",
        *(f"Projection refused ({u}): {f.refused}" for u, f in lad.fits.items() if f.refused),
        *(f"Left out: {x}" for x in lad.left_out),
        *(f"Dropped: {x}" for x in lad.dropped),
    ]
    tables: list[Table] = [
        (["rung", "baseline FLOPs", "variant FLOPs", "seeds", "baseline loss", "variant loss",
          *words], rungs),
        (["target", "variant FLOPs", *(f"projected {w}" for w in words)], targets),
        (["unit", "lack-of-fit test", "F", "dof", "denominator dof", "p", "rejects"], lof),
        (["checked at", "seeds", "realized x", "projected x", "lower", "upper", "inside",
          "baseline loss", "law's baseline loss"], track),
    ]  # fmt: skip
    return (f"Ladder: {gate} ({lad.variant})", " ".join(text), tables)


VERDICT_COLOR = {PROCEED: "#1a7f37", STOP: "#cf222e", INCONCLUSIVE: "#9a6700"}
VERDICT_STYLE = {PROCEED: "bold green", STOP: "bold red", INCONCLUSIVE: "bold yellow"}


def _md_cell(v: Any) -> str:
    return fmt(v).replace("|", "\\|").replace("\n", " ")


def _b64(path: Path) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _rich(text: Any) -> str:
    from rich.markup import escape

    return escape(str(text))


@functools.cache
def environment(kind: str) -> Any:
    """The environment for ``kind``: one template per format under templates/, so markup stays
    out of what is said ("html" autoescapes; "md" and "text" escape with their own filters)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("olmoablate.report", "templates"),
        autoescape=kind == "html",
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        fmt=fmt,
        md_cell=_md_cell,
        b64=_b64,
        rich=_rich,
        color=lambda v: VERDICT_COLOR.get(str(v), "#555"),
        style=lambda v: VERDICT_STYLE.get(str(v), "bold"),
    )
    return env


def render(template: str, **context: Any) -> str:
    kind = "html" if template.endswith(".html.j2") else ("md" if ".md." in template else "text")
    return environment(kind).get_template(template).render(**context)


#: The terminal block's width: it fits a 100-column terminal or CI log.
TERMINAL_WIDTH = 100


def _doc(report: Report | Document, plots: Sequence[Path]) -> Document:
    return report if isinstance(report, Document) else build_document(report, plots)


def render_markdown(report: Report | Document, plots: Sequence[Path], out: Path) -> str:
    """report.md (plots linked relative to ``out``)."""
    doc = _doc(report, plots)
    text = render("report.md.j2", doc=doc, rel=lambda p: Path(p).relative_to(out).as_posix())
    text = "\n".join(line.rstrip() for line in text.strip().splitlines())
    return re.sub(r"\n{3,}", "\n\n", text) + "\n"  # one blank line between blocks


def render_html(report: Report | Document, plots: Sequence[Path]) -> str:
    """report.html, self-contained: every plot embedded as a base64 PNG (nothing to fetch: read
    offline and in air-gapped clusters)."""
    return render("report.html.j2", doc=_doc(report, plots))


def render_terminal(report: Report | Document, width: int = TERMINAL_WIDTH) -> str:
    """The terminal block (rich markup; every value escaped): cards, warnings, next steps."""
    return render("terminal.txt.j2", doc=_doc(report, []), width=width).rstrip("\n")


def _csv_cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return repr(v) if isinstance(v, float) else str(v)


def _csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as CSV, columns in first-seen order, empty cells for missing values and NaN (the
    csv module, not pandas: importing pandas would cost more than the whole table)."""
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
    write_json_atomic(out / GATE_FILE, report.gate_json())
    written["json"] = out / GATE_FILE
    if "csv" in formats:
        write_text_atomic(out / COMPARISON_FILE, _csv_text(comparison_rows(report)))
        written["csv"] = out / COMPARISON_FILE
    if "md" in formats or "html" in formats:
        doc = build_document(report, make_plots(report, out / "plots"))  # built once, for both
        if "md" in formats:
            write_text_atomic(out / REPORT_MD_FILE, render_markdown(doc, doc.plots, out))
            written["md"] = out / REPORT_MD_FILE
        if "html" in formats:
            write_text_atomic(out / REPORT_HTML_FILE, render_html(doc, doc.plots))
            written["html"] = out / REPORT_HTML_FILE
    return written


def print_terminal(report: Report, written: dict[str, Path]) -> None:
    """The compact verdict block, then `gate verdict(s): ...` and the report's path (last)."""
    con = make_console()  # readable in CI logs too: the template wraps, rich does not
    con.print(render_terminal(report))
    path = written.get("html") or written.get("md") or written.get("json")
    gates = report.gates or [report]
    if len(gates) > 1:
        shown = "; ".join(f"{r.gate_name}: {r.verdict_label}" for r in gates)
        con.print(f"gate verdicts: {shown} ({path})", markup=False)
    else:
        con.print(f"gate verdict: {report.verdict_label} ({path})", markup=False)
