"""Regression (issue 13): every ``topology.data_parallel`` value that `validate` accepts on a CPU
topology trains through the real job, or `validate` rejects it in one line naming what is allowed.

The drift this guards against: ``hsdp`` passed `validate` while every job rejected it at start.
For each value and each small CPU topology (nodes x cpu_processes) the spec goes through the real
spec loader (what `validate` runs); an accepted topology is copied into a run entry the way `plan`
copies it (``Topology.model_dump()``) and trained by ``olmoablate.run.job`` - one process in
process, several under ``torchrun`` with gloo (one machine standing in for ``nodes`` nodes: the
job takes HSDP's replica count from the plan, not from the machine).

Topologies whose job is the same (same parallel wrapper, world size and HSDP replica count) are
trained once; that they really build the same train module is checked, not assumed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from olmoablate.errors import UserError
from olmoablate.plan.planfile import RunEntry
from olmoablate.run import trainer as cfgs
from olmoablate.run.job import run_job
from olmoablate.testing import REPO
from olmoablate.testing.plans import certify, make_plan, run_entry, typed

RUN_ID = "tiny-s0-baseline"
DATA_PARALLEL = ("ddp", "fsdp", "hsdp")
#: (nodes, cpu_processes) of the CPU topologies checked: one process, two on one node, two nodes.
CPU_TOPOLOGIES = ((1, 1), (1, 2), (2, 1))


def _spec(tmp_path: Path, topology: str) -> Path:
    text = f"""
name: dp
sizes: [tiny]
custom_sizes:
  tiny: {{d_model: 64, n_layers: 4, n_heads: 4, n_kv_heads: 2, mlp_hidden_size: 128, sliding_window: 32}}
variants: {{da: {{depth_attention: {{stride: 2}}}}}}
training:
  sequence_length: 64
  tokens: 4096
  global_batch_size: 512
  optimizer: {{lr: 1.0e-3}}
  data: {{paths: [x.bin]}}
