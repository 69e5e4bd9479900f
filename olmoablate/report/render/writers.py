"""Write a built report: report.md, self-contained report.html, comparison.csv and gate.json,
plus the terminal verdict table.

Why self-contained HTML: results are read on laptops, in air-gapped clusters, attached to issues.
Every plot is embedded as a base64 PNG and there is no script, font or stylesheet to fetch.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from olmoablate.io import write_json_atomic, write_text_atomic
from olmoablate.report.build import Report
from olmoablate.report.render.document import (
    VERDICT_HEADER,
    comparison_rows,
    data_issues,
    fmt,
    plots_after,
    sections,
    verdict_rows,
)
from olmoablate.report.render.gate_text import GATES_HEADER, gate_tag, gates_rows, statistics_lines
from olmoablate.report.render.plots import make_plots

_VERDICT_COLOR = {"proceed": "#1a7f37", "stop": "#cf222e", "inconclusive": "#9a6700"}


def _md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        out.append("| " + " | ".join(fmt(x).replace("|", "\\|") for x in r) + " |")
    return "\n".join(out)


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
    if r.eval_lines:
        lines += [
            "",
            "Held-out evaluation (tokens scored per eval point; CE vs unigram entropy):",
            "",
        ]
        lines.extend(f"- {x}" for x in r.eval_lines)
    if r.next_steps:
        lines += ["", "Next steps:", ""] + [f"    {s}" for s in r.next_steps]
    secs = sections(r)
    for i, (title, text, tables) in enumerate([*secs, ("", "", [])]):
        if i == min(plots_after(r), len(secs)):
            lines += ["", "## Plots", ""]
            lines += [f"![{p.stem}]({p.relative_to(out).as_posix()})" for p in plots]
        if not title:
            break
        lines += ["", f"## {title}", "", text, ""]
        for header, rows in tables:
            if rows:
                lines += [_md_table(header, rows), ""]
    lines += ["", "## Data issues", ""]
    found = data_issues(r)
    lines.extend(f"- {i}" for i in found) if found else lines.append("none")
    return "\n".join(lines) + "\n"


def _html_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain escaped HTML table (string joins: a ladder report has hundreds of tables)."""
    e = html.escape
    head = "".join(f"<th>{e(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{e(fmt(x))}</td>" for x in r) + "</tr>" for r in rows)
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
    if r.eval_lines:
        parts.append(
            "<h3>Held-out evaluation</h3><ul>"
            + "".join(f"<li>{e(x)}</li>" for x in r.eval_lines)
            + "</ul>"
        )
    if r.next_steps:
        parts.append("<h3>Next steps</h3><pre>" + e("\n".join(r.next_steps)) + "</pre>")
    secs = sections(r)
    for i, (title, text, tables) in enumerate([*secs, ("", "", [])]):
        if i == min(plots_after(r), len(secs)):
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
    found = data_issues(r)
    parts.append(
        "<ul>" + "".join(f"<li>{e(i)}</li>" for i in found) + "</ul>" if found else "<p>none</p>"
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
        title = f"{report.results.spec_name}: gate at {r.stage} ({r.results.gate.metric})"
        if len(gates) > 1:
            title = f"{report.results.spec_name}: gate {r.gate_name} ({r.results.gate.rule}) at {r.stage} ({r.results.gate.metric})"
        table = Table(title=title)
        for h in VERDICT_HEADER:
            table.add_column(h)
        for row in verdict_rows(r):
            style = {"PROCEED": "green", "STOP": "red", "INCONCLUSIVE": "yellow"}.get(
                str(row[2]), ""
            )
            table.add_row(*[fmt(x) for x in row], style=style)
        print_whole(con, table)
        for reason in r.reasons:
            con.print(f"  - {gate_tag(report, r)}{reason}", markup=False)
        for line in statistics_lines(r):
            con.print(f"  * {gate_tag(report, r)}{line}", markup=False)
    for line in report.eval_lines:
        con.print(line, style="bold red" if line.startswith("WARNING") else None, markup=False)
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
            overview.add_row(*[fmt(x) for x in row])
        print_whole(con, overview)
        shown = "; ".join(f"{r.gate_name}: {r.verdict}" for r in gates)
        con.print(f"gate verdicts: {shown} ({path})", markup=False)
    else:
        con.print(f"gate verdict: {report.verdict} ({path})", markup=False)
