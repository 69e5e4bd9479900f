"""`olmoablate report`: matched-token comparisons, plots and the scale-up gate verdict.

Imported by cli.py at start-up, so numpy/pandas/matplotlib are imported inside the function.
Exit code 0 whenever a report was produced, whatever the verdict (the verdict is data, in
gate.json, not an error); bad input is a one-line UserError (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from olmoablate.contract.complete import complete_spec
from olmoablate.contract.roots import RESULTS_ROOT, RESULTS_ROOT_ENV
from olmoablate.errors import UserError

FORMATS = ("md", "html", "csv", "json")


def report_command(
    spec: Annotated[
        str,
        typer.Argument(
            help="Spec file (YAML), spec name, or results directory (results/<spec>/).",
            metavar="SPEC",
            shell_complete=complete_spec,
        ),
    ],
    results_root: Annotated[
        str,
        typer.Option(
            "--results-root",
            "--store",
            metavar="DIR",
            envvar=RESULTS_ROOT_ENV,
            help="Folder that holds one results folder per spec.",
        ),
    ] = str(RESULTS_ROOT),
    out: Annotated[
        str | None,
        typer.Option("--out", metavar="DIR", help="Where to write the report (default: the results folder)."),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="Comma-separated outputs: md, html, csv, json (gate.json is always written).",
        ),
    ] = "md,html,csv,json",
    no_cache: Annotated[
        bool,
        typer.Option(
            "--no-cache",
            help="Re-parse every metrics.jsonl (ignore .report-cache/ and the jobs' metrics.parquet).",
        ),
    ] = False,
) -> None:
    """Compare every pair at matched tokens and print the gate verdict at the stage size."""
    formats = [f.strip().lower() for f in fmt.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UserError(
            f"--format: unknown value {', '.join(bad) or '(empty)'!r}; allowed: {', '.join(FORMATS)}"
        )
    from olmoablate.report.collect import collect, resolve_results_dir
    from olmoablate.report.gates import build_all, write_next_plans
    from olmoablate.report.writers import print_terminal, write_all

    layout = resolve_results_dir(spec, results_root)
    results = collect(layout, use_cache=not no_cache)
    report = build_all(results)  # one report per pre-registered gate (`gates:`), first in front
    out_dir = Path(out) if out else layout.root
    write_next_plans(report, out_dir)
    written = write_all(report, out_dir, formats)
    print_terminal(report, written)
