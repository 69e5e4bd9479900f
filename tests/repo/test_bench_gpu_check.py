"""bench/gpu_check.py on a CPU box (issue 27): it cannot run here, so what can be checked is.

Without CUDA it must exit 2 with one line (never "skipped" with exit 0), and the specs it
plans on a GPU node must be ones `olmoablate plan` accepts, with the settings the checks rely
on (one GPU, metrics every 2 steps so the SIGTERM lands mid-run, the looped curriculum change
inside the 20 steps, the ``(loops=n)`` counts, the fewer-layer fallback).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from olmoablate.testing import REPO

SCRIPT = REPO / "bench" / "gpu_check.py"


def _module(out: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "OUT", out)
    return mod


def test_without_cuda_exits_2_with_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        env={**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and "CUDA is not available" in lines[0], proc.stdout
    assert json.loads((tmp_path / "gpu_check.json").read_text())["ok"] is False


@pytest.mark.parametrize("layers", [None, 8])
def test_the_specs_it_would_run_plan_as_the_checks_expect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layers: int | None
) -> None:
    mod = _module(tmp_path, monkeypatch)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    results, rid = mod.make_plan(layers)
    assert set(rid) == {"baseline", "sn_da", "looped"}
    runs = {r["arm"]: r for r in json.loads((results / "plan.json").read_text())["runs"]}
    for run in runs.values():
        topo = run["topology"]
        assert topo["gpus_per_node"] == 1 and topo["nodes"] == 1 and topo["metrics_interval"] == 2
        assert run["training"]["steps"] == mod.STEPS and run["training"]["compile"] == "auto"
        assert run["size_dims"]["n_layers"] == (layers or 16)
        assert run["peak_memory_gb"] > 0 and run["train_flops_per_token"] > 0
    looped = runs["looped"]
    assert looped["loop_counts"] == [1, 4, 8]
    curriculum = looped["architecture"]["looped"]["curriculum"]
    assert curriculum["start"] == 2 and curriculum["interval_steps"] < mod.STEPS
