"""Process identity before any signal (olmoablate.run.state): a ledger whose pid belongs to an
unrelated, real process - a reused pid after a reboot, results copied between machines of the
same hostname - reads "not running", and `olmoablate cancel` never signals that process. The
trainer lock built on it: one training process per run folder, seen by `status`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from olmoablate.plan.layout import ResultsDir
from olmoablate.run.state import Ledger, identity, is_same_process
from olmoablate.testing.plans import PAIR, make_pair_plan

CLI = [sys.executable, "-m", "olmoablate"]


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "300"])


def test_identity_is_start_time_boot_and_command(tmp_path: Path) -> None:
    proc = _sleeper()
    try:
        me = identity(proc.pid)
        assert me is not None and me["start_ticks"] > 0 and me["boot_id"]
        assert is_same_process(proc.pid, me)
        assert not is_same_process(proc.pid, {**me, "start_ticks": me["start_ticks"] - 1})
        assert not is_same_process(proc.pid, {**me, "boot_id": "another-boot"})
        assert not is_same_process(proc.pid, {**me, "cmdline_sha256": "0" * 16})
        assert not is_same_process(proc.pid, None)  # not a local job's command line
    finally:
        proc.kill()
        proc.wait()
    assert identity(proc.pid) is None and not is_same_process(proc.pid, me)


def _point_ledger_at(results: Path, pid: int, ident: dict | None) -> None:
    with Ledger.locked(ResultsDir(results)) as ledger:
        for rid in PAIR:
            ledger.record_submission(
                rid, str(pid), "local", "running", host=socket.gethostname(), identity=ident
            )


def test_cancel_never_signals_an_unrelated_process(tmp_path: Path) -> None:
    results = make_pair_plan(tmp_path)
    victim = _sleeper()
    try:
        real = identity(victim.pid)
        assert real is not None
        # 1. a ledger from an older olmoablate (no identity) pointing at the reused pid
        # 2. a ledger whose recorded process started at another time (same pid, same host)
        for ident in (None, {**real, "start_ticks": real["start_ticks"] + 12345}):
            _point_ledger_at(results, victim.pid, ident)
            views = json.loads(
                subprocess.run(
                    [*CLI, "status", str(results), "--json"], capture_output=True, text=True
                ).stdout
            )
            assert {v["state"] for v in views} == {"interrupted"}, views
            out = subprocess.run(
                [*CLI, "cancel", str(results)], capture_output=True, text=True, timeout=60
            )
            assert out.returncode == 0, out
            assert "SIGTERM" not in out.stdout, out.stdout
            time.sleep(0.3)
            assert victim.poll() is None, "cancel signalled an unrelated process"
        # The same ledger with the process's true identity: it *is* the job, and is signalled.
        _point_ledger_at(results, victim.pid, real)
        out = subprocess.run([*CLI, "cancel", str(results)], capture_output=True, text=True)
        assert f"SIGTERM to local job {victim.pid}" in out.stdout, out.stdout
        assert victim.wait(timeout=10) == -15
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    assert os.path.exists(results / "ledger.json")


_HOLD = """
import sys, time
from pathlib import Path
from olmoablate.plan.layout import RunDir
from olmoablate.run.state import trainer_lock
with trainer_lock(RunDir(Path(sys.argv[1]), "r")):
    print("held", flush=True)
    time.sleep(300)
"""


def test_trainer_lock_is_one_process_per_run_folder(tmp_path: Path) -> None:
    """The trainer lock (issue 35): held by one process, seen by `status` without taking it,
    refused to a second trainer with one line naming the holder, gone with the holder's process
    (kill -9 included), re-entrant inside one process."""
    from olmoablate.plan.layout import RunDir
    from olmoablate.run.state import RunBusyError, signal_trainer, trainer_holder, trainer_lock

    run = RunDir(tmp_path / "r", "r")
    assert trainer_holder(run) is None  # no file yet
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(run.path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        seen = trainer_holder(run)
        assert seen is not None and seen.pid == holder.pid and seen.host == socket.gethostname()
        assert trainer_holder(run) is not None  # probing twice takes nothing
        t0 = time.monotonic()
        try:
            with trainer_lock(run, wait_s=0.3):
                raise AssertionError("a second holder got the lock")
        except RunBusyError as err:
            line = str(err)
        assert time.monotonic() - t0 < 5 and "\n" not in line
        assert f"pid {holder.pid} on {socket.gethostname()}" in line, line
        holder.kill()  # SIGKILL: the kernel drops the lock with the process
        holder.wait()
        assert trainer_holder(run) is None
        assert signal_trainer(run, 0) is None  # nobody to signal
        with trainer_lock(run), trainer_lock(run):  # re-entrant in one process
            seen = trainer_holder(run)
            assert seen is not None and seen.pid == os.getpid()
            assert signal_trainer(run, 0) == os.getpid()  # it is this very process
        assert trainer_holder(run) is None
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
