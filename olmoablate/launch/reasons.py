"""One line of reason for every run that is not running or completed (`olmoablate status`).

Two sources, in this order: the training job's own word (``status.json`` ``reason``, written by the
training loop or the job wrapper: a signal, a cancel, a divergence, the requeue budget spent, an
exception before training started), and, when the job ended outside the training loop (SIGKILL,
out of memory, node failure: the run never wrote a final state), Slurm's accounting record: its
state and exit code or signal. Either way the line ends with where the run would resume and the
command that resumes it, because that is what the user wants to do next. No torch, no submitit.
"""

from __future__ import annotations

from olmoablate.contract.layout import ResultsDir
from olmoablate.contract.runfiles import RunStatus
from olmoablate.contract.runstates import ENDED_STATES, EXPLAINED_STATES, RunState
from olmoablate.launch.runstate import latest_checkpoint_step

#: Run states the training job writes only from inside the job: anything else means the job
#: ended without writing its final word.
OWN_FINAL_STATES = ENDED_STATES


def exit_text(record: dict[str, str]) -> str:
    """``signal 9`` / ``exit code 1`` from a sacct record (ExitCode, DerivedExitCode and the
    steps' StepExitCodes are ``code:signal``; a killed task's signal shows in its step, while the
    batch script's own ExitCode then reads ``9:0``): a signal wins over an exit code."""
    codes: list[int] = []
    signals: list[int] = []
    values = [str(record.get(f) or "") for f in ("ExitCode", "DerivedExitCode")]
    values += str(record.get("StepExitCodes") or "").split(",")
    for value in values:
        code, _, sig = value.partition(":")
        if code.isdigit():
            codes.append(int(code))
        if sig.isdigit():
            signals.append(int(sig))
    if any(signals):
        return f"signal {max(signals)}"
    if any(codes):
        return f"exit code {max(codes)}"
    return "exit code 0"


def resume_hint(results: ResultsDir, run_id: str, state: str, command: bool = True) -> str:
    """Where the run resumes and (unless ``command`` is False: the reason names it already)
    the command that does it."""
    step = latest_checkpoint_step(results.run(run_id).checkpoints)
    flag = " --retry-failed" if state == RunState.FAILED else ""
    cmd = f": olmoablate submit {results.root}{flag}" if command else ""
    if state == RunState.DIVERGED:
        return ""  # final: never retried (use --redo to start over)
    if step is None:
        return f"; no checkpoint, restarts from step 0{cmd}"
    return f"; resumable from checkpoint step {step}{cmd}"


def reason_for(
    results: ResultsDir,
    run_id: str,
    state: str,
    own: RunStatus,
    sacct: dict[str, str] | None,
    ledger_reason: str | None,
) -> str | None:
    """The reason line of one run in state ``state`` (None for running/completed/pending runs).

    ``own`` is the run's status.json, ``sacct`` Slurm's record of its last job (None when there
    is none), ``ledger_reason`` what the launcher recorded (local jobs, cancels).
    """
    if state not in EXPLAINED_STATES:
        return None
    step = own.step
    at = f" at step {step}" if step is not None and step > 0 else " before training started"
    cause: str | None = None
    if own.state == state or (own.state in OWN_FINAL_STATES and own.reason):
        cause = own.reason
    if cause is None and sacct is not None and sacct.get("State"):
        # The job ended outside the training loop: Slurm's word.
        slurm_state = str(sacct["State"]).split()[0]
        cause = f"{slurm_state}, {exit_text(sacct)}{at}"
    if cause is None:
        cause = own.reason or ledger_reason
    if cause is None:
        cause = f"job ended{at} without a final state"
    if "--redo" in cause:
        return cause  # the job's own way out: only starting over helps
    # the job's own line (contract/faults.py) may name the command already: then only where
    return f"{cause}{resume_hint(results, run_id, state, 'olmoablate submit' not in cause)}"


def requeued_reason(results: ResultsDir, run_id: str, own: RunStatus) -> str | None:
    """The reason of a run pending again after its job failed and Slurm requeued it (a node
    failure: ``NODE_FAIL`` with ``JobRequeue``): the job's own cause, without its way out (the
    requeue is the way out), and where it resumes. None when the run's last word is no failure.
    """
    if own.state != RunState.FAILED or not own.reason:
        return None
    cause = own.reason.split("; ")[0]
    step = latest_checkpoint_step(results.run(run_id).checkpoints)
    where = f"checkpoint step {step}" if step is not None else "step 0"
    return f"requeued by Slurm after: {cause}; resumes from {where} once its nodes are up"
