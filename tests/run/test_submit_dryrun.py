"""`submit --dry-run` decides exactly what `submit` would: the same runs, the same refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from olmoablate.plan.layout import ResultsDir
from olmoablate.run.state import Ledger
from olmoablate.testing.plans import PAIR, make_pair_plan

CLI = [sys.executable, "-m", "olmoablate"]


def _submit(results: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:/nonexistent"}  # no Slurm
    return subprocess.run(
        [*CLI, "submit", str(results), *extra], capture_output=True, text=True, env=env, timeout=120
    )


def test_dry_run_sends_and_refuses_what_submit_would(tmp_path: Path) -> None:
    results = make_pair_plan(tmp_path)
    done = results / "runs" / PAIR[0]
    done.mkdir(parents=True)
    (done / "status.json").write_text(json.dumps({"state": "completed", "step": 20}))
    with Ledger.locked(ResultsDir(results)) as ledger:
        ledger.record_submission(PAIR[0], "1", "slurm", "completed")
        ledger.data["spec_sha256"] = json.loads((results / "plan.json").read_text())["spec_sha256"]
    for executor in ("slurm", "local"):
        proc = _submit(results, "--executor", executor, "--dry-run")
        assert proc.returncode == 0, proc.stderr
        assert f"would submit {PAIR[1]}" in proc.stdout and f"skipped {PAIR[0]}: completed" in (
            proc.stdout
        )
        assert "would submit 1 job(s), skipped 1" in proc.stdout
    # only the run that would be sent is rendered
    assert [p.name for p in (results / "slurm").iterdir()] == ["tiny-s0.sbatch"]
    assert "--array" not in (results / "slurm" / "tiny-s0.sbatch").read_text()  # one job

    # the spec changed since the last submit: the dry run refuses as submit does
    with Ledger.locked(ResultsDir(results)) as ledger:
        ledger.data["spec_sha256"] = "f" * 64
    before = (results / "ledger.json").read_text()
    for executor in ("slurm", "local"):
        dry = _submit(results, "--executor", executor, "--dry-run")
        assert dry.returncode == 2 and "--redo RUN_ID" in dry.stderr, dry.stderr
    real = _submit(results, "--executor", "local")
    assert real.returncode == 2 and real.stderr == dry.stderr
    assert (results / "ledger.json").read_text() == before  # the dry run wrote nothing
    ok = _submit(results, "--executor", "slurm", "--dry-run", "--redo", PAIR[0])
    assert ok.returncode == 0 and "would submit 2 job(s), skipped 0" in ok.stdout, ok.stderr
