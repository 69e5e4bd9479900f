"""The tiny baseline/variant pair most launcher, fault and Slurm tests train, and how they read
its runs back (losses, status, polling).

Moved out of tests/conftest.py so that conftest holds pytest fixtures only and a test imports
these by name (``from olmoablate.testing.pair import PAIR, make_pair_plan``) instead of importing
conftest as a module.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from olmoablate.testing.plans import make_plan, run_entry

PAIR = ("tiny-s0-baseline", "tiny-s0-shallow")
PAIR_STEPS = 20


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