topology: {topology}
"""
    path = tmp_path / "dp.yaml"
    path.write_text(text)
    return path


def _validate(tmp_path: Path, topology: str) -> dict[str, Any] | str:
    """The resolved topology `validate` accepts (as `plan` records it), or its error text."""
    from olmoablate.plan.load import load_spec

    try:
        loaded = load_spec(_spec(tmp_path, topology))
    except UserError as err:
        return str(err)
    return loaded.per_size["tiny"].topology.model_dump()


def _entry(topology: dict[str, Any]) -> dict[str, Any]:
    entry = run_entry(RUN_ID, "baseline", {}, steps=2, evaluation={"lm_sets": {}, "interval": 2})
    entry["topology"] = topology
    return certify(entry)


def _typed(topology: dict[str, Any]) -> RunEntry:
    return typed(_entry(topology))


def _job_key(topology: dict[str, Any]) -> tuple[str | None, int, int | None]:
    """What the job's parallel setup depends on: wrapper (None in one process), world size, and
    the HSDP replica count."""
    world = topology["nodes"] * topology["cpu_processes"]
    if world == 1:
        return (None, 1, None)
    dp = topology["data_parallel"]
    return (dp, world, topology["nodes"] if dp == "hsdp" else None)


def _train(root: Path, topology: dict[str, Any]) -> dict[str, Any]:
    """Train the tiny run with ``topology`` through the real job; return its summary.json."""
    plan = make_plan(root, [_entry(topology)], train_tokens=12_000, heldout_tokens=1_000)
    world = topology["nodes"] * topology["cpu_processes"]
    if world == 1:
        assert run_job(str(plan), RUN_ID)["state"] == "completed"
    else:
        torchrun = Path(sys.executable).with_name("torchrun")
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        proc = subprocess.run(
            [str(torchrun), "--standalone", f"--nproc-per-node={world}"]
            + ["-m", "olmoablate.run.job", str(plan), RUN_ID],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    run_dir = plan.parent / "runs" / RUN_ID
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == 2
    return json.loads((run_dir / "summary.json").read_text())


_TRAINED: dict[tuple[str | None, int, int | None], dict[str, Any]] = {}


@pytest.mark.slow
@pytest.mark.parametrize("data_parallel", DATA_PARALLEL)
def test_every_accepted_data_parallel_value_trains(
    data_parallel: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    accepted: list[dict[str, Any]] = []
    for nodes, procs in CPU_TOPOLOGIES:
        where = tmp_path_factory.mktemp(f"{data_parallel}-{nodes}x{procs}")
        result = _validate(
            where,
            f"{{gpus_per_node: 0, nodes: {nodes}, cpu_processes: {procs}, "
            f"data_parallel: {data_parallel}}}",
        )
        if isinstance(result, str):
            lines = result.strip().splitlines()
            assert len(lines) == 1, result
            assert "topology.data_parallel" in lines[0] and "allowed" in lines[0], lines[0]
            allowed = lines[0].split("allowed", 1)[1]
            assert data_parallel not in allowed and any(v in allowed for v in DATA_PARALLEL)
            continue
        assert result["data_parallel"] == data_parallel
        accepted.append(result)
    assert accepted, f"validate accepts {data_parallel} on no CPU topology"

    by_key: dict[tuple[str | None, int, int | None], list[dict[str, Any]]] = {}
    for topo in accepted:
        by_key.setdefault(_job_key(topo), []).append(topo)
    for key, topos in by_key.items():
        # Same job for every topology of a group: the train module built is the same.
        env = cfgs.Environment("cpu", key[1], key[1] > 1)
        built = {repr(cfgs.train_module_config(_typed(t), env)) for t in topos}
        assert len(built) == 1, topos
        if key not in _TRAINED:
            _TRAINED[key] = _train(tmp_path_factory.mktemp("train"), topos[0])
        execution = _TRAINED[key]["execution"]
        assert execution["device"] == "cpu" and execution["world_size"] == key[1]
        assert execution["data_parallel"] == key[0]  # None: one process, no wrapper


def test_validate_rejects_hsdp_on_one_node_naming_the_allowed_values(tmp_path: Path) -> None:
    message = _validate(
        tmp_path, "{gpus_per_node: 0, nodes: 1, cpu_processes: 2, data_parallel: hsdp}"
    )
    assert isinstance(message, str) and len(message.splitlines()) == 1
    assert "needs nodes >= 2" in message and "allowed on one node: fsdp, ddp" in message


def test_validate_rejects_an_unknown_data_parallel_value(tmp_path: Path) -> None:
    message = _validate(tmp_path, "{gpus_per_node: 0, data_parallel: zero}")
    assert isinstance(message, str) and len(message.splitlines()) == 1
    assert "topology.data_parallel" in message
    assert all(v in message for v in DATA_PARALLEL), message


def test_hsdp_world_that_does_not_split_over_nodes_is_a_one_line_error() -> None:
    """A job started with a world the plan's nodes cannot divide (e.g. a multi-node plan on the
    local executor) fails in one line before OLMo-core builds a device mesh."""
    topo = {"nodes": 3, "gpus_per_node": 0, "cpu_processes": 1, "data_parallel": "hsdp"}
    with pytest.raises(UserError, match=r"topology.data_parallel = 'hsdp'.*2 ranks.*nodes = 3"):
        cfgs.train_module_config(_typed(topo), cfgs.Environment("cpu", 2, True))


# ----------------------------------------------------------------------------- planned world


def _two_node_plan(root: Path) -> Path:
    topo = {"nodes": 2, "gpus_per_node": 0, "cpu_processes": 1, "data_parallel": "fsdp"}
    return make_plan(root, [_entry(topo)], train_tokens=4_000, heldout_tokens=1_000)


def test_job_refuses_a_world_other_than_the_plans(tmp_path: Path) -> None:
    """Issue 27, 4: a `nodes: 2, cpu_processes: 1` plan started as one process (what the local
    executor does on one machine) used to train with world size 1 and exit 0."""
    plan = _two_node_plan(tmp_path)
    with pytest.raises(UserError) as err:
        run_job(str(plan), RUN_ID)
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert "plans 2 ranks (nodes = 2 x cpu_processes = 1)" in message
    assert "started with 1 (WORLD_SIZE)" in message
    assert not (plan.parent / "runs" / RUN_ID / "metrics.jsonl").exists()


def test_local_submit_refuses_a_multi_node_plan_before_anything_runs(tmp_path: Path) -> None:
    plan = _two_node_plan(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "submit", str(plan.parent), "--executor", "local"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "topology.nodes = 2" in lines[0], proc.stderr
    assert "--executor slurm" in lines[0]
    assert not (plan.parent / "runs" / RUN_ID / "status.json").exists()
