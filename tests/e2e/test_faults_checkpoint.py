"""Checkpoints that fail safe, on the real local executor and the real training job.

A tiny run is killed hard (SIGKILL) after its checkpoints at steps 10 and 15; one real shard of
step15 is truncated, as a crash mid-write or a bad disk leaves it. The resubmit must resume
from step10 (the newest *complete* checkpoint), say so in status.json and in metrics.jsonl,
train no step twice and miss none, and end bitwise equal to the uninterrupted reference. When
no checkpoint is complete, the run stops with one line naming the checkpoint and the way out,
and the foreground `submit` exits non-zero.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from olmoablate.run.resume import (
    BROKEN_DIR,
    FALLBACK_FROM_METRIC,
    MANIFEST,
    RESUMED_FROM_METRIC,
    select_checkpoint,
)
from olmoablate.testing.plans import (
    PAIR,
    PAIR_STEPS,
    ce_losses,
    make_pair_plan,
    read_status,
    wait_for,
)

CLI = [sys.executable, "-m", "olmoablate"]
pytestmark = pytest.mark.slow


def _train_until_checkpoint(results: Path, run_id: str, step: int) -> None:
    """Run the real training job and SIGKILL it once checkpoint ``step`` is complete."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "olmoablate.run.job", str(results / "plan.json"), run_id],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    marker = results / "runs" / run_id / "checkpoints" / f"step{step}" / MANIFEST
    try:
        wait_for(marker.exists, 240, f"checkpoint step{step} of {run_id}", interval=0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _shard(checkpoint: Path) -> Path:
    shards = sorted((checkpoint / "model_and_optim").glob("*.distcp"))
    assert shards, list(checkpoint.rglob("*"))
    return max(shards, key=lambda p: p.stat().st_size)


def _truncate(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)


def _submit(results: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "submit", str(results), "--executor", "local", "--run", run_id, "--no-progress"]
        + list(extra),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_truncated_newest_checkpoint_falls_back_to_the_previous_one(
    tmp_path: Path, local_reference: dict[str, Any]
) -> None:
    results = make_pair_plan(tmp_path)
    rid = PAIR[0]
    ckpts = results / "runs" / rid / "checkpoints"
    _train_until_checkpoint(results, rid, 15)
    killed_at = read_status(results, rid)["step"]
    assert 15 <= killed_at < PAIR_STEPS
    assert select_checkpoint(ckpts).step == 15
    _truncate(_shard(ckpts / "step15"))
    sel = select_checkpoint(ckpts)
    assert sel.step == 10 and sel.refused[0][0] == 15 and "truncated" in sel.refused[0][2]
    # `status` already says where the run really resumes
    out = subprocess.run([*CLI, "status", str(results)], capture_output=True, text=True)
    assert "resumable from checkpoint step 10" in out.stdout, out.stdout

    proc = _submit(results, rid)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    st = read_status(results, rid)
    assert st["state"] == "completed", st
    assert "step15" in st["recovery"] and "resumed from checkpoint step 10" in st["recovery"], st
    # metrics.jsonl: every step exactly once, bitwise equal to the uninterrupted run
    assert ce_losses(results, rid) == local_reference[rid]
    rows = [json.loads(ln) for ln in (results / "runs" / rid / "metrics.jsonl").open()]
    noted = [r for r in rows if FALLBACK_FROM_METRIC in r]
    assert [(r["step"], r[FALLBACK_FROM_METRIC], r[RESUMED_FROM_METRIC]) for r in noted] == [
        (11, 15.0, 10.0)
    ]
    # the refused checkpoint is kept as evidence, outside OLMo-core's view
    assert [p.name.split("-")[0] for p in (ckpts / BROKEN_DIR).iterdir()] == ["step15"]
    out = subprocess.run([*CLI, "status", str(results)], capture_output=True, text=True)
    assert "resumed from checkpoint step 10" in out.stdout, out.stdout


def test_no_complete_checkpoint_stops_with_one_line_and_exit_1(tmp_path: Path) -> None:
    results = make_pair_plan(tmp_path)
    rid = PAIR[1]
    ckpts = results / "runs" / rid / "checkpoints"
    _train_until_checkpoint(results, rid, 5)
    for _, path in [(s, p) for s, p in ((c.name, c) for c in ckpts.glob("step*"))]:
        _truncate(_shard(path))
    proc = _submit(results, rid)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    st = read_status(results, rid)
    reason = st["reason"]
    assert st["state"] == "failed" and "\n" not in reason, st
    assert reason.startswith("failed before training started: corrupt checkpoint: step"), reason
    assert f"olmoablate submit {results} --redo {rid}" in reason, reason
    assert f"{rid}: failed: {reason}" in proc.stderr
    # nothing was moved or deleted: the user decides
    assert not (ckpts / BROKEN_DIR).exists()
    # a run from before manifests existed: torch's own shard index still catches the truncation
    for manifest in ckpts.glob(f"step*/{MANIFEST}"):
        manifest.unlink()
    proc = _submit(results, rid, "--retry-failed")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    reason = read_status(results, rid)["reason"]
    assert "corrupt checkpoint: step5" in reason and "torch's index needs" in reason, reason
