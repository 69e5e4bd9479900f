"""Launcher without a cluster: SPEC resolution, sbatch rendering (--dry-run), sacct parsing,
ledger rules, and the local executor with the REAL training job (Ctrl-C, cancel, resume)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from olmoablate.errors import UserError
from olmoablate.plan.layout import ResultsDir
from olmoablate.plan.planfile import Plan, RunEntry
from olmoablate.run import slurm as sl
from olmoablate.run.job import DEBUG_STEP_SECONDS_ENV
from olmoablate.run.resume import decide
from olmoablate.run.state import Ledger, identity, reconcile
from olmoablate.run.submit import check_spec, submit
from olmoablate.testing.cluster import plan_from_spec
from olmoablate.testing.plans import (
    PAIR,
    PAIR_STEPS,
    ce_losses,
    make_pair_plan,
    read_status,
    wait_for,
)

CLI = [sys.executable, "-m", "olmoablate"]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=300, cwd=cwd, check=False
    )


# ------------------------------------------------------------------------------ CLI errors


def test_cli_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    proc = cli("submit", "nosuch", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "olmoablate plan SPEC" in proc.stderr
    make_pair_plan(tmp_path)
    proc = cli("submit", "fixture", "--executor", "pbs", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: --executor pbs: allowed values are local, slurm"
    )
    proc = cli("cancel", "fixture", "--run", "nope", cwd=tmp_path)
    assert proc.returncode == 2 and "--run nope: not a run of this plan" in proc.stderr
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------ sbatch rendering

SCALES = {
    # name: (nodes, gpus/node, time_min, partition, extra slurm fields)
    "1B": (1, 8, 720, "h100", {}),
    "3B": (2, 8, 1440, "h100", {"account": "olmo", "qos": "high", "constraint": "h100&ib"}),
    "7B": (
        4,
        8,
        2880,
        "h100-big",
        {"exclusive": True, "mem_gb": 1800, "extra": {"reservation": "abl"}},
    ),
}


def _scale_plan(tmp_path: Path) -> Path:
    from olmoablate.testing.plans import make_plan, run_entry

    runs = []
    for name, (nodes, gpus, time_min, partition, extra) in SCALES.items():
        for arm, arch in (("baseline", {}), ("sn", {"layers": {"n_layers": 2}})):
            run = run_entry(
                f"{name}-s0-{arm}", arm, arch, group_id=f"{name}-s0", pair_id=f"{name}-s0-sn"
            )
            run["topology"].update(nodes=nodes, gpus_per_node=gpus)
            run["slurm"].update(partition=partition, time_min=time_min, cpus_per_task=12, **extra)
            runs.append(run)
    return make_plan(tmp_path, runs).parent


def test_dry_run_renders_sbatch_for_1b_3b_7b(tmp_path: Path) -> None:
    results = _scale_plan(tmp_path)
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # no Slurm commands needed
    env["PATH"] = f"{Path(sys.executable).parent}:/nonexistent"
    proc = subprocess.run(
        [*CLI, "submit", str(results), "--executor", "slurm", "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "would submit 6 job(s)" in proc.stdout
    assert not (results / "ledger.json").exists()
    for name, (nodes, gpus, time_min, partition, _extra) in SCALES.items():
        text = (results / "slurm" / f"{name}-s0.sbatch").read_text()
        lines = {ln for ln in text.splitlines() if ln.startswith("#SBATCH")}
        expected = {
            "#SBATCH --array=0-1%2",  # both arms of the pair in ONE array
            f"#SBATCH --nodes={nodes}",
            f"#SBATCH --gpus-per-node={gpus}",
            f"#SBATCH --ntasks-per-node={gpus}",  # one task per GPU
            "#SBATCH --cpus-per-task=12",
            f"#SBATCH --time={time_min}",
            f"#SBATCH --partition={partition}",
            "#SBATCH --signal=USR2@120",
            f"#SBATCH --job-name=olmoablate-fixture-{name}-s0",
        }
        if name == "3B":
            expected |= {
                "#SBATCH --account=olmo",
                "#SBATCH --qos=high",
                "#SBATCH --constraint='h100&ib'",
            }
        if name == "7B":
            expected |= {"#SBATCH --exclusive", "#SBATCH --mem=1800GB", "#SBATCH --reservation=abl"}
        assert expected <= lines, expected - lines
        assert "srun --unbuffered" in text and "submitit.core._submit" in text
        assert "export OMP_NUM_THREADS=1" in text
        assert "MALLOC_MMAP_MAX_" not in text  # GPU runs keep glibc's defaults


def test_sbatch_parameters_cpu_topology() -> None:
    from olmoablate.testing.plans import run_entry

    run = run_entry("r", "baseline", {})
    run["topology"]["cpu_processes"] = 2
    run["slurm"]["mem_gb"] = 2
    params = sl.sbatch_parameters(RunEntry.model_validate(run), job_name="j")
    assert params["ntasks_per_node"] == 2 and "gpus_per_node" not in params
    assert params["mem"] == "2GB"
    text = sl.render_sbatch(params, Path("/tmp/x"), 1)
    assert "--array" not in text and "#SBATCH --ntasks-per-node=2" in text
    # CPU runs keep big blocks in the heap (see slurm.CPU_MALLOC_ENV); the spec's setup lines follow
    assert "export MALLOC_MMAP_MAX_=0" in text
    run["slurm"]["setup"] = ["module load cuda/12.4"]
    params = sl.sbatch_parameters(RunEntry.model_validate(run), job_name="j")
    text = sl.render_sbatch(params, Path("/tmp/x"), 1)
    assert text.index("export OMP_NUM_THREADS=1") < text.index("module load cuda/12.4")


# ------------------------------------------------------------------------------ sacct, states


def test_parse_sacct_expands_pending_arrays() -> None:
    text = (
        "JobID|State|ExitCode\n12_[0-2,5%4]|PENDING|0:0\n13_0|RUNNING|0:0\n14|CANCELLED by 0|0:0\n"
    )
    rec = sl.parse_sacct(text)
    assert sorted(rec) == ["12_0", "12_1", "12_2", "12_5", "13_0", "14"]
    assert sl.map_slurm_state(rec["14"]["State"]) == "cancelled"
    assert sl.map_slurm_state("REQUEUED") == "pending"
    assert sl.map_slurm_state("TIMEOUT") == "failed"


def _write(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def test_reconcile_and_decide_rules(tmp_path: Path) -> None:
    from olmoablate.testing.plans import make_plan, run_entry

    ids = ["done", "dead", "cancel", "fail", "live", "new", "div", "unwritten"]
    results = make_plan(tmp_path, [run_entry(i, "baseline", {}, steps=10) for i in ids]).parent
    ledger = Ledger(ResultsDir(results), {"runs": {}})
    finished = subprocess.Popen(["true"])
    finished.wait()
    dead_pid = finished.pid  # a process that has exited (and been reaped)
    for rid in ids:
        if rid != "new":
            ledger.record_submission(
                rid, str(dead_pid), "local", "running", host=socket.gethostname()
            )
    ledger.runs["live"]["jobs"][-1]["job_id"] = str(os.getpid())
    ledger.runs["live"]["jobs"][-1]["identity"] = identity(os.getpid())
    ledger.set_state("cancel", "cancelled")
    status = {
        "done": {"state": "running", "step": 10, "total_steps": 10},  # step count decides
        "dead": {"state": "running", "step": 4, "total_steps": 10},
        "fail": {"state": "failed", "step": 4},
        "div": {"state": "diverged", "step": 7},
        # killed after the last step's loss was logged, before its row was written (issue 35)
        "unwritten": {"state": "running", "step": 10, "total_steps": 10},
    }
    for rid, st in status.items():
        _write(results / "runs" / rid / "status.json", st)
    # ... and the final row on disk: "done" has it (a torn line after it does not count)
    rows = "".join(json.dumps({"step": s, "train/CE loss": 1.0}) + "\n" for s in range(11))
    (results / "runs" / "done" / "metrics.jsonl").write_text(rows + '{"step": 11, "tr')
    (results / "runs" / "unwritten" / "metrics.jsonl").write_text(rows.rsplit("{", 1)[0])
    views = reconcile(ResultsDir(results), ledger)
    assert {r: v.state for r, v in views.items()} == {
        "done": "completed",
        "dead": "interrupted",
        "cancel": "cancelled",
        "fail": "failed",
        "live": "running",
        "new": "missing",
        "div": "diverged",
        "unwritten": "interrupted",
    }
    assert "job ended at step 10 without a final state" in views["unwritten"].reason
    send, skip = decide(views, retry_failed=False, redo=[], only=None)
    assert send == ["dead", "cancel", "new", "unwritten"]
    assert dict(skip)["fail"].startswith("failed")
    send, _ = decide(views, retry_failed=True, redo=["div"], only=None)
    assert send == ["dead", "cancel", "fail", "new", "div", "unwritten"]
    with pytest.raises(UserError, match="--redo live: run is running"):
        decide(views, retry_failed=False, redo=["live"], only=None)


def test_changed_spec_is_refused_without_redo(tmp_path: Path) -> None:
    results = make_pair_plan(tmp_path)
    plan = Plan.load(results)
    ledger = Ledger(ResultsDir(results), {"runs": {}, "spec_sha256": "a" * 64})
    ledger.record_submission(PAIR[0], "1", "local", "completed")
    with pytest.raises(UserError, match=r"spec_sha256 .* differs .* --redo RUN_ID"):
        check_spec(ledger, plan, redo=[])
    check_spec(ledger, plan, redo=[PAIR[0]])
    assert ledger.data["spec_sha256"] == plan.spec_sha256


# ------------------------------------------------------------------------------ local executor


def _start_submit(results: Path, *extra: str, step_seconds: float = 0.0) -> subprocess.Popen[str]:
    """`submit --executor local` in its own session; ``step_seconds`` slows each training step
    (wall time only) so that a test interrupting the runs mid-way does not race a busy machine."""
    env = {**os.environ, DEBUG_STEP_SECONDS_ENV: str(step_seconds)}
    return subprocess.Popen(
        [*CLI, "submit", str(results), "--executor", "local", "--parallel", "2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # like a terminal: SIGINT goes to this process only
        # A terminal's Ctrl-C reaches a process whose SIGINT is the default; a test run started in
        # the background (`cmd &` in a script, nohup) inherits SIGINT ignored, and Python then
        # installs no KeyboardInterrupt handler at all: the Ctrl-C would be a silent no-op.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.slow
def test_local_ctrl_c_leaves_runs_resumable_and_resume_is_exact(
    tmp_path: Path, local_reference: dict[str, Any]
) -> None:
    results = make_pair_plan(tmp_path)
    proc = _start_submit(results, step_seconds=0.5)
    wait_for(
        lambda: all((read_status(results, r).get("step") or 0) >= 3 for r in PAIR),
        120,
        "both runs at step >= 3",
        interval=0.1,
    )
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err
    for rid in PAIR:
        st = read_status(results, rid)
        assert st["state"] == "cancelled" and 3 <= st["step"] < PAIR_STEPS, st
        assert (results / "runs" / rid / "checkpoints" / f"step{st['step']}").is_dir()
    views = json.loads(cli("status", str(results), "--json").stdout)
    assert {v["state"] for v in views} == {"cancelled"}
    # Resume: same command again finishes both runs from their checkpoints, bitwise equal.
    proc = _start_submit(results, "--no-progress")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "submitted 2 job(s), skipped 0" in out, (out, err)
    for rid in PAIR:
        assert ce_losses(results, rid) == local_reference[rid]
    # Completed runs are never resubmitted.
    again = cli("submit", str(results), "--executor", "local")
    assert again.stdout.strip().endswith("submitted 0 job(s), skipped 2"), again.stdout
    views = {v["run_id"]: v for v in json.loads(cli("status", str(results), "--json").stdout)}
    for rid in PAIR:
        v = views[rid]
        assert v["state"] == "completed" and v["step"] == v["total_steps"] == PAIR_STEPS
        assert v["attempts"] == 2 and v["executor"] == "local" and v["last_loss"] is not None


@pytest.mark.slow
def test_local_cancel_one_run_from_another_process(tmp_path: Path) -> None:
    results = make_pair_plan(tmp_path)
    proc = _start_submit(results, "--no-progress", step_seconds=0.5)
    wait_for(
        lambda: (read_status(results, PAIR[1]).get("step") or 0) >= 2, 120, "step 2", interval=0.1
    )
    out = cli("cancel", str(results), "--run", PAIR[1])
    assert out.returncode == 0 and "cancelled 1 run(s)" in out.stdout, out
    sub_out, sub_err = proc.communicate(timeout=300)
    assert proc.returncode == 0, (sub_out, sub_err)
    assert read_status(results, PAIR[0])["state"] == "completed"
    st = read_status(results, PAIR[1])
    assert st["state"] == "cancelled" and st["step"] < PAIR_STEPS, st
    views = {v["run_id"]: v for v in json.loads(cli("status", str(results), "--json").stdout)}
    assert views[PAIR[1]]["state"] == "cancelled" and views[PAIR[0]]["state"] == "completed"
    assert Ledger.read(ResultsDir(results)).runs[PAIR[1]]["state"] == "cancelled"


# ------------------------------------------------------------------------------ job wrapper


def test_train_run_decisions_without_a_scheduler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TrainRun's own decisions, with an in-process target (no training, no submitit handler):
    terminal states pass through, a cancel marker wins, and repeated interruptions without
    progress end as failed instead of requeueing for ever. The job reads its plan entry typed
    (``Plan.load``): an entry it cannot read fails the run with that one line as the reason."""
    from olmoablate.run.task import TrainRun
    from olmoablate.testing.plans import make_plan, run_entry

    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    monkeypatch.setenv("SUBMITIT_LOCAL_JOB_ID", "1")
    monkeypatch.setenv("SUBMITIT_LOCAL_GLOBALID", "0")
    monkeypatch.setenv("SUBMITIT_LOCAL_NTASKS", "1")
    monkeypatch.delenv("RANK", raising=False)
    outcomes: list[dict[str, Any]] = []

    def target(plan_path: str, run_id: str) -> dict[str, Any]:
        return outcomes.pop(0)

    plan_path = make_plan(tmp_path, [run_entry("r", "baseline", {})])
    results = plan_path.parent
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR2)}
    try:
        _train_run_sequence(
            results, TrainRun(str(plan_path), "r", str(results), target=target), outcomes
        )
        with pytest.raises(UserError, match="no run 'zz'"):
            TrainRun(str(plan_path), "zz", str(results), target=target)()
        why = read_status(results, "zz")["reason"]
        assert why.startswith("failed before training started: UserError: ") and "zz" in why
        # before training a plain retry repeats an unrecognised error: re-plan, then redo
        assert "--retry-failed" not in why and "--replan` then `olmoablate submit" in why, why
        assert (results / "runs" / "zz" / "error.log").is_file()
        assert outcomes == []  # the target was never called for it
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _train_run_sequence(tmp_path: Path, run: Any, outcomes: list[dict[str, Any]]) -> None:
    outcomes.append({"state": "diverged", "step": 3})
    assert run()["state"] == "diverged"
    usr2 = ["SIGUSR2"]  # a time-limit warning / preemption: the only stop that requeues
    for _ in range(3):
        outcomes.append({"state": "interrupted", "step": 0, "signals": usr2})
    assert run()["state"] == "interrupted"  # first interruption: would be requeued
    assert run()["state"] == "interrupted"
    assert run()["state"] == "interrupted"
    outcomes.append({"state": "interrupted", "step": 0, "signals": usr2})
    assert run()["state"] == "failed"  # no progress over 3 requeues
    assert read_status(tmp_path, "r")["state"] == "failed"
    # SIGTERM alone (no scheduler to ask here) is a user's stop: cancelled, never requeued.
    outcomes.append({"state": "interrupted", "step": 4, "signals": ["SIGTERM"]})
    assert run()["state"] == "cancelled"
    assert read_status(tmp_path, "r")["reason"] == "SIGTERM received: stopped by user"
    (tmp_path / "runs" / "r" / ".cancel-requested").touch()
    assert run()["state"] == "cancelled"  # marker seen before training even starts
    assert read_status(tmp_path, "r")["state"] == "cancelled"
    assert run.attempt == 7


