"""`submit`: send the runs that need sending (Slurm job arrays or the local pool).

Which runs is resume's decision (:func:`olmoablate.run.resume.decide`), taken from the reconciled
views under the store's and the ledger's locks, so concurrent `submit` calls never send a run
twice. Both arms of a pair share a group and go out as one Slurm job array, rendered by submitit
itself (:mod:`olmoablate.run.slurm`), so `--dry-run` shows what is sent. Before anything is sent,
the plan's budget and ``--set`` overrides are checked: a plan over ``budget.max_gpu_hours`` never
reaches the cluster, and ``submit --set`` launches exactly the plan `plan --set` made.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path
from typing import Any

from olmoablate.errors import UserError
from olmoablate.io import canonical_json, write_text_atomic
from olmoablate.plan.accounting import over_budget
from olmoablate.plan.blocks import code_changes
from olmoablate.plan.layout import ResultsDir, resolve_results
from olmoablate.plan.load import spec_sha256
from olmoablate.plan.names import RunState
from olmoablate.plan.planfile import Plan, RunEntry
from olmoablate.run import slurm as sl
from olmoablate.run.localpool import LocalPool
from olmoablate.run.resume import decide, prepare_run_dir
from olmoablate.run.slurm import check_local_capacity, check_local_topology, visible_gpus
from olmoablate.run.state import Ledger, apply_leases, identity, reconcile, store_locked
from olmoablate.run.task import DEFAULT_TARGET, JobTarget, TrainRun

EXECUTORS = ("local", "slurm")
#: ``results/<spec>/slurm/<group>.sbatch``: the scripts `--dry-run` renders (launch's own files).
SBATCH_DIR = "slurm"


@dataclasses.dataclass
class SubmitResult:
    submitted: list[tuple[str, str]]  # (run_id, job_id)
    skipped: list[tuple[str, str]]  # (run_id, reason)
    rendered: list[Path]
    test_only: list[tuple[str, bool, str]]  # (group_id, ok, slurm's message)


Batch = tuple[str, dict[str, Any], list[RunEntry]]  # (group id, sbatch parameters, runs)


def group_batches(plan: Plan, run_ids: list[str]) -> list[Batch]:
    """Runs grouped by group_id (one job array per group), split further only if sbatch
    parameters differ inside a group (they should not: both arms share size and topology)."""
    batches: dict[tuple[str, str], Batch] = {}
    for rid in run_ids:
        run = plan.run(rid)
        gid = run.group_id
        params = sl.sbatch_parameters(run, job_name=f"olmoablate-{plan.spec_name}-{gid}")
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


def render_all(results: ResultsDir, run_ids: list[str]) -> list[Path]:
    """Write results/<spec>/slurm/<group_id>.sbatch for every batch."""
    folder = results.submitit.resolve()
    paths = []
    for gid, params, runs in group_batches(results.plan, run_ids):
        path = results.root / SBATCH_DIR / f"{gid}.sbatch"
        write_text_atomic(path, sl.render_sbatch(params, folder, len(runs)))
        paths.append(path)
    return paths


def check_code(plan: Plan, run_ids: list[str]) -> None:
    """Refuse to send a run whose blocks' code changed since ``plan`` (the pair would compare code
    nobody planned)."""
    for rid in run_ids:
        run = plan.run(rid)
        if run.code is None:  # a plan from before code identities: nothing recorded
            continue
        recorded = {k: v.model_dump() for k, v in run.code.items()}
        changes = code_changes(recorded, run.architecture.as_mapping())
        if changes:
            results = plan.path.parent if plan.path is not None else "SPEC"
            raise UserError(
                f"run {rid}: {changes[0]}; rerun `olmoablate plan --replan {plan.spec_path}` to "
                f"record the new code (and `olmoablate submit {results} --redo {rid}` if it "
                "already ran)"
            )


def check_data(plan: Plan, run_ids: list[str], executor: str) -> None:
    """Refuse to send runs whose data changed since ``plan`` (a cheap look: the fingerprint
    cache answers for files whose size and mtime did not change; the job hashes the bytes
    again at start, :func:`olmoablate.run.runplan.check_data`)."""
    from olmoablate.plan.store import data_changes

    changed = data_changes(plan, run_ids, fresh=False)
    if changed:
        raise UserError(changed[0].line(plan, executor))


def check_spec(ledger: Ledger, plan: Plan, redo: list[str]) -> None:
    """Refuse to mix runs of two versions of a spec in one ledger unless they are redone."""
    sha = plan.spec_sha256
    old = ledger.spec_sha256
    if old and sha and old != sha and ledger.runs:
        if not redo:
            raise UserError(
                f"plan.json spec_sha256 {sha[:12]} differs from the ledger's {old[:12]} (the spec "
                "changed since the last submit); name the runs to redo with --redo RUN_ID"
            )
    ledger.data["spec_sha256"] = sha or old
    ledger.data["spec_name"] = plan.spec_name


def submit(
    results: ResultsDir,
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
    """Send the runs of ``results.plan`` that need sending (local: until they finish)."""
    if executor not in EXECUTORS:
        raise UserError(f"--executor {executor}: allowed values are {', '.join(EXECUTORS)}")
    redo = list(redo or [])
    if dry_run or test_only:
        # Exactly what the real command would decide, refuse and send (ledger read, not locked
        # and never written).
        ledger = Ledger.read(results)
        check_spec(ledger, results.plan, redo)
        views = reconcile(results, ledger)
        send, skip = decide(views, retry_failed=retry_failed, redo=redo, only=only)
        if executor == "local":
            if parallel < 1:
                raise UserError(f"--parallel {parallel}: must be at least 1")
            gpus = visible_gpus()
            for rid in send:
                check_local_capacity(gpus, results.plan.run(rid).topology.gpus_per_node, parallel)
        rendered = render_all(results, send) if send else []
        tests: list[tuple[str, bool, str]] = []
        if test_only:
            if not sl.have_slurm():
                raise UserError("--test-only needs a reachable Slurm cluster (sbatch not found)")
            for path in rendered:
                ok, msg = sl.test_only(path)
                tests.append((path.stem, ok, msg))
        return SubmitResult([(r, "(dry-run)") for r in send], skip, rendered, tests)
    if executor == "slurm":
        if not sl.have_slurm():
            raise UserError(
                "--executor slurm: sbatch/sacct not found; use --executor local or --dry-run"
            )
        return _submit_slurm(results, retry_failed, redo, only, target)
    return _submit_local(results, retry_failed, redo, only, parallel, target, progress)


def _to_send(
    results: ResultsDir,
    ledger: Ledger,
    retry_failed: bool,
    redo: list[str],
    only: list[str] | None,
    require_scheduler: bool = False,
) -> tuple[list[str], list[tuple[str, str]]]:
    """Under the store's and the ledger's locks: the runs to send (their leases taken) and why
    the others are skipped."""
    check_spec(ledger, results.plan, redo)
    views = reconcile(results, ledger, sacct_max_age_s=0, require_scheduler=require_scheduler)
    send, skip = decide(views, retry_failed=retry_failed, redo=redo, only=only)
    check_code(results.plan, send)
    check_data(results.plan, send, "slurm" if require_scheduler else "local")
    return apply_leases(results, send, skip, redo)  # one identity is trained once per store


def _submit_slurm(
    results: ResultsDir,
    retry_failed: bool,
    redo: list[str],
    only: list[str] | None,
    target: JobTarget,
) -> SubmitResult:
    plan_path = str(results.plan_path.resolve())
    root = str(results.root.resolve())
    folder = results.submitit.resolve()
    submitted: list[tuple[str, str]] = []
    with store_locked(results), Ledger.locked(results) as ledger:
        send, skip = _to_send(results, ledger, retry_failed, redo, only, require_scheduler=True)
        for rid in redo:
            ledger.forget(rid)
        rendered = render_all(results, send) if send else []
        for gid, params, runs in group_batches(results.plan, send):
            ex = sl.slurm_executor(folder, runs[0], params)
            for run in runs:
                prepare_run_dir(results, run.run_id, fresh=run.run_id in redo)
            jobs = []
            try:
                with ex.batch():
                    for run in runs:
                        jobs.append(ex.submit(TrainRun(plan_path, run.run_id, root, target)))
            except Exception as err:  # sbatch rejected the script: say so in one line
                ledger.save()
                first = str(err).strip().splitlines()
                raise UserError(
                    f"sbatch rejected group {gid}: {first[-1] if first else err}"
                ) from None
            for run, job in zip(runs, jobs, strict=True):
                ledger.record_submission(run.run_id, job.job_id, "slurm", RunState.PENDING)
                submitted.append((run.run_id, job.job_id))
            # Persist after each array: a failure in the next group must not forget this one.
            ledger.save()
        sl.invalidate_sacct_cache(results)
    return SubmitResult(submitted, skip, rendered, [])


def _submit_local(
    results: ResultsDir,
    retry_failed: bool,
    redo: list[str],
    only: list[str] | None,
    parallel: int,
    target: JobTarget,
    progress: bool,
) -> SubmitResult:
    if parallel < 1:
        raise UserError(f"--parallel {parallel}: must be at least 1")
    plan = results.plan
    with store_locked(results), Ledger.locked(results) as ledger:
        send, skip = _to_send(results, ledger, retry_failed, redo, only)
        gpus = visible_gpus()
        for rid in send:  # before anything is marked queued: a run that cannot get its GPUs
            check_local_topology(rid, plan.run(rid).topology.nodes)
            check_local_capacity(gpus, plan.run(rid).topology.gpus_per_node, parallel)
        me = identity(os.getpid())
        for rid in send:
            if rid in redo:
                ledger.forget(rid)
            ledger.mark_queued(
                rid, owner_pid=os.getpid(), host=socket.gethostname(), owner_identity=me
            )
            prepare_run_dir(results, rid, fresh=rid in redo)
    if not send:
        return SubmitResult([], skip, [], [])
    # Longest runs first (by planned training FLOPs): with `parallel` slots this keeps the
    # slowest arm from starting last and stretching the whole batch.
    send = sorted(send, key=lambda rid: -plan.run(rid).total_train_flops)
    pool = LocalPool(results, send, parallel, target)
    submitted = pool.run(progress=progress)
    return SubmitResult(submitted, skip, [], [])


def results_for(spec: str, results_root: Path, overrides: list[str]) -> ResultsDir:
    """SPEC's results folder (a ``--set name=...`` override picks the folder of that name)."""
    for text in overrides:
        key, eq, value = text.partition("=")
        if eq and key.strip() == "name" and value.strip():
            return ResultsDir.for_spec(value.strip(), results_root)
    return resolve_results(spec, results_root)


