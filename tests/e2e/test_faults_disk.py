"""A full disk, for real: the run folder on a 3 MB tmpfs, filled by the run's own checkpoint.

The failure reason in status.json must be one line naming the root cause (No space left on
device), what was being written and where, and the command that continues; the full traceback
is kept (runs/<id>/error.log, or the job's log when even that cannot be written); the
foreground `submit` exits 1. After space is freed (the tmpfs grown), `--retry-failed` resumes
and finishes bitwise equal to the uninterrupted run. Skips, with the reason, where the test may
not mount a file system (not root, no CAP_SYS_ADMIN).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from olmoablate.testing.plans import PAIR, ce_losses, make_pair_plan, read_status

CLI = [sys.executable, "-m", "olmoablate"]
pytestmark = pytest.mark.slow


def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip() or proc.returncode}")


def _submit(results: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "submit", str(results), "--executor", "local", "--run", PAIR[0], "--no-progress"]
        + list(extra),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_full_disk_is_one_actionable_line_and_resumes(
    tmp_path: Path, local_reference: dict[str, Any]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    results = make_pair_plan(tmp_path)
    runs = results / "runs"
    _mount_tmpfs(runs, "3m")
    try:
        proc = _submit(results)
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stdout + proc.stderr
        st = read_status(results, PAIR[0])
        reason = st["reason"]
        print(f"reason: {reason}")
        assert st["state"] == "failed" and "\n" not in reason, st
        assert reason.startswith("disk full (No space left on device) writing checkpoint step"), (
            reason
        )
        assert f"under {runs / PAIR[0] / 'checkpoints'}" in reason, reason
        assert reason.endswith(f"free space, then olmoablate submit {results} --retry-failed")
        log = runs / PAIR[0] / "error.log"
        if log.exists():  # written when the failed write left room for it
            assert f"(traceback in {log})" in reason and "Traceback" in log.read_text()
        else:
            assert "(traceback in the job's log)" in reason, reason
        status = subprocess.run([*CLI, "status", str(results)], capture_output=True, text=True)
        assert f"{PAIR[0]}: failed: {reason}" in " ".join(status.stdout.split()), status.stdout
        # free space: grow the file system, then the way out the line names
        subprocess.run(["mount", "-o", "remount,size=64m", str(runs)], check=True)
        proc = _submit(results, "--retry-failed")
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        assert read_status(results, PAIR[0])["state"] == "completed"
        assert ce_losses(results, PAIR[0]) == local_reference[PAIR[0]]
    finally:
        subprocess.run(["umount", "-l", str(runs)], check=False)
