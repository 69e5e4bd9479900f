"""Helpers shared by the launcher tests (tests/run/test_submit.py and the tests against the real local
Slurm cluster, tests/e2e/test_slurm_*.py): the CLI with a return-code check, plans through the real
`plan` command, polling `status --json`, Slurm accounting, killing a job's training processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from olmoablate.plan.names import TERMINAL_STATES, RunState
from olmoablate.run.files import RunStatus
from olmoablate.run.slurm import task_device
from olmoablate.testing import MINIMAL_SPEC, REPO
from olmoablate.testing.plans import PAIR, PAIR_STEPS, ce_losses, read_status, wait_for

CLI = [sys.executable, "-m", "olmoablate"]
#: Nodes of the local dev cluster the ``slurm_cluster`` fixture starts (each a real slurmd in its
#: own network namespace), so single- and multi-node jobs run against the same cluster.
SLURM_NODES = 2


def cli(
    *args: str, cwd: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=300, cwd=cwd, check=False
    )
    if check:
        assert proc.returncode == 0, f"{args}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def plan_from_spec(root: Path, slurm_block: str) -> Path:
    """`olmoablate plan` of the tiny ``MINIMAL_SPEC`` plus ``slurm_block``; the results dir.

    Through the real `plan` command, so the plan carries exactly what the spec stage writes (the
    schema's defaults for whatever the spec leaves out), not a hand-built entry."""
    root.mkdir(parents=True, exist_ok=True)
    spec = root / "s.yaml"
    spec.write_text(MINIMAL_SPEC.read_text() + slurm_block)
    cli("plan", str(spec), "--results-root", str(root / "results"), cwd=REPO)
    return root / "results" / "minimal"


def status_json(results: Path) -> dict[str, dict[str, Any]]:
    out = cli("status", str(results), "--json", "--max-age", "0").stdout
    return {v["run_id"]: v for v in json.loads(out)}


def wait_states(
    results: Path, states: set[str], timeout: float, allow: Iterable[str] = ()
) -> dict[str, dict[str, Any]]:
    """Poll `olmoablate status --json` until every run is in `states`; fail fast on a failure."""

    def check() -> dict[str, dict[str, Any]] | None:
        views = status_json(results)
        bad = {r: v for r, v in views.items() if v["state"] in TERMINAL_STATES - {RunState.COMPLETED} - states}
        assert not bad, f"runs ended badly: {bad}"
        return views if all(v["state"] in states for v in views.values()) else None

    return wait_for(check, timeout, f"all runs in {states}", interval=1.0)


def wait_mid_run(results: Path, run_id: str, low: int = 3, high: int = PAIR_STEPS - 6) -> int:
    """Wait until `run_id` trains a step in [low, high) and return it (fails if it got past)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        st = read_status(results, run_id)
        step = st.get("step") or 0
        assert step < high or st.get("state") != RunState.RUNNING, f"{run_id} got past step {high}: {st}"
        assert st.get("state") not in TERMINAL_STATES, st
        if st.get("state") == RunState.RUNNING and low <= step < high:
            return int(step)
        time.sleep(0.05)
    raise AssertionError(f"never saw {run_id} running between steps {low} and {high}")


def assert_same_as_reference(
    results: Path, reference: dict[str, Any], run_ids: Iterable[str] = PAIR
) -> None:
    """Every step exactly once, each loss bitwise equal to the uninterrupted reference."""
    for rid in run_ids:
        rows = ce_losses(results, rid)
        steps = [s for s, _ in rows]
        assert steps == list(range(1, PAIR_STEPS + 1)), f"{rid}: duplicated/missing steps {steps}"
        assert rows == reference[rid], f"{rid}: losses differ from the uninterrupted run"


def job_log(results: Path, job_id: str, task: int = 0) -> str:
    path = results / "submitit" / f"{job_id}_{task}_log.out"
    return path.read_text() if path.exists() else ""


def sacct_state(job_id: str) -> str:
    """Slurm's accounting state of one job (polled: sacct lags the controller a little)."""
    proc = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def kill_training_processes(job_id: str) -> list[int]:
    """SIGKILL the training processes of one job (what the OOM killer does): the submitit
    workers whose environment says SLURM_JOB_ID is this job. Not `scancel --signal=KILL`: Slurm
    turns that into a full cancel (SIGTERM first)."""
    import re
    import signal

    rec = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True
    ).stdout
    raw = re.search(r"\bJobId=(\d+)", rec).group(1)  # an array task's own id
    killed = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"submitit.core._submit" in cmd and f"SLURM_JOB_ID={raw}".encode() in env:
            os.kill(int(entry), signal.SIGKILL)
            killed.append(int(entry))
    assert killed, f"no training process of job {job_id} (id {raw}) found"
    return killed


# A job target for tests/e2e/test_gpu_path.py: records the device environment each task gets.
#
# Imported by the local executor's job processes (``"olmoablate.testing.cluster:record"``,
# importable wherever olmoablate is, with no tests/ folder on ``PYTHONPATH``), so it must not
# need pytest. Every task writes what it sees, waits until all tasks of its job have written (the
# local controller stops the other tasks as soon as one returns), and rank 0 marks the run done.


def record(plan_path: str, run_id: str) -> dict[str, Any]:
    plan = json.loads(Path(plan_path).read_text())
    run_dir = Path(plan_path).parent / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    seen = {
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "LOCAL_RANK": local,
        "device": task_device(local, int(os.environ.get("LOCAL_WORLD_SIZE", "1")), os.environ),
    }
    (run_dir / f"env-rank{rank}.json").write_text(json.dumps(seen))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(run_dir.glob("env-rank*.json"))) < world:
        time.sleep(0.1)
    steps = next(int(r["steps"]) for r in plan["runs"] if r["run_id"] == run_id)
    if rank == 0:
        RunStatus.update(
            run_dir / "status.json", state=RunState.COMPLETED, step=steps, total_steps=steps
        )
    return {"state": RunState.COMPLETED, "run_id": run_id, "step": steps}
