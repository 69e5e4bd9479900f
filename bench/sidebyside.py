"""Timing two versions of the code side by side, in fresh child processes (bench/report.py and
bench/results.py).

Why children: peak memory is only meaningful for a fresh process (``ru_maxrss`` of a child,
read with ``os.wait4`` so that each child's own peak is reported, not the largest so far), and
the old code (a git revision exported with ``git archive``) must not share imported modules
with the new. Why CPU time beside wall time: the machine is shared, so wall times move with the
load; the ratio of two runs measured in one go, alternating, is what counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The commit issue 22's metrics-store work started from (what "today" means in its numbers).
BASELINE_REV = "5a8b340"


def export_revision(rev: str, into: Path | None = None) -> Path:
    """``git archive`` of ``rev`` unpacked into a temporary folder; returns the folder (its
    ``olmoablate`` package is the old code)."""
    dest = Path(into or tempfile.mkdtemp(prefix=f"olmoablate-{rev}-"))
    tar = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev, "olmoablate"],
        check=True,
        capture_output=True,
    ).stdout
    tmp = dest / "code.tar"
    tmp.write_bytes(tar)
    with tarfile.open(tmp) as tf:
        try:
            tf.extractall(dest, filter="data")
        except TypeError:  # Python < 3.11.4: no extraction filters (our own git archive)
            tf.extractall(dest)  # noqa: S202
    tmp.unlink()
    return dest


@dataclass
class ChildResult:
    """What one child printed (its last line, JSON) and what the kernel measured of it."""

    out: dict
    wall_s: float
    cpu_s: float
    peak_rss_mb: float


def run_child(code_dir: Path, script: str, *args: str) -> ChildResult:
    """Run ``python -c script args`` with ``code_dir`` first on the path; its stdout's last line
    is JSON. Wall time is measured here around the whole process (start-up and imports count);
    CPU and peak RSS are the child's own (its pool workers' CPU included once they are reaped)."""
    import time

    env = {**os.environ, "PYTHONPATH": str(code_dir)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        # cwd: `python -c` puts the current folder ahead of PYTHONPATH, so run from this
        # worktree, the old code's child would import the new code
        [sys.executable, "-c", script, *args],
        env=env,
        cwd=code_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}): {err[-2000:]}")
    lines = [x for x in out.splitlines() if x.strip()]
    if not lines:
        raise RuntimeError(f"child printed nothing: {err[-2000:]}")
    return ChildResult(
        json.loads(lines[-1]),
        wall,
        usage.ru_utime + usage.ru_stime,
        usage.ru_maxrss / 1024,  # KiB on Linux
    )


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())
