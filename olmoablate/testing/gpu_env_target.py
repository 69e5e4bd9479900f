"""A job target for tests/e2e/test_gpu_path.py: records the device environment each task gets.

Imported by the local executor's job processes (``"olmoablate.testing.gpu_env_target:record"``,
importable wherever olmoablate is, with no tests/ folder on ``PYTHONPATH``), so it must not
need pytest. Every task writes what it sees, waits until all tasks of its job have written (the
local controller stops the other tasks as soon as one returns), and rank 0 marks the run done.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from olmoablate.contract.runstates import RunState
from olmoablate.launch.devices import task_device
from olmoablate.launch.runstate import mark_status


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
        mark_status(run_dir / "status.json", state=RunState.COMPLETED, step=steps, total_steps=steps)
    return {"state": RunState.COMPLETED, "run_id": run_id, "step": steps}
