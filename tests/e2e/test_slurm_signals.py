"""The rows of the signal table (docs/slurm.md) that tests/e2e/test_slurm_launch.py and
tests/e2e/test_slurm_multinode.py do not already cover, and `status` reasons, on the REAL cluster.

* `scancel --signal=TERM` (the user's graceful stop) ends `cancelled`, never requeued;
* a training process killed by signal 9 (what the OOM killer does; `kill -9` here) shows Slurm's FAILED and the
  signal, the step it died at and the checkpoint `--retry-failed` resumes from, and resumes
  bitwise; a timed-out run whose requeue budget (`slurm.max_num_timeout: 0`) is spent says so;
* a run that fails before training starts says that, with the exception's line.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from olmoablate.plan.identity import certificate_of
from olmoablate.plan.layout import ResultsDir
from olmoablate.run.job import DEBUG_STEP_SECONDS_ENV
from olmoablate.run.resume import latest_checkpoint_step
from olmoablate.run.state import Ledger
from olmoablate.run.submit import submit
from olmoablate.testing.cluster import (
    assert_same_as_reference,
    cli,
    job_log,
    kill_training_processes,
    sacct_state,
    status_json,
    wait_mid_run,
    wait_states,
)
from olmoablate.testing.plans import PAIR, make_plan, pair_runs, read_status, run_entry, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_scancel_signal_term_cancels_and_never_requeues(
    slurm_cluster: dict[str, Any], tmp_path: Path
) -> None:
    results = make_plan(tmp_path, [run_entry(PAIR[0], "baseline", {}, steps=20)]).parent
    ((rid, job_id),) = submit(ResultsDir(results), "slurm").submitted
    wait_mid_run(results, rid)
    subprocess.run(["scancel", "--signal=TERM", job_id], check=True, timeout=30)
    wait_for(lambda: read_status(results, rid).get("state") == "cancelled", 120, "cancelled")
    # The job ended by itself after its checkpoint (COMPLETED for Slurm), and stays ended.
    wait_for(lambda: sacct_state(job_id) == "COMPLETED", 60, "sacct COMPLETED")
    st = read_status(results, rid)
    assert (results / "runs" / rid / "checkpoints" / f"step{st['step']}").is_dir()
    view = status_json(results)[rid]
    assert view["state"] == "cancelled", view
    assert view["reason"] == (
        "SIGTERM received (scancel --signal=TERM): stopped by user; resumable from checkpoint "
        f"step {st['step']}: olmoablate submit {results}"
    ), view
    assert "Requeued" not in job_log(results, job_id)
    assert Ledger.read(ResultsDir(results)).runs[rid]["job_ids"] == [job_id]


def test_killed_and_timed_out_runs_say_why_and_retry_resumes(
    slurm_cluster: dict[str, Any],
    local_reference: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import submitit

    # No requeue after a timeout; a limit short enough that submitit counts a USR2 as a timeout
    # (past min(0.8 limit, limit - 10 min)), long enough that Slurm's own warning stays away.
    slurm = {"time_min": 5, "max_num_timeout": 0, "signal_delay_s": 30}
    runs = pair_runs()
    for run in runs:
        run["slurm"].update(slurm)
        run["certificate"] = certificate_of(run, "tokens")  # the slurm block is part of it
    results = make_plan(tmp_path, runs).parent
    # The tiny pair trains a step in ~40 ms (the whole run in ~1 s), so a USR2 or a kill sent
    # after the poll saw a mid-run step sometimes found the run already COMPLETED. Each step
    # sleeps 0.5 s while the runs are interrupted (wall time only; the losses stay bitwise
    # equal): wait_mid_run stops >= 6 steps before the end, so >= 3 s are left for the signal.
    # sbatch exports the submitting environment to the job.
    monkeypatch.setenv(DEBUG_STEP_SECONDS_ENV, "0.5")
    jobs = dict(submit(ResultsDir(results), "slurm").submitted)
    killed, timed_out = PAIR
    wait_mid_run(results, timed_out)
    submitit.SlurmJob(folder=results / "submitit", job_id=jobs[timed_out])._interrupt(timeout=True)
    wait_mid_run(results, killed, low=6)  # past the step-5 checkpoint
    kill_training_processes(jobs[killed])
    monkeypatch.delenv(DEBUG_STEP_SECONDS_ENV)  # the --retry-failed jobs below train at full speed
    views = wait_states(results, {"failed"}, timeout=180)
    hint = {}
    for rid in PAIR:
        ck = latest_checkpoint_step(results / "runs" / rid / "checkpoints")
        assert ck is not None and ck >= 3, rid
        hint[rid] = (
            f"; resumable from checkpoint step {ck}: olmoablate submit {results} --retry-failed"
        )
        assert views[rid]["reason"].endswith(hint[rid]), views[rid]
    died_at = read_status(results, killed)["step"]
    assert views[killed]["reason"] == f"FAILED, signal 9 at step {died_at}{hint[killed]}", views
    assert views[timed_out]["reason"].startswith(
        "timed out, requeue budget spent (slurm.max_num_timeout)"
    ), views[timed_out]
    assert "timed-out too many times" in views[timed_out]["reason"]
    # The table prints the same lines under it.
    table = cli("status", str(results), "--max-age", "0").stdout
    assert f"{killed}: failed: FAILED, signal 9 at step {died_at}" in table, table
    # --retry-failed resumes both from their checkpoints, bitwise equal to the uninterrupted run.
    out = cli("submit", str(results), "--executor", "slurm", "--retry-failed").stdout
    assert out.strip().endswith("submitted 2 job(s), skipped 0"), out
    wait_states(results, {"completed"}, timeout=420)
    assert_same_as_reference(results, local_reference)


def test_failure_before_training_says_why(slurm_cluster: dict[str, Any], tmp_path: Path) -> None:
    results = make_plan(tmp_path, [run_entry(PAIR[0], "baseline", {}, steps=20)]).parent
    (tmp_path / "data" / "train.bin").unlink()  # the data went away between plan and run
    ((rid, job_id),) = submit(ResultsDir(results), "slurm").submitted
    views = wait_states(results, {"failed"}, timeout=180)
    reason = views[rid]["reason"]
    assert reason.startswith("failed before training started: missing file ("), views[rid]
    assert "train.bin" in reason and "\n" not in reason, reason
    assert reason.endswith(
        f"then olmoablate submit {results} --retry-failed; no checkpoint, restarts from step 0"
    ), reason
    wait_for(lambda: sacct_state(job_id) == "FAILED", 60, "sacct FAILED")