def test_decide_stop_table() -> None:
    """The signal table of docs/slurm.md as the job wrapper decides it from what it observes
    (the rows are exercised end to end on the real cluster in tests/test_slurm_*.py)."""
    from olmoablate.run.resume import decide_stop

    running = {"JobState": "RUNNING", "Restarts": "0"}
    cancelled = {"JobState": "COMPLETING", "Restarts": "0"}  # plain scancel, seen from the job
    requeued = {"JobState": "COMPLETING", "Restarts": "1"}  # scontrol requeue, seen from the job
    rows = [
        (["SIGTERM"], True, running, "cancel"),  # olmoablate cancel (marker first)
        (["SIGTERM"], False, cancelled, "cancel"),  # scancel JOBID
        (["SIGTERM"], False, running, "cancel"),  # scancel --signal=TERM JOBID
        (["SIGUSR2"], False, running, "requeue"),  # time-limit warning
        (["SIGTERM", "SIGUSR2"], False, running, "requeue"),  # preemption (submitit's order)
        (["SIGTERM"], False, requeued, "slurm"),  # scontrol requeue / PreemptMode=REQUEUE
        (["SIGUSR2"], True, running, "cancel"),  # the user's cancel wins over a requeue
        ([], False, None, "stop"),  # stopped without a signal: resumable, not requeued
        (["SIGTERM"], False, None, "cancel"),  # local executor: SIGTERM is a user's stop
    ]
    for signals, marker, job, action in rows:
        got = decide_stop(signals, marker, job, restarts_at_start=0)
        assert got.action == action, (signals, marker, job, got)
    # local executor, its controller (the job pid) killed: the kernel's SIGTERM is no user's stop
    got = decide_stop(["SIGTERM"], False, None, 0, controller_gone=4242)
    assert got.action == "stop" and "its job process 4242 ended (killed?)" in got.reason
    assert decide_stop(["SIGTERM"], True, None, 0, controller_gone=4242).action == "cancel"
    # A job already restarted once by Slurm is not "requeued again" by its own restart count.
    assert decide_stop(["SIGTERM"], False, requeued, restarts_at_start=1).action == "cancel"


