"""The store's leases (`olmoablate.run.state`): one run identity is trained once per store.

Fast tests on hand-made plans (the real concurrent `submit`s are in tests/e2e/test_store.py)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from olmoablate.plan.layout import ResultsDir
from olmoablate.plan.store import identify
from olmoablate.run.files import RunStatus
from olmoablate.run.launch import cancel
from olmoablate.run.state import Ledger, claim, lease_path, reconcile, store_locked
from olmoablate.testing import plans as sp
from olmoablate.testing.plans import run_entry, write_tokens

VERSIONS = {"olmoablate": "0.1.0", "ai2-olmo-core": "3.0.0", "torch": "2.13.0"}
BASE = "tiny-s0-baseline"


def _spec(store: Path, name: str, stride: int) -> ResultsDir:
    runs = [
        run_entry(BASE, "baseline", {}, pair_id="tiny-s0"),
        run_entry("tiny-s0-v", "v", {"depth_attention": {"stride": stride}}, pair_id="tiny-s0-v"),
    ]
    plan = sp.build_plan(runs, spec_name=name, workdir=str(store.parent))
    plan = plan.model_copy(update={"identity": identify(plan, plan.workdir, VERSIONS)})
    rd = ResultsDir(store / name)
    plan.write(rd.plan_path)
    return rd


@pytest.fixture
def store(tmp_path: Path) -> Path:
    write_tokens(tmp_path / "data" / "train.bin", 20_000, seed=1)
    write_tokens(tmp_path / "data" / "heldout.bin", 2_000, seed=2)
    return tmp_path / "results"


def test_a_live_lease_makes_the_other_spec_reuse(store: Path) -> None:
    a, b = _spec(store, "a", 2), _spec(store, "b", 1)
    ident = a.plan.identity
    assert ident is not None and b.plan.identity is not None
    assert ident.runs[BASE] == b.plan.identity.runs[BASE]
    with store_locked(a):
        assert claim(a, BASE) is None  # first: a trains it
    with Ledger.locked(a) as led:
        led.mark_queued(BASE, owner_pid=os.getpid(), host=socket.gethostname())
    assert lease_path(store, ident.runs[BASE]).is_file()
    with store_locked(b):
        assert claim(b, BASE) == f"a/runs/{BASE}"  # a's run is queued: b uses it
        assert claim(b, "tiny-s0-v") is None  # its own variant: b trains it
    assert b.run(BASE).reused_from == f"a/runs/{BASE}"
    assert b.run(BASE).path == a.run(BASE).path
    view = reconcile(b, Ledger.read(b))[BASE]
    assert view.state == "queued" and "reused from" in str(view.reason)
    # cancelling b never stops a's run
    actions = cancel(b, [BASE])
    assert actions and "cancel it there" in actions[0][1]
    assert not a.run(BASE).cancel_marker.exists()


def test_a_stale_lease_is_taken_over(store: Path) -> None:
    a, c = _spec(store, "a", 2), _spec(store, "c", 1)
    with store_locked(a):
        assert claim(a, BASE) is None
    with Ledger.locked(a) as led:
        led.record_submission(BASE, "999999", "local", "failed", host=socket.gethostname())
        led.set_state(BASE, "failed", "boom")
    RunStatus.update(a.own_run(BASE).status, run_id=BASE, state="failed", reason="boom")
    with store_locked(c):
        assert claim(c, BASE) is None  # a's run failed: c trains the identity itself
    ident = c.plan.identity
    assert ident is not None
    doc = lease_path(store, ident.runs[BASE]).read_text()
    assert '"spec": "c"' in doc
    assert c.run(BASE).reused_from is None


def test_older_plans_without_identities_train_as_before(store: Path) -> None:
    runs = [run_entry(BASE, "baseline", {}, pair_id="tiny-s0")]
    plan = sp.build_plan(runs, spec_name="old", workdir=str(store.parent))
    rd = ResultsDir(store / "old")
    plan.write(rd.plan_path)
    with store_locked(rd):
        assert claim(rd, BASE) is None
    assert not (store / ".store" / "leases").exists()


def _replanned(store: Path, name: str, lr: float) -> ResultsDir:
    """Spec ``name`` re-planned with another learning rate for both arms (same run ids)."""
    tr = {"optimizer": {"name": "adamw", "lr": lr}}
    runs = [
        run_entry(BASE, "baseline", {}, pair_id="tiny-s0", training=tr),
        run_entry(
            "tiny-s0-v", "v", {"depth_attention": {"stride": 2}}, pair_id="tiny-s0-v", training=tr
        ),
    ]
    plan = sp.build_plan(runs, spec_name=name, workdir=str(store.parent))
    plan = plan.model_copy(update={"identity": identify(plan, plan.workdir, VERSIONS)})
    rd = ResultsDir(store / name)
    plan.write(rd.plan_path)
    return rd


def test_a_lease_whose_owner_now_trains_another_identity_is_not_followed(store: Path) -> None:
    """The lease names a/<run>; a is re-planned (another lr) and that run id now trains a
    different identity, live: b must train its own copy, never use a's different run."""
    a, b = _spec(store, "a", 2), _spec(store, "b", 1)
    with store_locked(a):
        assert claim(a, BASE) is None
    a = _replanned(store, "a", 0.02)
    assert a.plan.identity is not None and b.plan.identity is not None
    assert a.plan.identity.runs[BASE] != b.plan.identity.runs[BASE]
    with Ledger.locked(a) as led:
        led.mark_queued(BASE, owner_pid=os.getpid(), host=socket.gethostname())
    with store_locked(b):
        assert claim(b, BASE) is None  # b trains its identity itself
    assert b.run(BASE).reused_from is None


