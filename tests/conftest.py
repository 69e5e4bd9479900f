"""Shared fixtures: the real local Slurm cluster, tiny plans, and an uninterrupted local reference.

`slurm_cluster` starts scripts/slurm-dev-cluster.sh once per session with SLURM_NODES (2) nodes,
each a real slurmd in its own network namespace, so single-node and multi-node jobs run against
the same real cluster. It skips (with the script's reason) only when a cluster cannot be started
here, e.g. not root or no network namespaces; under CI=true it fails instead, so a CI machine
that lost its cluster cannot silently pass the Slurm tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fixtures.plan_fixture import make_plan, run_entry  # noqa: E402

CLUSTER_SCRIPT = REPO / "scripts" / "slurm-dev-cluster.sh"
PAIR = ("tiny-s0-baseline", "tiny-s0-shallow")
PAIR_STEPS = 20
SLURM_NODES = 2


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but the Slurm dev cluster is unavailable: {reason}")
    pytest.skip(f"Slurm dev cluster unavailable: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster() -> dict[str, Any]:
    """A running Slurm cluster of SLURM_NODES nodes (munge, slurmctld, slurmd, slurmdbd)."""
    if os.geteuid() != 0:
        _skip_or_fail("needs root to install and start the daemons")
    if shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        _skip_or_fail("no apt-get and no slurmctld on this machine")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), "start", "--nodes", str(SLURM_NODES)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except subprocess.TimeoutExpired:
        _skip_or_fail("scripts/slurm-dev-cluster.sh start did not finish in 600 s")
    if proc.returncode == 3:  # the script's "cannot run here" (no root, no namespaces)
        _skip_or_fail(proc.stderr.strip().splitlines()[-1])
    if proc.returncode != 0:
        _skip_or_fail(f"slurm-dev-cluster.sh start failed: {proc.stderr.strip()[-500:]}")
    return {"start_s": time.monotonic() - t0, "log": proc.stderr, "nodes": SLURM_NODES}


def pair_runs(steps: int = PAIR_STEPS, **kw: Any) -> list[dict[str, Any]]:
    """A tiny baseline/variant pair (vocab 1024): the variant is a shallower model."""
    return [
        run_entry(PAIR[0], "baseline", {}, steps=steps, pair_id="tiny-s0-shallow", **kw),
        run_entry(
            PAIR[1],
            "shallow",
            {"layers": {"n_layers": 2}},
            steps=steps,
            pair_id="tiny-s0-shallow",
            **kw,
        ),
    ]


def make_pair_plan(root: Path, steps: int = PAIR_STEPS, **kw: Any) -> Path:
    """Write data + results/fixture/plan.json under `root`; return the results dir."""
    return make_plan(root, pair_runs(steps, **kw)).parent


def ce_losses(results_dir: Path, run_id: str) -> list[tuple[int, float]]:
    """(step, train/CE loss) rows of metrics.jsonl, in file order (duplicates kept on purpose)."""
    rows = []
    for line in (results_dir / "runs" / run_id / "metrics.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if "train/CE loss" in row:
            rows.append((int(row["step"]), float(row["train/CE loss"])))
    return rows


def read_status(results_dir: Path, run_id: str) -> dict[str, Any]:
    try:
        return json.loads((results_dir / "runs" / run_id / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def wait_for(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll `pred` until truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="session")
def local_reference_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Results dir of the tiny pair trained once, uninterrupted, with the local executor."""
    from olmoablate.contract.layout import ResultsDir
    from olmoablate.launch.submit import submit

    results = make_pair_plan(tmp_path_factory.mktemp("reference"))
    res = submit(ResultsDir(results), "local", parallel=2, progress=False)
    assert sorted(r for r, _ in res.submitted) == sorted(PAIR)
    return results


@pytest.fixture(scope="session")
def local_reference(local_reference_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """(step, loss) rows of the uninterrupted local pair (real training job)."""
    results = local_reference_dir
    out = {}
    for rid in PAIR:
        assert read_status(results, rid).get("state") == "completed", read_status(results, rid)
        out[rid] = ce_losses(results, rid)
        assert [s for s, _ in out[rid]] == list(range(1, PAIR_STEPS + 1))
    return out
