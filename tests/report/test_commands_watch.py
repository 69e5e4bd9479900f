"""`olmoablate watch` on the local executor with the REAL training job (issue 23, item 4): a
variant whose pre-registered design says futility at an interim look is cancelled resumably,
the reason is in its status, and the user can resume it (futility bounds are non-binding).

Synthetic truth: ``min_effect`` 5 nats -- no architecture of a tiny model improves train CE by
that much, so the interim look must stop for futility."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from olmoablate.plan.layout import ResultsDir
from olmoablate.plan.planfile import Plan
from olmoablate.report.commands import watch_once
from olmoablate.run.files import FutilityStop
from olmoablate.testing import plans as sp
from olmoablate.testing.plans import PAIR, make_pair_plan, read_status, wait_for

CLI = [sys.executable, "-m", "olmoablate"]
STEPS = 48
GATE = {
    "stage": "tiny",
    "metric": "train/CE loss",
    "min_effect": 5.0,
    "last_n": 1,
    "noise": {"floor": {"sd": 0.01, "known": True}},
    "sequential": {"interim": [0.25]},
    "max_step_time_overhead": None,
    "max_peak_memory_overhead": None,
}


@pytest.mark.slow
def test_watch_stops_a_futile_variant_and_the_user_resumes_it(tmp_path: Path) -> None:
    results = make_pair_plan(tmp_path, steps=STEPS)
    plan = Plan.load(results)
    gated = sp.build_plan(
        [r.as_json() for r in plan.runs], spec_name=plan.spec_name, workdir=str(tmp_path), gate=GATE
    )
    gated.write(results / "plan.json")
    proc = subprocess.Popen(
        [*CLI, "submit", str(results), "--executor", "local", "--parallel", "2", "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    rd = ResultsDir(results)
    acted: list[str] = []

    def look() -> bool:
        acted.extend(watch_once(rd))
        return bool(acted)

    wait_for(look, 240, "the watch's futility stop", interval=0.3)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, (out, err)
    line = "stopped for futility at look 1 of 2, 25% of tokens"
    assert acted and line in acted[0], acted
    watch_once(rd)  # settles the reason once the arm has ended; acts only once
    variant, baseline = read_status(results, PAIR[1]), read_status(results, PAIR[0])
    assert baseline["state"] == "completed"
    assert variant["state"] == "cancelled" and variant["step"] < STEPS, variant
    assert variant["reason"] == line
    stop = FutilityStop.of_status(variant)
    assert stop is not None and stop.look == 1 and stop.of == 2 and stop.runs == [PAIR[1]]
    assert (results / "runs" / PAIR[1] / "checkpoints").is_dir()
    views = {v["run_id"]: v for v in json.loads(_cli("status", str(results), "--json").stdout)}
    assert views[PAIR[1]]["state"] == "cancelled" and line in views[PAIR[1]]["reason"]
    saved = json.loads((results / "watch.json").read_text())["stops"]
    assert len(saved) == 1 and next(iter(saved.values()))["runs"] == [PAIR[1]]
    # The user overrides the non-binding stop: the arm resumes from its checkpoint and ends.
    again = _cli("submit", str(results), "--executor", "local", "--run", PAIR[1], "--no-progress")
    assert again.returncode == 0, again.stdout + again.stderr
    resumed = read_status(results, PAIR[1])
    assert resumed["state"] == "completed" and resumed["step"] == STEPS, resumed
    assert watch_once(rd) == []  # not cancelled again


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False)
