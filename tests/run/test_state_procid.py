"""Process identity before any signal (olmoablate.run.state): a ledger whose pid belongs to an
unrelated, real process - a reused pid after a reboot, results copied between machines of the
same hostname - reads "not running", and `olmoablate cancel` never signals that process."""

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
