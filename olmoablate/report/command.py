"""`olmoablate report`: matched-token comparisons, plots and the scale-up gate verdict.

Imported by cli.py at start-up, so numpy/pandas/matplotlib are imported inside the function.
Exit code 0 whenever a report was produced, whatever the verdict (the verdict is data, in
gate.json, not an error) unless the caller opts in with ``--fail-on`` (exit 1); bad input is a
one-line UserError (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from olmoablate.contract.complete import complete_spec
from olmoablate.contract.roots import RESULTS_ROOT
from olmoablate.contract.runstates import RunState
from olmoablate.errors import UserError, parse_choices
from olmoablate.io import file_in_the_way
from olmoablate.options import RootOpt

FORMATS = ("md", "html", "csv", "json")
#: `report --fail-on`: a failed run, or a gate verdict (the names of olmoablate.report.gate.verdict).
FAIL_ON = ("failed", "stop", "inconclusive")


def report_command(
    spec: Annotated[
        str,
        typer.Argument(
            help="Spec file (YAML), spec name, or results directory (results/<spec>/).",
            metavar="SPEC",
            shell_complete=complete_spec,
        ),
    ],
    results_root: RootOpt = RESULTS_ROOT,
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
            help="Re-parse every metrics.jsonl (ignore the runs' metrics.arrow copies and .report-cache/).",
        ),
    ] = False,
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-on",
            help="Exit 1 after writing the report when: failed (a run failed), stop or "
            "inconclusive (a gate's verdict). Comma-separated or repeated; for scripts and CI.",
        ),
    ] = None,
) -> None:
    """Compare every pair at matched tokens and print the gate verdict at the stage size."""
    formats = [f.strip().lower() for f in fmt.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UserError(
            f"--format: unknown value {', '.join(bad) or '(empty)'!r}; allowed: {', '.join(FORMATS)}"
        )
    conditions = parse_choices(fail_on, FAIL_ON, "--fail-on")
    blocker = file_in_the_way(out) if out else None
    if blocker is not None:
        what = "is a file" if blocker == Path(out) else f"is under a file ({blocker})"
        raise UserError(f"--out {out}: {what}; give a folder (created if missing)")
    from olmoablate.report.gates import build_all, write_next_plans
    from olmoablate.report.read.collect import collect, resolve_results_dir
    from olmoablate.report.render.writers import print_terminal, write_all

    layout = resolve_results_dir(spec, results_root)
    results = collect(layout, use_cache=not no_cache)
    report = build_all(results)  # one report per pre-registered gate (`gates:`), first in front
    out_dir = Path(out) if out else layout.root
    write_next_plans(report, out_dir)
    written = write_all(report, out_dir, formats)
    print_terminal(report, written)
    hit = _failing(report, conditions)
    if hit:
        typer.echo(f"--fail-on: {', '.join(hit)}", err=True)
        raise typer.Exit(1)


def _failing(report: Any, conditions: set[str]) -> list[str]:
    """Which ``--fail-on`` conditions hold: a run failed, or a gate's verdict is stop or
    inconclusive (every pre-registered gate counts, not only the first)."""
    hit: list[str] = []
    if "failed" in conditions:
        failed = sorted(r for r, run in report.results.runs.items() if run.state == RunState.FAILED)
        if failed:
            hit.append(f"failed runs {', '.join(failed)}")
    verdicts = {g.gate_name: g.verdict for g in (report.gates or [report])}
    for verdict in ("stop", "inconclusive"):
        if verdict in conditions:
            names = sorted(n for n, v in verdicts.items() if v == verdict)
            if names:
                hit.append(f"verdict {verdict} ({', '.join(names)})")
    return hit