def test_max_num_timeout_zero_reaches_submitit_as_zero(tmp_path: Path) -> None:
    """Regression (issue 13): `slurm.max_num_timeout: 0` (legal: never requeue after a timeout)
    became 3 (`... or 3`). The real submitit executor the local pool builds gets 0, and so does
    the countdown submitit pickles with the job (what its timeout handler reads)."""
    import submitit

    from olmoablate.run.localpool import local_executor

    results = plan_from_spec(tmp_path, "slurm: {max_num_timeout: 0}\n")
    (run,) = [r for r in Plan.load(results).runs if r.is_baseline]
    ex = local_executor(tmp_path / "submitit", run)
    assert ex.max_num_timeout == 0
    job = ex.submit(divmod, 7, 2)
    delayed = submitit.helpers.DelayedSubmission.load(job.paths.submitted_pickle)
    assert delayed._timeout_countdown == 0
    assert job.result() == (3, 1)
    # The control: a spec that says nothing gets the schema's 3 (the value lives only there).
    results = plan_from_spec(tmp_path / "default", "")
    (run,) = [r for r in Plan.load(results).runs if r.is_baseline]
    assert local_executor(tmp_path / "s2", run).max_num_timeout == 3


def test_spec_without_signal_delay_renders_usr2_at_120(tmp_path: Path) -> None:
    """Regression (issue 13): a spec without `signal_delay_s` must give `--signal=USR2@120` (the
    schema's default), not launch/slurm.py's old fallback of 90; and a value the spec gives wins.
    The script is rendered by submitit's own sbatch writer from the executor parameters."""
    results = plan_from_spec(tmp_path, "slurm: {partition: cpu}\n")
    res = submit(ResultsDir(results), "slurm", dry_run=True)
    (script,) = res.rendered
    lines = script.read_text().splitlines()
    assert "#SBATCH --signal=USR2@120" in lines and "#SBATCH --partition=cpu" in lines
    results = plan_from_spec(tmp_path / "given", "slurm: {signal_delay_s: 45}\n")
    (script,) = submit(ResultsDir(results), "slurm", dry_run=True).rendered
    assert "#SBATCH --signal=USR2@45" in script.read_text().splitlines()


