"""The store's leases: `submit` never trains one run identity twice, whichever spec asks.

Why a lease under one lock: two specs planned before either was submitted each plan their own
copy of a shared baseline (neither was running yet), and their two `submit`s may start at the
same moment. Every `submit` decides under the store's lock (``<store>/.store/lock``, fcntl, held
around the spec's own ledger lock, always in that order): for each run it is about to send, a
lease file ``<store>/.store/leases/<identity>.json`` names the spec and run that trains the
identity. A lease held by another spec's run that is live (queued, pending, running) or done
(completed, diverged) means this spec uses that run: `submit` writes ``runs/<id>/reused.json``
(``{"from": "<spec>/runs/<id>"}``) and sends nothing; every later stage reads that run's files as
its own (`olmoablate.contract.layout.ResultsDir.run`). A lease whose run failed, was cancelled or
is gone, or that now trains another identity (its spec re-planned: `olmoablate.store.owner`), is
stale and taken over. Marin's executor does the same with lease files and heartbeats;
here liveness comes from the owner's own reconciled state (`olmoablate.launch.reconcile`).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from olmoablate.contract.identity import is_run_place, short
from olmoablate.contract.layout import ResultsDir
from olmoablate.contract.runstates import DONE_STATES, LIVE_STATES
from olmoablate.errors import UserError
from olmoablate.io import file_lock, read_json, write_json_atomic
from olmoablate.launch.ledger import Ledger, now_iso
from olmoablate.launch.reconcile import reconcile
from olmoablate.store.owner import owner_problem, recorded_identity

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
