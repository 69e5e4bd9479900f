"""`olmoablate report` and `olmoablate watch`.

Imported for ``--help``, so the report's implementation is imported when a command runs. Exit code 0 whenever a report was produced, whatever the verdict (the verdict is data, in
gate.json, not an error) unless the caller opts in with ``--fail-on`` (exit 1); bad input is a
one-line UserError (exit 2).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from olmoablate.errors import UserError, parse_choices
from olmoablate.io import file_in_the_way, read_json, write_json_atomic
from olmoablate.plan.layout import ResultsDir, RootOpt, complete_spec, resolve_results
from olmoablate.plan.names import INCONCLUSIVE, LIVE_STATES, RESULTS_ROOT, STOP, RunState

FORMATS = ("md", "html", "csv", "json")
#: `report --fail-on`: a failed run, or a gate verdict (the names of olmoablate.report.verdict).
FAIL_ON = ("failed", STOP, INCONCLUSIVE)


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
    from olmoablate.report.assemble import build_all, write_next_plans
    from olmoablate.report.collect import collect, resolve_results_dir
    from olmoablate.report.document import print_terminal, write_all

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
    for verdict in (STOP, INCONCLUSIVE):
        if verdict in conditions:
            names = sorted(n for n, v in verdicts.items() if v == verdict)
            if names:
                hit.append(f"verdict {verdict} ({', '.join(names)})")
    return hit


def _read_state(results: ResultsDir) -> dict[str, Any]:
    from olmoablate.run.files import WATCH_FILE

    try:
        obj = read_json(results.root / WATCH_FILE)
    except (OSError, ValueError):
        return {"stops": {}}
    return obj if isinstance(obj, dict) and isinstance(obj.get("stops"), dict) else {"stops": {}}


def watch_once(results: ResultsDir) -> list[str]:
    """One round: evaluate every gate's design, cancel variants stopped for futility, once (the
    stops are recorded in watch.json: futility is non-binding, so resumed arms are not cancelled
    again). Returns one line per action."""
    from olmoablate.report.assemble import build_all
    from olmoablate.report.collect import collect
    from olmoablate.report.sequential import FUTILITY
    from olmoablate.run.files import STATUS_KEY, WATCH_FILE, FutilityStop, RunStatus
    from olmoablate.run.launch import cancel

    state = _read_state(results)
    stops: dict[str, Any] = state["stops"]
    report = build_all(collect(results, use_cache=False, workers=1))
    lines: list[str] = []
    for gate_report in report.gates:
        stage = gate_report.stage
        for variant, res in gate_report.sequential.items():
            key = f"{gate_report.gate_name}/{variant}"
            if res.decision != FUTILITY or key in stops:
                continue
            look = next(lk for lk in res.looks if lk.decision == FUTILITY)
            runs = [
                p.variant.run_id
                for p in gate_report.pairs
                if p.variant_name == variant and p.size == stage
            ]
            record = FutilityStop(
                gate=gate_report.gate_name,
                variant=variant,
                look=look.index,
                of=look.of,
                fraction=look.fraction,
                reason=res.status_line,
                gpu_hours_saved=res.gpu_hours_saved,
                runs=runs,
            ).model_dump()
            done = cancel(results, runs, reason=res.status_line) if runs else []
            for rid in runs:
                RunStatus.update(results.run(rid).status, **{STATUS_KEY: record})
            stops[key] = record
            lines.append(
                f"{key}: {res.status_line}; cancelled {', '.join(r for r, _ in done) or 'nothing'}"
                f" ({res.gpu_hours_saved:.4g} GPU-h of variant arms not spent)"
            )
    _settle_reasons(results, stops)
    write_json_atomic(results.root / WATCH_FILE, state)
    return lines


def _settle_reasons(results: ResultsDir, stops: dict[str, Any]) -> None:
    """A cancelled arm's own final status says "cancelled by user"; once it has ended, the
    reason is the futility stop (unless the user has resumed it since)."""
    from olmoablate.run.files import STATUS_KEY, FutilityStop, RunStatus

    for raw in stops.values():
        rec = FutilityStop.of_record(raw)
        if rec is None:
            continue
        for rid in rec.runs:
            run = results.run(rid)
            st = RunStatus.read(run)
            if st is not None and st.state == RunState.CANCELLED and st.reason != rec.reason:
                RunStatus.update(run.status, reason=rec.reason, **{STATUS_KEY: raw})


def live_runs(results: ResultsDir) -> list[str]:
    from olmoablate.run.state import Ledger, reconcile

    views = reconcile(results, Ledger.read(results), sacct_max_age_s=10.0)
    return [rid for rid, v in views.items() if v.state in LIVE_STATES]


def watch(
    results: ResultsDir, interval_s: float = 60.0, max_rounds: int | None = None, echo: Any = print
) -> None:
    """Rounds of :func:`watch_once` every ``interval_s`` until no run is live (or
    ``max_rounds``)."""
    rounds = 0
    while True:
        for line in watch_once(results):
            echo(line)
        rounds += 1
        if max_rounds is not None and rounds >= max_rounds:
            return
        if not live_runs(results):
            watch_once(results)  # settle the reasons of arms that ended since
            return
        time.sleep(interval_s)


def watch_command(
    spec: Annotated[
        Path,
        typer.Argument(metavar="SPEC", help="Spec file, spec name, results folder or plan.json."),
    ],
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between rounds (each reads the runs).")
    ] = 60.0,
    once: Annotated[bool, typer.Option("--once", help="One round, then exit.")] = False,
    results_root: RootOpt = RESULTS_ROOT,
) -> None:
    """Evaluate the gate's pre-registered looks as runs reach them; cancel (resumably) the arms
    of a variant its design stops for futility, recording why in their status. Resuming a
    stopped arm (`olmoablate submit SPEC --run <id>`) is allowed: futility is non-binding."""
    if not (math.isfinite(interval) and interval > 0):
        raise UserError(f"--interval {interval}: must be a positive number of seconds")
    results = resolve_results(str(spec), results_root)
    if not any(e.gate.sequential for e in results.plan.gates):
        raise UserError(
            f"{results.plan_path}: gate.sequential: not set, nothing to watch (watch acts on a "
            "pre-registered sequential design: add gate.sequential to the spec and re-plan)"
        )
    watch(results, interval, 1 if once else None, echo=typer.echo)
