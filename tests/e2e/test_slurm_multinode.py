"""Multi-node jobs on the REAL 2-node dev cluster (each node a slurmd in its own network, UTS and
mount namespace on a private bridge; scripts/slurm-dev-cluster.sh --nodes 2).

What must hold, as on a real cluster: a pair with ``topology.nodes: 2`` (one CPU task per node,
gloo, MASTER_ADDR = the first node's hostname) trains to the losses of one process with the same
data fingerprints; a 2-node job preempted (SIGTERM + SIGUSR2, submitit's order) or requeued by
Slurm itself (`scontrol requeue`) resumes bitwise equal to an uninterrupted 2-node run; a plain
`scancel` ends it `cancelled` with a checkpoint that the next `submit` resumes from; a node lost
mid-run (every process of n2 killed) ends NODE_FAIL, is requeued with a one-line reason and
resumes bitwise once the node is back.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from olmoablate.plan.identity import certificate_of
from olmoablate.plan.layout import ResultsDir
from olmoablate.run.state import Ledger
from olmoablate.run.submit import submit
from olmoablate.testing import REPO
from olmoablate.testing.cluster import (
    SLURM_NODES,
    assert_same_as_reference,
    cli,
    job_log,
    sacct_state,
    status_json,
    wait_mid_run,
    wait_states,
)
from olmoablate.testing.plans import (
    PAIR,
    PAIR_STEPS,
    ce_losses,
    make_plan,
    pair_runs,
    read_status,
    wait_for,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

NODES = 2


def two_node_plan(root: Path, run_ids: tuple[str, ...] = PAIR) -> Path:
    """The tiny pair (or some of its runs) on 2 nodes x 1 CPU task; returns the results dir."""
    runs = []
    for run in pair_runs():
        if run["run_id"] not in run_ids:
            continue
        run["topology"].update(nodes=NODES, gpus_per_node=0, cpu_processes=1)
        run["slurm"]["cpus_per_task"] = 1
        run["certificate"] = certificate_of(run, "tokens")  # topology is part of it
        runs.append(run)
    return make_plan(root, runs).parent


def fingerprints(results: Path, run_id: str) -> list[dict[str, Any]]:
    text = (results / "runs" / run_id / "fingerprints.jsonl").read_text()
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def two_node_reference(
    slurm_cluster: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The pair trained once on 2 nodes, uninterrupted (results dir)."""
    assert SLURM_NODES >= NODES
    results = two_node_plan(tmp_path_factory.mktemp("two-node"))
    res = submit(ResultsDir(results), "slurm")
    assert sorted(r for r, _ in res.submitted) == sorted(PAIR)
    wait_states(results, {"completed"}, timeout=420)
    return results


