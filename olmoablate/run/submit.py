"""`submit`: decide which runs need sending and send them (Slurm job arrays or the local pool).

`submit` sends only runs that are missing, cancelled or interrupted (and failed ones with
`retry_failed`), deciding from launch/reconcile.py's views under the ledger lock, so concurrent
`submit` calls never send a run twice. Both arms of a pair share a group and go out as one Slurm
job array, rendered by submitit itself (launch/slurm.py), so `--dry-run` shows what is sent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from olmoablate.errors import UserError
from olmoablate.io import canonical_json, file_lock, read_json, write_json_atomic, write_text_atomic
from olmoablate.plan.accounting import over_budget
from olmoablate.plan.blocks import code_changes
from olmoablate.plan.identity import is_run_place, short
from olmoablate.plan.layout import ResultsDir, resolve_results
from olmoablate.plan.load import spec_sha256
from olmoablate.plan.names import DONE_STATES, LIVE_STATES, RunState
from olmoablate.plan.planfile import Plan, RunEntry
from olmoablate.plan.store import owner_problem, recorded_identity
from olmoablate.run import slurm as sl
from olmoablate.run.localpool import LocalPool
from olmoablate.run.resume import DEFAULT_TARGET, JobTarget, mark_status
from olmoablate.run.slurm import check_local_capacity, check_local_topology, visible_gpus
from olmoablate.run.state import Ledger, RunView, identity, now_iso, reconcile
from olmoablate.run.task import TrainRun

# --------------------------------------------------------------------------------------------------
# The store's leases: `submit` never trains one run identity twice, whichever spec asks.
#
# Why a lease under one lock: two specs planned before either was submitted each plan their own
# copy of a shared baseline (neither was running yet), and their two `submit`s may start at the
# same moment. Every `submit` decides under the store's lock (``<store>/.store/lock``, fcntl, held
# around the spec's own ledger lock, always in that order): for each run it is about to send, a
# lease file ``<store>/.store/leases/<identity>.json`` names the spec and run that trains the
# identity. A lease held by another spec's run that is live (queued, pending, running) or done
# (completed, diverged) means this spec uses that run: `submit` writes ``runs/<id>/reused.json``
# (``{"from": "<spec>/runs/<id>"}``) and sends nothing; every later stage reads that run's files as
# its own (`olmoablate.plan.layout.ResultsDir.run`). A lease whose run failed, was cancelled or
# is gone, or that now trains another identity (its spec re-planned: `olmoablate.plan.store`), is
# stale and taken over. Marin's executor does the same with lease files and heartbeats;
# here liveness comes from the owner's own reconciled state (`olmoablate.run.state`).
# --------------------------------------------------------------------------------------------------


STORE_DIR = ".store"


def lease_path(store: Path, identity: str) -> Path:
    return store / STORE_DIR / "leases" / f"{identity}.json"


@contextlib.contextmanager
def store_locked(results: ResultsDir) -> Iterator[None]:
    """The store's lock (taken before the spec's ledger lock by every `submit`)."""
    with file_lock(results.store / STORE_DIR / "lock"):
        yield


def owner_state(store: Path, spec: str, run_id: str) -> str | None:
    """The reconciled state of run ``run_id`` of spec ``spec`` (None: no such plan or run).

    An owner whose plan or ledger cannot be read cannot hold a lease; an owner whose Slurm job
    the controller cannot answer for can (it may be running): that is a :class:`UserError`
    (submit stops, nothing sent), never a takeover that trains the identity twice."""
    owner = ResultsDir(store / spec)
    if not owner.plan_path.is_file():
        return None
    try:
        owner.plan  # noqa: B018  (loads and validates it)
        ledger = Ledger.read(owner)
    except (UserError, OSError, ValueError):  # an unreadable owner cannot hold a lease
        return None
    try:
        views = reconcile(owner, ledger, follow_reuse=False, require_scheduler=True)
    except UserError as err:
        raise UserError(
            f"the lease of {spec}/runs/{run_id} (the same run identity) cannot be checked: {err}"
        ) from None
    except (OSError, ValueError):  # its files are unreadable: it cannot hold a lease
        return None
    view = views.get(run_id)
    return None if view is None else view.state


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = read_json(path)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def claim(results: ResultsDir, run_id: str) -> str | None:
    """Take the lease of ``run_id``'s identity, or return ``<spec>/runs/<id>`` of the live or
    done run of another spec that holds it (and mark this run as reusing it). Call under
    :func:`store_locked`. Plans without identities (older ones) train as before."""
    plan = results.plan
    if plan.identity is None or run_id not in plan.identity.runs:
        return None
    identity = plan.identity.runs[run_id]
    store = results.store
    path = lease_path(store, identity)
    lease = _read(path)
    me = (results.root.name, run_id)
    own = results.own_run(run_id)
    if lease is not None and (lease.get("spec"), lease.get("run_id")) != me:
        spec, rid = str(lease.get("spec")), str(lease.get("run_id"))
        where = f"{spec}/runs/{rid}"
        # the holder's run must still be this identity (its spec may have been re-planned)
        if (
            is_run_place(where)
            and owner_problem(store, where, identity) is None
            and owner_state(store, spec, rid) in LIVE_STATES | DONE_STATES
        ):
            own.path.mkdir(parents=True, exist_ok=True)
            write_json_atomic(own.reused, {"from": where, "identity": identity, "at": now_iso()})
            return where
    write_json_atomic(
        path,
        {
            "identity": identity,
            "spec": me[0],
            "run_id": run_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "at": now_iso(),
        },
    )
    own.reused.unlink(missing_ok=True)  # trained here now, whatever an older lease said
    return None


def check_resumable(results: ResultsDir, send: list[str], redo: Collection[str]) -> None:
    """Refuse to continue a run folder that was started as another identity than the plan now
    names (its identity.json): the spec was re-planned with the same spec file but other data
    (a token file rewritten in place), and resuming would continue the old checkpoint on the
    new data under the new identity. ``redo`` runs start over in a fresh folder."""
    plan = results.plan
    if plan.identity is None:
        return
    for rid in send:
        if rid in redo or rid not in plan.identity.runs:
            continue
        recorded = recorded_identity(results.own_run(rid).path)
        if recorded is not None and recorded != plan.identity.runs[rid]:
            raise UserError(
                f"{results.own_run(rid).path} was started as identity {short(recorded)}, the "
                f"plan now says {short(plan.identity.runs[rid])} (`olmoablate explain` the two "
                f"plans to see why); start it over with --redo {rid}"
            )


def apply_leases(
    results: ResultsDir,
    send: list[str],
    skip: list[tuple[str, str]],
    redo: Collection[str] = (),
) -> tuple[list[str], list[tuple[str, str]]]:
    """``send`` without the runs another spec trains (each then skipped "reused from ..."); the
    skipped runs that are reused say so too (e.g. "completed, reused from ..."). First, a run
    folder started as another identity is refused (:func:`check_resumable`)."""
    check_resumable(results, send, redo)
    skip = [
        (rid, why if where is None else f"{why}, reused from {results.store / where}")
        for rid, why in skip
        for where in [results.run(rid).reused_from]
    ]
    keep: list[str] = []
    for rid in send:
        where = claim(results, rid)
        if where is None:
            keep.append(rid)
        elif rid in redo:
            raise UserError(
                f"--redo {rid}: it is {results.store / where}, trained by another spec of the "
                "store (one identity is trained once); --redo it there"
            )
        else:
            skip.append((rid, f"reused from {results.store / where}"))
    return keep, skip


def write_identity(results: ResultsDir, run_id: str) -> None:
    """``runs/<id>/identity.json``: the identity trained in this folder (with the versions)."""
    plan = results.plan
    if plan.identity is None or run_id not in plan.identity.runs:
        return
    write_json_atomic(
        results.own_run(run_id).identity,
        {
            "identity": plan.identity.runs[run_id],
            "spec": plan.spec_name,
            "run_id": run_id,
            "versions": plan.identity.versions,
        },
    )


EXECUTORS = ("local", "slurm")
#: ``results/<spec>/slurm/<group>.sbatch``: the scripts `--dry-run` renders (launch's own files).
SBATCH_DIR = "slurm"


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
        elif view.state == RunState.FAILED and not retry_failed:
            skip.append((rid, "failed (use --retry-failed)"))
        else:
            send.append(rid)
    return send, skip


def prepare_run_dir(results: ResultsDir, run_id: str, fresh: bool) -> None:
    """Clear a stale cancel request; for --redo move the old run directory aside (never delete)."""
    rdir = results.own_run(run_id)  # never the folder of a run reused from another spec
    if fresh and rdir.path.exists():
        dest = results.superseded / f"{run_id}-{time.strftime('%Y%m%dT%H%M%S')}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        rdir.path.rename(dest)
    rdir.path.mkdir(parents=True, exist_ok=True)
    rdir.cancel_marker.unlink(missing_ok=True)
    mark_status(rdir.status, run_id=run_id, state=RunState.PENDING, reason=None)
    write_identity(results, run_id)


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
    """Write results/<spec>/slurm/<group_id>.sbatch for every batch (no cluster needed)."""
    folder = results.submitit.resolve()
    paths = []
    for gid, params, runs in group_batches(results.plan, run_ids):
        path = results.root / SBATCH_DIR / f"{gid}.sbatch"
        write_text_atomic(path, sl.render_sbatch(params, folder, len(runs)))
        paths.append(path)
    return paths


def check_code(plan: Plan, run_ids: list[str]) -> None:
    """Refuse to send a run whose blocks' code changed since ``plan`` (the certificate covers
    the code too: the pair would compare code nobody planned)."""
    for rid in run_ids:
        run = plan.run(rid)
        if run.code is None:  # a plan from before code identities: nothing recorded
            continue
        recorded = {k: v.model_dump() for k, v in run.code.items()}
        changes = code_changes(recorded, run.architecture.as_mapping())
        if changes:
            raise UserError(
                f"run {rid}: {changes[0]}; rerun `olmoablate plan --replan {plan.spec_path}` to "
                f"record the new code (and `olmoablate submit --redo {rid}` if it already ran)"
            )


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
    """Send the runs of ``results.plan`` that need sending. Local: blocks until they finish (or
    Ctrl-C)."""
    if executor not in EXECUTORS:
        raise UserError(f"--executor {executor}: allowed values are {', '.join(EXECUTORS)}")
    redo = list(redo or [])
    if dry_run or test_only:
        # Exactly what the real command would decide, refuse and send (ledger read, not locked
        # and never written): the spec-change check, the runs, the local capacity check.
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
        check_spec(ledger, results.plan, redo)
        views = reconcile(results, ledger, sacct_max_age_s=0, require_scheduler=True)
        send, skip = decide(views, retry_failed=retry_failed, redo=redo, only=only)
        check_code(results.plan, send)
        send, skip = apply_leases(results, send, skip, redo)  # one identity is trained once per store
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
        check_spec(ledger, plan, redo)
        views = reconcile(results, ledger, sacct_max_age_s=0)
        send, skip = decide(views, retry_failed=retry_failed, redo=redo, only=only)
        check_code(plan, send)
        send, skip = apply_leases(results, send, skip, redo)  # one identity is trained once per store
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


# --------------------------------------------------------------------------------------------------
# What `submit` checks before it launches anything: the plan's budget and its overrides.
#
# Why before submitit is even imported: a plan over ``budget.max_gpu_hours`` must never reach the
# cluster (the refusal names the total and the limit), and ``submit --set`` must launch exactly
# the plan that `plan --set` made with those overrides, not a plan of the plain file.
# --------------------------------------------------------------------------------------------------


def results_for(spec: str, results_root: Path, overrides: list[str]) -> ResultsDir:
    """SPEC's results folder; a ``--set name=...`` override picks the folder of that name."""
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
    """Refuse when the plan exceeds budget.max_gpu_hours (the whole spec, or a size submitted)."""
    plan = results.plan
    sizes = None if only is None else {plan.run(r).size for r in only}
    over = over_budget(plan, sizes)
    if over:
        raise UserError(
            f"{results.plan_path}: {'; '.join(over)}; nothing submitted (raise the budget in the "
            "spec and re-plan, or plan fewer runs)"
        )
