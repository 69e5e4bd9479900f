"""A node lost mid-run, on the REAL 2-node dev cluster (scripts/slurm-dev-cluster.sh).

Node n2 of a running 2-node job is lost the way a node loses power: every process in its
namespace (slurmd, slurmstepd, the rank-1 task) is SIGKILLed. What must hold: the surviving rank
fails its collective at once and writes a one-line reason; Slurm marks n2 DOWN after
SlurmdTimeout and ends the job NODE_FAIL; the run stays resumable (Slurm requeues the job, which
waits for two nodes; `status` says why it is pending again), and once the node is back the run
finishes bitwise equal to an uninterrupted 2-node run, every step exactly once.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import PAIR, REPO, ce_losses, read_status, wait_for
from slurm_helpers import assert_same_as_reference, cli, sacct_state, status_json, wait_states
from test_slurm_multinode import two_node_plan

from olmoablate.contract.layout import ResultsDir
from olmoablate.launch.submit import submit

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

CLUSTER = REPO / "scripts" / "slurm-dev-cluster.sh"


def _node(action: str, i: int) -> None:
    subprocess.run(["bash", str(CLUSTER), action, str(i)], check=True, timeout=60)


def _node_state(name: str) -> str:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-n", name, "-o", "%T"], capture_output=True, text=True, timeout=30
    )
    return out.stdout.strip()


def test_two_node_node_loss_resumes_bitwise(slurm_cluster: dict[str, Any], tmp_path: Path) -> None:
    rid = PAIR[0]
    ref = two_node_plan(tmp_path / "reference", (rid,))
    submit(ResultsDir(ref), "slurm")
    wait_states(ref, {"completed"}, timeout=420)
    reference = {rid: ce_losses(ref, rid)}

    results = two_node_plan(tmp_path / "lost", (rid,))
    ((_, job_id),) = submit(ResultsDir(results), "slurm").submitted
    ckpts = results / "runs" / rid / "checkpoints"
    wait_for(
        lambda: (
            (ckpts / "step5" / ".olmoablate-complete.json").exists()
            and (read_status(results, rid).get("step") or 0) >= 7
        ),
        300,
        "the 2-node run past its step-5 checkpoint",
        interval=0.1,
    )
    t0 = time.monotonic()
    _node("node-down", 2)
    try:
        st = wait_for(
            lambda: (s := read_status(results, rid)).get("state") == "failed" and s,
            120,
            "the surviving rank's own reason",
        )
        print(f"rank 0 failed {time.monotonic() - t0:.1f} s after the node loss: {st['reason']}")
        assert "\n" not in st["reason"] and "Traceback" not in st["reason"], st
        assert st["reason"].startswith("lost a peer rank at step "), st
        wait_for(lambda: _node_state("n2").startswith("down"), 180, "n2 DOWN in sinfo")
        wait_for(
            lambda: sacct_state(job_id) in ("NODE_FAIL", "PENDING", "REQUEUED", "FAILED"),
            120,
            "Slurm to end the job's attempt",
        )
        time.sleep(3)
        views = status_json(results)
        print(f"after {time.monotonic() - t0:.1f} s: sacct {sacct_state(job_id)}, {views[rid]}")
        view = views[rid]
        assert view["state"] in ("pending", "failed"), view
        assert view["reason"] and "\n" not in view["reason"], view
        if view["state"] == "pending":  # NODE_FAIL + JobRequeue: Slurm requeued it
            assert view["reason"].startswith("requeued by Slurm after: "), view
            assert "resumes from checkpoint step" in view["reason"], view
        history = subprocess.run(
            ["sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "State"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
        assert "NODE_FAIL" in history, history
    finally:
        _node("node-up", 2)
    if view["state"] == "failed":
        out = cli("submit", str(results), "--executor", "slurm", "--retry-failed").stdout
        assert "submitted 1 job(s)" in out, out
    wait_states(results, {"completed"}, timeout=600)
    assert_same_as_reference(results, reference, (rid,))
