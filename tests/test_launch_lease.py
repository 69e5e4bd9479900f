"""The store's leases (`olmoablate.launch.lease`): one run identity is trained once per store.

Fast tests on hand-made plans (the real concurrent `submit`s are in tests/test_store.py)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from fixtures.plan_fixture import run_entry, write_tokens

from olmoablate.contract.layout import ResultsDir
from olmoablate.launch.cancel import cancel
from olmoablate.launch.lease import claim, lease_path, store_locked
from olmoablate.launch.ledger import Ledger
from olmoablate.launch.reconcile import reconcile
from olmoablate.launch.runstate import mark_status
from olmoablate.report import synthetic_plan as sp
from olmoablate.store.identify import identify

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
    mark_status(a.own_run(BASE).status, run_id=BASE, state="failed", reason="boom")
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
