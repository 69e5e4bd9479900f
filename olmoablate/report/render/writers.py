"""Write a built report: report.md, self-contained report.html, comparison.csv and gate.json,
plus the terminal verdict block. The document is built once; each format is one template
(``templates/``, :mod:`olmoablate.report.render.templating`).

Why self-contained HTML: results are read on laptops, in air-gapped clusters, attached to issues.
Every plot is embedded as a base64 PNG and there is no script, font or stylesheet to fetch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from olmoablate.contract.filenames import (
    COMPARISON_FILE,
    GATE_FILE,
    REPORT_HTML_FILE,
    REPORT_MD_FILE,
)
from olmoablate.io import write_json_atomic, write_text_atomic
from olmoablate.report.build import Report
from olmoablate.report.render.document import Document, build_document, comparison_rows
from olmoablate.report.render.plots import make_plots
from olmoablate.report.render.templating import render

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
    """report.html, self-contained: every plot embedded as a base64 PNG."""
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
    from olmoablate.console import make_console

    con = make_console()  # readable in CI logs too: the template wraps, rich does not
    con.print(render_terminal(report))
    path = written.get("html") or written.get("md") or written.get("json")
    gates = report.gates or [report]
    if len(gates) > 1:
        shown = "; ".join(f"{r.gate_name}: {r.verdict}" for r in gates)
        con.print(f"gate verdicts: {shown} ({path})", markup=False)
    else:
        con.print(f"gate verdict: {report.verdict} ({path})", markup=False)
