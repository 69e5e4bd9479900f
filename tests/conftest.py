"""Pytest fixtures only: the real local Slurm cluster and an uninterrupted local reference.

Helpers and builders (the tiny pair, plans, the CLI runner, Slurm helpers) live in the
:mod:`olmoablate.testing` package; a test imports them from there, never from this file.

`slurm_cluster` starts scripts/slurm-dev-cluster.sh once per session with SLURM_NODES (2) nodes,
each a real slurmd in its own network namespace, so single-node and multi-node jobs run against
the same real cluster. It skips (with the script's reason) only when a cluster cannot be started
here, e.g. not root or no network namespaces; under CI=true it fails instead, so a CI machine
that lost its cluster cannot silently pass the Slurm tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from olmoablate.testing import REPO
from olmoablate.testing.cluster import SLURM_NODES
from olmoablate.testing.plans import PAIR, PAIR_STEPS, ce_losses, make_pair_plan, read_status

CLUSTER_SCRIPT = REPO / "scripts" / "slurm-dev-cluster.sh"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the group markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Slurm tests share one cluster: under pytest-xdist's ``--dist loadgroup`` they run in
    order on one worker (scripts/test.sh), while the other workers take everything else."""
    for item in items:
        if item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.xdist_group("slurm"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse to run when the grouping did not take: pytest-xdist 3.8 groups by suffixing each
    test's node id with ``@<group>``, which pytest 9.2 silently ignores (its node ids are no
    longer ``_nodeid``). The Slurm tests then ran on both workers at once, and the node-loss test
    killed the other worker's jobs on n2: flaky CI with no error pointing at the cause."""
    if not getattr(session.config.option, "loadgroup", False):  # set in xdist workers only
        return
    ungrouped = [
        i.nodeid for i in session.items if i.get_closest_marker("slurm") and "@slurm" not in i.nodeid
    ]
    if ungrouped:
        raise pytest.UsageError(
            f"--dist loadgroup did not group {len(ungrouped)} Slurm test(s) (e.g. {ungrouped[0]}) "
            f"with pytest {pytest.__version__}: install the pinned dev extra (pytest<9)"
        )


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


@pytest.fixture(scope="session")
def local_reference_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Results dir of the tiny pair trained once, uninterrupted, with the local executor."""
    from olmoablate.plan.layout import ResultsDir
    from olmoablate.run.submit import submit

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
