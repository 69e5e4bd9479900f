"""`submit`: decide which runs need sending and send them (Slurm job arrays or the local pool).

`submit` sends only runs that are missing, cancelled or interrupted (and failed ones with
`retry_failed`), deciding from launch/reconcile.py's views under the ledger lock, so concurrent
`submit` calls never send a run twice. Both arms of a pair share a group and go out as one Slurm
job array, rendered by submitit itself (launch/slurm.py), so `--dry-run` shows what is sent.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from pathlib import Path
from typing import Any

from olmoablate.errors import UserError
from olmoablate.io import canonical_json, write_text_atomic
from olmoablate.launch import slurm as sl
from olmoablate.launch.devices import check_local_capacity, visible_gpus
from olmoablate.launch.ledger import Ledger, now_iso
from olmoablate.launch.localpool import LocalPool, gpus_of
from olmoablate.launch.reconcile import DONE_STATES, LIVE_STATES, RunView, reconcile
from olmoablate.launch.resolve import PLAN_FILE, run_dir, runs_by_id
from olmoablate.launch.runstate import CANCEL_MARKER, DEFAULT_TARGET, JobTarget, mark_status

EXECUTORS = ("local", "slurm")


@dataclasses.dataclass
class SubmitResult:
    submitted: list[tuple[str, str]]  # (run_id, job_id)
    skipped: list[tuple[str, str]]  # (run_id, reason)
    rendered: list[Path]
    test_only: list[tuple[str, bool, str]]  # (group_id, ok, slurm's message)


def decide(
    views: dict[str, RunView], *, retry_failed: bool, redo: list[str], only: list[str] | None
) -> tuple[list[str], list[tuple[str, str]]]:
    """Which runs to send now, and why the others are not sent."""
    send: list[str] = []
    skip: list[tuple[str, str]] = []
    for rid, view in views.items():
        if only is not None and rid not in only:
            continue
        if rid in redo:
            if view.state in LIVE_STATES:
                raise UserError(f"--redo {rid}: run is {view.state}; `olmoablate cancel` it first")
            send.append(rid)
        elif view.state in DONE_STATES or view.state in LIVE_STATES:
            skip.append((rid, view.state))
        elif view.state == "failed" and not retry_failed:
            skip.append((rid, "failed (use --retry-failed)"))
        else:
            send.append(rid)
    return send, skip


def prepare_run_dir(results_dir: Path, run_id: str, fresh: bool) -> None:
    """Clear a stale cancel request; for --redo move the old run directory aside (never delete)."""
    rdir = run_dir(results_dir, run_id)
    if fresh and rdir.exists():
        dest = results_dir / "runs" / ".superseded" / f"{run_id}-{time.strftime('%Y%m%dT%H%M%S')}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        rdir.rename(dest)
    rdir.mkdir(parents=True, exist_ok=True)
    (rdir / CANCEL_MARKER).unlink(missing_ok=True)
    mark_status(rdir / "status.json", run_id=run_id, state="pending", reason=None)


def group_batches(
    plan: dict[str, Any], run_ids: list[str], spec_name: str
) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """Runs grouped by group_id (one job array per group), split further only if sbatch
    parameters differ inside a group (they should not: both arms share size and topology)."""
    runs = runs_by_id(plan)
    batches: dict[tuple[str, str], tuple[str, dict[str, Any], list[dict[str, Any]]]] = {}
    for rid in run_ids:
        run = runs[rid]
        gid = str(run.get("group_id") or rid)
        params = sl.sbatch_parameters(run, job_name=f"olmoablate-{spec_name}-{gid}")
        key = (gid, canonical_json(params))
        if key not in batches:
            batches[key] = (gid, params, [])
        batches[key][2].append(run)
    out = list(batches.values())
    seen: dict[str, int] = {}
    for i, (gid, params, runs_) in enumerate(out):
        seen[gid] = seen.get(gid, 0) + 1
        if seen[gid] > 1:
            out[i] = (f"{gid}.{seen[gid]}", params, runs_)
    return out


def render_all(results_dir: Path, plan: dict[str, Any], run_ids: list[str]) -> list[Path]:
    """Write results/<spec>/slurm/<group_id>.sbatch for every batch (no cluster needed)."""
    spec_name = str(plan.get("spec_name") or results_dir.name)
    folder = (results_dir / "submitit").resolve()
    paths = []
    for gid, params, runs in group_batches(plan, run_ids, spec_name):
        path = results_dir / "slurm" / f"{gid}.sbatch"
        write_text_atomic(path, sl.render_sbatch(params, folder, len(runs)))
        paths.append(path)
    return paths


def check_spec(ledger: Ledger, plan: dict[str, Any], redo: list[str]) -> None:
    """Refuse to mix runs of two versions of a spec in one ledger unless they are redone."""
    sha = plan.get("spec_sha256")
    old = ledger.data.get("spec_sha256")
    if old and sha and old != sha and ledger.runs:
        if not redo:
            raise UserError(
                f"plan.json spec_sha256 {sha[:12]} differs from the ledger's {old[:12]} (the spec "
                "changed since the last submit); name the runs to redo with --redo RUN_ID"
            )
    ledger.data["spec_sha256"] = sha or old
    ledger.data["spec_name"] = plan.get("spec_name")


def submit(
    results_dir: Path,
    plan: dict[str, Any],
    executor: str,
    *,
    retry_failed: bool = False,
    redo: list[str] | None = None,
    only: list[str] | None = None,
    dry_run: bool = False,
    test_only: bool = False,
    parallel: int = 1,
    target: JobTarget = DEFAULT_TARGET,
    progress: bool = True,
) -> SubmitResult:
    """Send the runs that need sending. Local: blocks until they finish (or Ctrl-C)."""
    if executor not in EXECUTORS:
        raise UserError(f"--executor {executor}: allowed values are {', '.join(EXECUTORS)}")
    redo = list(redo or [])
    if dry_run or test_only:
        ledger = Ledger.read(results_dir)
        ids = list(runs_by_id(plan))
        rendered = render_all(results_dir, plan, ids)
        tests: list[tuple[str, bool, str]] = []
        if test_only:
            if not sl.have_slurm():
                raise UserError("--test-only needs a reachable Slurm cluster (sbatch not found)")
            for path in rendered:
                ok, msg = sl.test_only(path)
                tests.append((path.stem, ok, msg))
        views = reconcile(results_dir, plan, ledger)
        send, skip = decide(views, retry_failed=retry_failed, redo=redo, only=only)
        return SubmitResult([(r, "(dry-run)") for r in send], skip, rendered, tests)
    if executor == "slurm":
        if not sl.have_slurm():
            raise UserError(
                "--executor slurm: sbatch/sacct not found; use --executor local or --dry-run"
            )
        return _submit_slurm(results_dir, plan, retry_failed, redo, only, target)
    return _submit_local(results_dir, plan, retry_failed, redo, only, parallel, target, progress)


def _submit_slurm(
    results_dir: Path,
    plan: dict[str, Any],
    retry_failed: bool,
    redo: list[str],
    only: list[str] | None,
    target: JobTarget,
) -> SubmitResult:
    from olmoablate.launch.job import TrainRun

    plan_path = str((results_dir / PLAN_FILE).resolve())
    folder = (results_dir / "submitit").resolve()
    spec_name = str(plan.get("spec_name") or results_dir.name)
    submitted: list[tuple[str, str]] = []
    with Ledger.locked(results_dir) as ledger:
        check_spec(ledger, plan, redo)
        views = reconcile(results_dir, plan, ledger, sacct_max_age_s=0, require_scheduler=True)
        send, skip = decide(views, retry_failed=retry_failed, redo=redo, only=only)
        for rid in redo:
            ledger.forget(rid)
        rendered = render_all(results_dir, plan, send) if send else []
        for gid, params, runs in group_batches(plan, send, spec_name):
            ex = sl.slurm_executor(folder, runs[0], params)
            for run in runs:
                prepare_run_dir(results_dir, run["run_id"], fresh=run["run_id"] in redo)
            gpus = gpus_of(runs[0])
            jobs = []
            try:
                with ex.batch():
                    for run in runs:
                        fn = TrainRun(
                            plan_path, run["run_id"], str(results_dir.resolve()), gpus, target
                        )
                        jobs.append(ex.submit(fn))
            except Exception as err:  # sbatch rejected the script: say so in one line
                ledger.save()
                first = str(err).strip().splitlines()
                raise UserError(
                    f"sbatch rejected group {gid}: {first[-1] if first else err}"
                ) from None
            for run, job in zip(runs, jobs, strict=True):
                ledger.record_submission(run["run_id"], job.job_id, "slurm", "pending")
                submitted.append((run["run_id"], job.job_id))
            # Persist after each array: a failure in the next group must not forget this one.
            ledger.save()
        sl.invalidate_sacct_cache(results_dir)
    return SubmitResult(submitted, skip, rendered, [])


def _submit_local(
    results_dir: Path,
    plan: dict[str, Any],
    retry_failed: bool,
    redo: list[str],
    only: list[str] | None,
    parallel: int,
    target: JobTarget,
    progress: bool,
) -> SubmitResult:
    if parallel < 1:
        raise UserError(f"--parallel {parallel}: must be at least 1")
    with Ledger.locked(results_dir) as ledger:
        check_spec(ledger, plan, redo)
        views = reconcile(results_dir, plan, ledger, sacct_max_age_s=0)
        send, skip = decide(views, retry_failed=retry_failed, redo=redo, only=only)
        runs = runs_by_id(plan)
        gpus = visible_gpus()
        for rid in send:  # before anything is marked queued: a run that cannot get its GPUs
            check_local_capacity(gpus, gpus_of(runs[rid]), parallel)
        for rid in send:
            if rid in redo:
                ledger.forget(rid)
            entry = ledger.runs.setdefault(
                rid, {"executor": "local", "attempts": 0, "job_ids": [], "jobs": []}
            )
            entry.update(
                executor="local",
                state="queued",
                owner_pid=os.getpid(),
                reason=None,
                updated=now_iso(),
            )
            entry["host"] = socket.gethostname()
            prepare_run_dir(results_dir, rid, fresh=rid in redo)
    if not send:
        return SubmitResult([], skip, [], [])
    # Longest runs first (by planned training FLOPs): with `parallel` slots this keeps the
    # slowest arm from starting last and stretching the whole batch.
    cost = {r["run_id"]: r.get("total_train_flops") or 0 for r in plan["runs"]}
    send = sorted(send, key=lambda rid: -cost.get(rid, 0))
    pool = LocalPool(results_dir, plan, send, parallel, target)
    submitted = pool.run(progress=progress)
    return SubmitResult(submitted, skip, [], [])