def test_status_reasons_from_own_word_and_from_slurm(tmp_path: Path) -> None:
    """The reason line: Slurm's state and signal when the job died outside the training loop,
    the job's own reason otherwise, each with the checkpoint it resumes from and the command."""
    from olmoablate.run.files import RunStatus
    from olmoablate.run.state import exit_text, reason_for

    ck = tmp_path / "runs" / "r" / "checkpoints"
    for step in (5, 10):
        for part in ("train/rank0.pt", "model_and_optim/.metadata", ".metadata.json"):
            (ck / f"step{step}" / part).parent.mkdir(parents=True, exist_ok=True)
            (ck / f"step{step}" / part).write_text("x")
    (ck / "step15" / "train").mkdir(parents=True)  # half-written (killed mid-save): not counted
    # What sacct printed here for an array task whose training process got SIGKILL.
    text = (
        "JobID|State|ExitCode|DerivedExitCode|Elapsed|Start|End|NodeList\n"
        "17_0|FAILED|9:0|0:0|00:00:40|x|y|n1\n"
        "17_0.batch|FAILED|9:0||00:00:40|x|y|n1\n"
        "17_0.0|CANCELLED|0:9||00:00:39|x|y|n1\n"
        "17_1|FAILED|1:0|1:0|00:00:40|x|y|n2\n"
    )
    records = sl.parse_sacct(text)
    assert sorted(records) == ["17_0", "17_1"] and records["17_0"]["StepExitCodes"] == "9:0,0:9"
    killed = records["17_0"]
    assert exit_text(killed) == "signal 9"
    assert exit_text(records["17_1"]) == "exit code 1"
    assert exit_text({"ExitCode": "1:0", "DerivedExitCode": "0:0"}) == "exit code 1"
    results = ResultsDir(tmp_path)
    running = RunStatus.model_validate({"state": "running", "step": 12, "reason": None})
    assert reason_for(results, "r", "failed", running, killed, None) == (
        f"FAILED, signal 9 at step 12; resumable from checkpoint step 10: "
        f"olmoablate submit {tmp_path} --retry-failed"
    )
    own = RunStatus.model_validate(
        {"state": "cancelled", "step": 11, "reason": "cancelled by scancel (Slurm job X)"}
    )
    cancelled = {"State": "CANCELLED by 0", "ExitCode": "0:15"}
    assert reason_for(results, "r", "cancelled", own, cancelled, None) == (
        f"cancelled by scancel (Slurm job X); resumable from checkpoint step 10: "
        f"olmoablate submit {tmp_path}"
    )
    early = RunStatus.model_validate(
        {"state": "failed", "step": 0, "reason": "failed before training started: OSError: x"}
    )
    assert reason_for(results, "q", "failed", early, {"State": "FAILED"}, None) == (
        "failed before training started: OSError: x; no checkpoint, restarts from step 0: "
        f"olmoablate submit {tmp_path} --retry-failed"
    )
    assert reason_for(results, "r", "running", running, None, None) is None
    done = RunStatus.model_validate({"state": "completed"})
    assert reason_for(results, "r", "completed", done, None, None) is None