def test_a_reused_run_whose_owner_moved_to_another_identity_is_trained_here(store: Path) -> None:
    """b reuses a's run (reused.json); a is then re-planned so that run is another identity:
    status must not show a's run as b's (it would never be trained), and submit's claim trains
    it in b."""
    a, b = _spec(store, "a", 2), _spec(store, "b", 1)
    with store_locked(a):
        assert claim(a, BASE) is None
    RunStatus.update(a.own_run(BASE).status, run_id=BASE, state="completed", reason=None)
    with store_locked(b):
        assert claim(b, BASE) == f"a/runs/{BASE}"
    assert reconcile(b, Ledger.read(b))[BASE].state == "completed"
    _replanned(store, "a", 0.02)
    view = reconcile(b, Ledger.read(b))[BASE]
    assert view.state not in ("completed", "diverged", "queued", "pending", "running"), view
    assert "identity" in str(view.reason)
    with store_locked(b):
        assert claim(b, BASE) is None
    assert not b.own_run(BASE).reused.exists()


def test_a_reuse_of_a_run_that_became_reused_itself_reads_the_run_that_trained(
    store: Path,
) -> None:
    """d planned while a's run was live (plan.json: reused from a); a's run then failed, b took
    the stale lease over and trained it, and a's retry found b's lease (reused.json). d must read
    b's finished run, not the failed partial files left in a's folder."""
    a, b = _spec(store, "a", 2), _spec(store, "b", 1)
    d = _spec(store, "d", 3)
    with store_locked(a):
        assert claim(a, BASE) is None
    with Ledger.locked(a) as led:
        led.record_submission(BASE, "999999", "local", "failed", host=socket.gethostname())
        led.set_state(BASE, "failed", "boom")
    RunStatus.update(a.own_run(BASE).status, run_id=BASE, state="failed", reason="boom")
    ident = d.plan.identity
    assert ident is not None
    plan = d.plan.model_copy(
        update={"identity": ident.model_copy(update={"reused": {BASE: f"a/runs/{BASE}"}})}
    )
    plan.write(d.plan_path)
    d = ResultsDir(d.root)
    with store_locked(b):
        assert claim(b, BASE) is None  # stale: b trains it
    RunStatus.update(b.own_run(BASE).status, run_id=BASE, state="completed", reason=None)
    with store_locked(a):
        assert claim(a, BASE) == f"b/runs/{BASE}"  # a's retry uses b's run
    assert a.run(BASE).path == b.own_run(BASE).path
    assert d.run(BASE).path == b.own_run(BASE).path
    assert reconcile(d, Ledger.read(d))[BASE].state == "completed"


def test_a_lease_whose_owner_the_scheduler_cannot_answer_for_is_not_taken_over(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """a's run is a Slurm job, running; the controller cannot be reached (squeue and sacct
    fail). Taking the lease over would train the identity a second time while a's job may well
    be running: b's submit stops with one line instead."""
    from olmoablate.errors import UserError
    from olmoablate.run import slurm as sl

    a, b = _spec(store, "a", 2), _spec(store, "b", 1)
    with store_locked(a):
        assert claim(a, BASE) is None
    with Ledger.locked(a) as led:
        led.record_submission(BASE, "4242", "slurm", "running")
    RunStatus.update(a.own_run(BASE).status, run_id=BASE, state="running", reason=None)
    monkeypatch.setattr(sl, "squeue_states", lambda ids: None)
    monkeypatch.setattr(sl, "sacct_states", lambda *a, **k: None)
    with store_locked(b), pytest.raises(UserError, match="Slurm"):
        claim(b, BASE)
    assert not b.own_run(BASE).status.exists()
    ident = b.plan.identity
    assert ident is not None
    assert '"spec": "a"' in lease_path(store, ident.runs[BASE]).read_text()


def test_a_run_folder_of_another_identity_is_not_resumed_under_the_new_one(store: Path) -> None:
    """a's run started as identity X (identity.json); its token file was then rewritten in place
    and a re-planned (same spec: no re-plan guard, no spec-hash check at submit), so the plan
    says Y. Resuming would continue X's checkpoint on Y's data and label the mix Y: submit
    stops in one line naming --redo; with --redo (folder moved aside) it trains Y afresh."""
    from olmoablate.errors import UserError
    from olmoablate.run.resume import write_identity
    from olmoablate.run.state import apply_leases

    a = _spec(store, "a", 2)
    write_identity(a, BASE)
    RunStatus.update(a.own_run(BASE).status, run_id=BASE, state="running", reason=None)
    write_tokens(store.parent / "data" / "train.bin", 20_000, seed=11)
    a = _spec(store, "a", 2)
    with store_locked(a), pytest.raises(UserError, match=f"--redo {BASE}"):
        apply_leases(a, [BASE], [])
    with store_locked(a):
        assert apply_leases(a, [BASE], [], redo=[BASE]) == ([BASE], [])


def test_redo_of_a_run_another_spec_trains_says_where_to_redo_it(store: Path) -> None:
    """b uses a's finished run; `submit --redo` of it in b cannot retrain it there (one identity
    is trained once per store): one line naming the spec that trains it, not a silent skip."""
    from olmoablate.errors import UserError
    from olmoablate.run.state import apply_leases

    a, b = _spec(store, "a", 2), _spec(store, "b", 1)
    with store_locked(a):
        assert claim(a, BASE) is None
    RunStatus.update(a.own_run(BASE).status, run_id=BASE, state="completed", reason=None)
    with store_locked(b), pytest.raises(UserError, match=f"a/runs/{BASE}.*--redo it there"):
        apply_leases(b, [BASE], [], redo=[BASE])
    with store_locked(b):  # without --redo: reused, as before
        assert apply_leases(b, [BASE], []) == ([], [(BASE, f"reused from {store}/a/runs/{BASE}")])