def check_overrides(spec: str, results: ResultsDir, overrides: list[str]) -> None:
    """With ``--set``: SPEC must be the spec file, and the plan must be the one made from it with
    exactly these overrides (same spec_sha256)."""
    if not overrides:
        return
    path = Path(spec)
    if not (path.is_file() and path.suffix in (".yaml", ".yml")):
        raise UserError(f"--set needs SPEC to be the spec file (got {spec!r})")
    plan = results.plan
    if plan.spec_sha256 != spec_sha256(path.read_bytes(), overrides):
        made = ", ".join(plan.overrides) or "no overrides"
        sets = " ".join(f"--set {o}" for o in overrides)
        raise UserError(
            f"{results.plan_path}: this plan was made from another spec text or other overrides "
            f"({made}), not {spec} with {', '.join(overrides)}; run `olmoablate plan {spec} "
            f"{sets}` first"
        )


def check_budget(results: ResultsDir, only: list[str] | None) -> None:
    """Refuse a plan over budget.max_gpu_hours (the whole spec, or the sizes submitted)."""
    plan = results.plan
    sizes = None if only is None else {plan.run(r).size for r in only}
    over = over_budget(plan, sizes)
    if over:
        raise UserError(
            f"{results.plan_path}: {'; '.join(over)}; nothing submitted (raise the budget in the "
            "spec and re-plan, or plan fewer runs)"
        )