def test_dev_cluster_nodes_are_namespaces_without_a_route_out(
    slurm_cluster: dict[str, Any],
) -> None:
    """The network rule: addresses only on our bridge and in our namespaces, no route out."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    ours = sorted(ln.split()[0] for ln in names.stdout.splitlines() if ln.startswith("oaslurm-"))
    assert ours == [f"oaslurm-n{i}" for i in range(1, SLURM_NODES + 1)], names.stdout
    for ns in ours:
        routes = subprocess.run(
            ["ip", "-n", ns, "route", "show"], capture_output=True, text=True, check=True
        ).stdout
        assert "default" not in routes and routes.strip().startswith("198.18.0.0/24"), routes
        out = subprocess.run(
            ["ip", "-n", ns, "route", "get", "1.1.1.1"], capture_output=True, text=True
        )
        assert out.returncode != 0 and "unreachable" in out.stderr.lower(), out
    # Two real nodes with their own hostnames, and each resolves its peers.
    proc = subprocess.run(
        ["srun", "-N2", "-n2", "bash", "-c", 'echo "$(hostname) $(getent hosts n1)"'],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    hosts = sorted(ln.split()[0] for ln in proc.stdout.splitlines())
    assert hosts == ["n1", "n2"] and all("198.18.0.11" in ln for ln in proc.stdout.splitlines())


def test_two_node_pair_matches_one_process(
    two_node_reference: Path, local_reference_dir: Path, local_reference: dict[str, Any]
) -> None:
    results = two_node_reference
    ledger = Ledger.read(ResultsDir(results))
    for rid in PAIR:
        rows = ce_losses(results, rid)
        assert [s for s, _ in rows] == list(range(1, PAIR_STEPS + 1))
        ref = dict(local_reference[rid])
        # Same data, gradients averaged over 2 ranks: equal up to float reduction order. The first
        # steps agree to ~1e-6; later the tiny model's loss spikes amplify that noise, so only a
        # loose bound holds there (as for 2 tasks on one node; a DDP that did not average
        # gradients, or fed the ranks other data, is off by far more from step 2 on).
        diffs = {step: abs(loss - ref[step]) for step, loss in rows}
        for step, diff in diffs.items():
            tol = 1e-4 if step <= 7 else 1e-2 * abs(ref[step])
            assert diff <= tol, (rid, step, diffs)
        print(f"{rid}: max |loss - one process| = {max(diffs.values()):.2e}")
        assert fingerprints(results, rid) == fingerprints(local_reference_dir, rid)
        # Really two nodes: rank 1 ran on n2 in a world of 2, rendezvous at n1, our code.
        job_id = ledger.runs[rid]["job_ids"][-1]
        log0, log1 = job_log(results, job_id, 0), job_log(results, job_id, 1)
        assert "hostname=n1" in log0 and "global_rank=0(2)" in log0, log0[-1500:]
        assert "hostname=n2" in log1 and "global_rank=1(2)" in log1, log1[-1500:]
        assert f"from {REPO / 'olmoablate' / '__init__.py'}" in log0, log0[-1500:]
    script = next((results / "slurm").glob("*.sbatch")).read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script


def test_two_node_preemption_resumes_bitwise(two_node_reference: Path, tmp_path: Path) -> None:
    import submitit

    reference = {rid: ce_losses(two_node_reference, rid) for rid in PAIR}
    rid = PAIR[0]
    results = two_node_plan(tmp_path, (rid,))
    ((_, job_id),) = submit(ResultsDir(results), "slurm").submitted
    wait_mid_run(results, rid)
    # Preemption as submitit simulates it (and Slurm sends with send_user_signal): TERM, then USR2.
    submitit.SlurmJob(folder=results / "submitit", job_id=job_id)._interrupt(timeout=False)
    wait_states(results, {"completed"}, timeout=420)
    assert_same_as_reference(results, reference, (rid,))
    assert read_status(results, rid)["attempt"] >= 2
    assert f"Requeued job {job_id}" in job_log(results, job_id), job_log(results, job_id)[-2000:]
    assert Ledger.read(ResultsDir(results)).runs[rid]["job_ids"] == [job_id]


def test_two_node_scontrol_requeue_resumes(two_node_reference: Path, tmp_path: Path) -> None:
    reference = {rid: ce_losses(two_node_reference, rid) for rid in PAIR}
    rid = PAIR[0]
    results = two_node_plan(tmp_path, (rid,))
    ((_, job_id),) = submit(ResultsDir(results), "slurm").submitted
    wait_mid_run(results, rid)
    subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=30)
    # The job saw Slurm's restart count grow: it saved a checkpoint and left the requeue to Slurm.
    wait_for(
        lambda: "requeued by Slurm" in str(read_status(results, rid).get("reason")),
        120,
        "the job to note Slurm's requeue",
        interval=0.2,
    )
    wait_states(results, {"completed"}, timeout=420)
    assert_same_as_reference(results, reference, (rid,))
    st = read_status(results, rid)
    assert st["attempt"] == 2, st  # SLURM_RESTART_COUNT=1: the same job, started twice
    assert Ledger.read(ResultsDir(results)).runs[rid]["job_ids"] == [job_id]


def test_two_node_plain_scancel_ends_cancelled_and_resumes(
    two_node_reference: Path, tmp_path: Path
) -> None:
    reference = {rid: ce_losses(two_node_reference, rid) for rid in PAIR}
    rid = PAIR[0]
    results = two_node_plan(tmp_path, (rid,))
    ((_, job_id),) = submit(ResultsDir(results), "slurm").submitted
    wait_mid_run(results, rid)
    subprocess.run(["scancel", job_id], check=True, timeout=30)
    wait_for(lambda: read_status(results, rid).get("state") == "cancelled", 120, "cancelled")
    wait_for(lambda: sacct_state(job_id).startswith("CANCELLED"), 60, "sacct CANCELLED")
    views = wait_states(results, {"cancelled"}, timeout=60)
    st = read_status(results, rid)
    assert 3 <= st["step"] < PAIR_STEPS, st
    assert (results / "runs" / rid / "checkpoints" / f"step{st['step']}").is_dir()
    assert views[rid]["reason"] == (
        f"cancelled by scancel; resumable from checkpoint step {st['step']}: "
        f"olmoablate submit {results}"
    ), views[rid]
    # Never requeued by itself: still cancelled a while later, one job in the ledger.
    assert sacct_state(job_id).startswith("CANCELLED")
    assert Ledger.read(ResultsDir(results)).runs[rid]["job_ids"] == [job_id]
    out = cli("submit", str(results), "--executor", "slurm").stdout
    assert out.strip().endswith("submitted 1 job(s), skipped 0"), out
    wait_states(results, {"completed"}, timeout=420)
    assert_same_as_reference(results, reference, (rid,))


# ------------------------------------------------------------------------------ node failure

CLUSTER = REPO / "scripts" / "slurm-dev-cluster.sh"


def _node(action: str, i: int) -> None:
    subprocess.run(["bash", str(CLUSTER), action, str(i)], check=True, timeout=60)


def _node_state(name: str) -> str:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-n", name, "-o", "%T"], capture_output=True, text=True, timeout=30
    )
    return out.stdout.strip()


def test_two_node_node_loss_resumes_bitwise(two_node_reference: Path, tmp_path: Path) -> None:
    """Node n2 of a running 2-node job is lost the way a node loses power: every process in its
    namespace (slurmd, slurmstepd, the rank-1 task) is SIGKILLed. The surviving rank fails its
    collective at once and writes a one-line reason; Slurm marks n2 DOWN after SlurmdTimeout and
    ends the job NODE_FAIL, then requeues it (it waits for two nodes; `status` says why it is
    pending again); once the node is back the run finishes bitwise equal to an uninterrupted
    2-node run, every step exactly once."""
    reference = {rid: ce_losses(two_node_reference, rid) for rid in PAIR}
    rid = PAIR[0]
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
        # SlurmdTimeout (30 s) after the loss slurmctld marks n2 not responding ("*") and DOWN;
        # on a loaded machine the two may be seen in either order, or as DRAIN/FAIL.
        seen: list[str] = []

        def lost() -> bool:
            seen.append(_node_state("n2"))
            return seen[-1].startswith(("down", "drain", "fail")) or seen[-1].endswith("*")

        try:
            wait_for(lost, 240, "n2 DOWN or not responding in sinfo")
        except AssertionError as err:
            raise AssertionError(f"{err}; n2's states seen: {sorted(set(seen))}") from None
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
