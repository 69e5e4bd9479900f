"""`olmoablate submit|status|cancel`: thin Typer wrappers around :mod:`olmoablate.run.submit`,
:mod:`olmoablate.run.state` and `cancel` below. Imported by cli.py at start-up, so nothing heavy
at module level (submitit and rich are imported lazily, torch never).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from olmoablate.errors import UserError, parse_choices
from olmoablate.io import make_console, print_whole
from olmoablate.plan.layout import (
    ResultsDir,
    RootOpt,
    complete_run_ids,
    complete_spec,
    resolve_results,
)
from olmoablate.plan.names import LIVE_STATES, PLAN_FILE, RESULTS_ROOT, RunState
from olmoablate.plan.planfile import Plan
from olmoablate.run import slurm as sl
from olmoablate.run.files import RunStatus
from olmoablate.run.state import Ledger, local_job_alive, reconcile, signal_trainer

# -- `cancel`: the cancel marker first (``runs/<id>/.cancel-requested``: the job then ends
# ``cancelled``, never requeued), then SIGTERM to running jobs (checkpoint, exit) and pending ones
# leave the queue (docs/slurm.md).


def cancel(
    results: ResultsDir,
    run_ids: list[str] | None = None,
    force: bool = False,
    reason: str = "cancelled by user",
) -> list[tuple[str, str]]:
    """Stop runs of ``results.plan``, leaving each resumable: running jobs get SIGTERM
    (checkpoint, then exit); pending ones are removed from the queue. Returns (run_id, what was
    done)."""
    actions: list[tuple[str, str]] = []
    with Ledger.locked(results) as ledger:
        views = reconcile(results, ledger, sacct_max_age_s=0)
        for rid, view in views.items():
            if run_ids and rid not in run_ids:
                continue
            if view.state not in LIVE_STATES or view.state == RunState.CANCELLING and not force:
                if run_ids:
                    actions.append((rid, f"nothing to cancel ({view.state})"))
                continue
            rdir = results.run(rid)
            if rdir.reused_from is not None:  # another spec's run: never stopped from here
                if run_ids:
                    actions.append((rid, f"reused from {rdir.reused_from}: cancel it there"))
                continue
            rdir.path.mkdir(parents=True, exist_ok=True)
            rdir.cancel_marker.touch()
            rec = ledger.record(rid)
            job = rec.last_job if rec is not None else None
            sig = signal.SIGKILL if force else signal.SIGTERM
            if job is None and (trainer := signal_trainer(rdir, sig)) is not None:
                # trained without a launcher (`python -m olmoablate.run.job`): its own process
                actions.append((rid, f"{sig.name} to trainer {trainer} (checkpoint, then exit)"))
            elif view.state == RunState.QUEUED or job is None:
                actions.append((rid, "removed from the local queue"))
                RunStatus.update(rdir.status, state=RunState.CANCELLED, reason=reason)
            elif job.executor == "slurm":
                started = view.state in (RunState.RUNNING, RunState.CANCELLING)
                sl.scancel(job.job_id, graceful=started and not force)
                if started and not force:
                    actions.append((rid, f"SIGTERM to job {job.job_id} (checkpoint, then exit)"))
                else:
                    actions.append((rid, f"scancel {job.job_id}"))
                    if not started:
                        RunStatus.update(rdir.status, state=RunState.CANCELLED, reason=reason)
            else:
                pid = int(job.job_id)
                try:
                    # Checked again right before the signal: the pid must still be our job.
                    if not local_job_alive(job):
                        raise ProcessLookupError(pid)
                    os.kill(pid, sig)
                    actions.append((rid, f"SIGTERM to local job {pid} (checkpoint, then exit)"))
                except ProcessLookupError:
                    # its job process is gone, its trainer may not be (the trainer lock says)
                    trainer = signal_trainer(rdir, sig)
                    if trainer is None:
                        actions.append((rid, f"local job {pid} already gone"))
                    else:
                        actions.append(
                            (rid, f"{sig.name} to trainer {trainer} (its job process {pid} is "
                             "gone; checkpoint, then exit)")
                        )  # fmt: skip
            ledger.set_state(rid, RunState.CANCELLED, reason)
        sl.invalidate_sacct_cache(results)
    return actions


#: `status --fail-on`: run states that make the exit code 1.
STATUS_FAIL_ON = (RunState.FAILED,)

SpecArg = Annotated[
    str,
    typer.Argument(
        help="Spec file (YAML), spec name, or results directory (results/<spec>/).",
        metavar="SPEC",
        shell_complete=complete_spec,
    ),
]


def plan_part(spec: str, results: Any) -> list[str] | None:
    """The runs of SPEC when it is a plan file other than the results folder's plan.json (the
    report's ``next_plan.json``: the promoted sizes), each checked to be that plan's run (same
    certificate); None for any other SPEC."""
    path = Path(spec)
    if not (path.is_file() and path.suffix == ".json" and path.name != PLAN_FILE):
        return None
    part, plan = Plan.load(path), results.plan
    for r in part.runs:
        if plan.run(r.run_id).certificate != r.certificate:
            raise UserError(
                f"{path}: runs[{r.run_id}] differs from {results.plan_path} (certificate); "
                "the spec was re-planned since the report: submit the spec itself"
            )
    return [r.run_id for r in part.runs]


def submit_command(
    spec: SpecArg,
    executor: Annotated[
        str,
        typer.Option(
            "--executor", "-e", metavar="local|slurm", help="Where to run: local or slurm."
        ),
    ] = "local",
    parallel: Annotated[
        int,
        typer.Option(
            "--parallel",
            "-j",
            help="Local executor: runs trained at the same time (a GPU run gets its own "
            "gpus_per_node GPUs of CUDA_VISIBLE_DEVICES, or of all GPUs when unset).",
        ),
    ] = 1,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Render results/<spec>/slurm/<group>.sbatch as submitit would submit them; "
            "submit nothing (no cluster needed).",
        ),
    ] = False,
    test_only: Annotated[
        bool,
        typer.Option(
            "--test-only",
            help="Render, then ask Slurm (`sbatch --test-only`) whether each script is satisfiable.",
        ),
    ] = False,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Also resubmit runs that failed.")
    ] = False,
    redo: Annotated[
        list[str] | None,
        typer.Option(
            "--redo",
            metavar="RUN_ID",
            shell_complete=complete_run_ids,
            help="Run to start over from scratch (old run folder moved to runs/.superseded/); "
            "required for runs whose spec changed since the last submit. A run another spec "
            "of the store trains is redone there. Repeatable.",
        ),
    ] = None,
    run: Annotated[
        list[str] | None,
        typer.Option(
            "--run",
            metavar="RUN_ID",
            shell_complete=complete_run_ids,
            help="Submit only this run (repeatable); default: every run.",
        ),
    ] = None,
    size: Annotated[
        list[str] | None,
        typer.Option(
            "--size",
            "-s",
            metavar="SIZE",
            help="Submit only the runs of this size (repeatable), e.g. the gate's stage size.",
        ),
    ] = None,
    no_progress: Annotated[
        bool,
        typer.Option(
            "--no-progress",
            help="Local executor: no progress output (by default a live table in a terminal, "
            "plain per-run lines when stdout is a log or a pipe).",
        ),
    ] = False,
    results_root: RootOpt = RESULTS_ROOT,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="FIELD.PATH=VALUE",
            help="The overrides the plan was made with (`plan --set`); submit refuses a plan "
            "made from other overrides. Repeatable.",
        ),
    ] = None,
) -> None:
    """Submit the planned runs that still need training.

    Completed, running and pending runs are never resubmitted; cancelled and interrupted runs
    resume from their last checkpoint; failed runs only with --retry-failed. Both arms of a pair
    go out as one Slurm job array. The ledger (results/<spec>/ledger.json) records every job.
    With --executor local the command trains in the foreground; Ctrl-C checkpoints every run.
    Refuses when the plan exceeds the spec's budget.max_gpu_hours (total and limit named).
    """
    from rich.table import Table

    from olmoablate.run.submit import check_budget, check_overrides, results_for, submit

    results = results_for(spec, results_root, set_ or [])
    plan = results.plan
    check_overrides(spec, results, set_ or [])
    redo_ids = plan.check_run_ids(redo, "--redo")
    only = plan.check_run_ids(run, "--run") or None
    part = plan_part(spec, results)
    if part is not None:  # a next_plan.json: its runs only
        only = [r for r in (only or part) if r in part] or None
        if only is None:
            raise UserError(f"{spec}: --run selects none of this plan's runs")
    if size:
        sizes = sorted({r.size for r in plan.runs})
        unknown = [s for s in size if s not in sizes]
        if unknown:
            raise UserError(
                f"{results.plan_path}: --size {', '.join(unknown)} is not planned "
                f"(allowed: {', '.join(sizes)})"
            )
        by_size = [r.run_id for r in plan.runs if r.size in size]
        only = [r for r in (only or by_size) if r in by_size]
        if not only:
            raise UserError("--run and --size select no run together")
    check_budget(results, only)
    console = make_console()
    if plan.overrides:
        console.print(
            f"plan {results.plan_path} was made with --set {' --set '.join(plan.overrides)}",
            markup=False, highlight=False,
        )  # fmt: skip
    try:
        result = submit(
            results,
            executor,
            retry_failed=retry_failed,
            redo=redo_ids,
            only=only,
            dry_run=dry_run,
            test_only=test_only,
            parallel=parallel,
            progress=not no_progress,
        )
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: every run is resumable; `olmoablate submit` again[/]")
        raise typer.Exit(130) from None
    if result.rendered:
        table = Table(title="sbatch scripts" + (" (dry run: nothing submitted)" if dry_run else ""))
        for col in ("group", "script", "#SBATCH lines"):
            table.add_column(col)
        ok_by_group = {g: (ok, msg) for g, ok, msg in result.test_only}
        if test_only:
            table.add_column("sbatch --test-only")
        for path in result.rendered:
            lines = [
                ln.removeprefix("#SBATCH ")
                for ln in path.read_text().splitlines()
                if ln.startswith("#SBATCH") and "--output" not in ln and "--error" not in ln
            ]
            row = [path.stem, str(path), " ".join(lines)]
            if test_only:
                ok, msg = ok_by_group.get(path.stem, (False, "not tested"))
                row.append(("[green]ok[/] " if ok else "[red]unsatisfiable[/] ") + msg)
            table.add_row(*row)
        print_whole(console, table)
    verb = "would submit" if (dry_run or test_only) else "submitted"
    for rid, jid in result.submitted:
        console.print(f"{verb} {rid}  job {jid}")
    for rid, why in result.skipped:
        console.print(f"skipped {rid}: {why}")
    console.print(f"{verb} {len(result.submitted)} job(s), skipped {len(result.skipped)}")
    if test_only and not all(ok for _, ok, _ in result.test_only):
        raise typer.Exit(1)
    if executor == "local" and result.submitted and not (dry_run or test_only):
        _exit_if_failed(results, [rid for rid, _ in result.submitted])


def _exit_if_failed(results: Any, run_ids: list[str]) -> None:
    """A foreground local `submit` exits 1 when a run it trained failed (scripts can trust the
    exit code), after one line per failed run with its reason."""
    views = reconcile(results, Ledger.read(results))
    failed = [views[r] for r in run_ids if r in views and views[r].state == RunState.FAILED]
    for v in failed:
        typer.echo(f"{v.run_id}: failed: {v.reason}", err=True)
    if failed:
        raise typer.Exit(1)


def status_command(
    spec: SpecArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    max_age: Annotated[
        float,
        typer.Option("--max-age", metavar="SECONDS", help="Reuse sacct answers younger than this."),
    ] = 10.0,
    results_root: RootOpt = RESULTS_ROOT,
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-on",
            help="Exit 1 (after printing) when a run is in this state: failed. For scripts and CI.",
        ),
    ] = None,
) -> None:
    """Show one line per run: state, step/total, tokens, last loss, tokens/s, ETA, job id.

    State comes from Slurm (one squeue + one cached sacct call for all jobs) or the local process,
    reconciled with the run's own status.json; completion is decided by the step count. Every run
    that is not running or completed gets one line of reason (also `reason` in --json): the job's
    own, or Slurm's state and exit code/signal when the job died outside the training loop, with
    the checkpoint it would resume from and the command that resumes it.
    """
    from olmoablate.run.localpool import status_table, views_json

    fail_states = parse_choices(fail_on, STATUS_FAIL_ON, "--fail-on")
    results = resolve_results(spec, results_root)
    views = list(reconcile(results, Ledger.read(results), sacct_max_age_s=max_age).values())
    if as_json:
        typer.echo(views_json(views))
    else:
        console = make_console()
        print_whole(console, status_table(views, title=f"{results.root}"))
        for v in views:  # one line of reason per run that is not running or completed
            if v.reason:
                console.print(
                    f"{v.run_id}: {v.state}: {v.reason}",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
    if any(v.state in fail_states for v in views):
        raise typer.Exit(1)


def cancel_command(
    spec: SpecArg,
    run: Annotated[
        list[str] | None,
        typer.Option(
            "--run",
            metavar="RUN_ID",
            shell_complete=complete_run_ids,
            help="Cancel only this run (repeatable); default: every live run.",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Kill at once (no final checkpoint; resumes from the last one)."
        ),
    ] = False,
    results_root: RootOpt = RESULTS_ROOT,
) -> None:
    """Cancel live runs. Running jobs get SIGTERM, save a checkpoint and stop, so the next
    `olmoablate submit` resumes them; pending jobs leave the queue. The ledger marks them cancelled.
    """
    results = resolve_results(spec, results_root)
    ids = results.plan.check_run_ids(run, "--run") or None
    actions = cancel(results, ids, force=force)
    for rid, what in actions:
        typer.echo(f"{rid}: {what}")
    typer.echo(f"cancelled {sum(1 for _, w in actions if not w.startswith('nothing'))} run(s)")
