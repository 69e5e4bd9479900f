"""Slurm side of the launcher: sbatch parameters from a plan run, rendering, squeue, sacct, scancel.

The sbatch script is always rendered by submitit's own ``_make_sbatch_string`` from the same
parameter dict we give ``SlurmExecutor.update_parameters``, so `--dry-run` shows exactly what a
real submission sends. sacct is asked once for all jobs of a spec and cached for a few seconds in
``results/<spec>/.sacct-cache.json``: `status` in a watch loop must not hammer slurmdbd.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olmoablate.errors import UserError
from olmoablate.io import read_json, write_json_atomic
from olmoablate.plan.layout import ResultsDir
from olmoablate.plan.names import RunState
from olmoablate.plan.planfile import RunEntry

SACCT_CACHE = ".sacct-cache.json"
# DerivedExitCode: the highest exit code / signal of the job's steps (a SIGKILLed training task
# shows as 0:9 there while the batch script's own ExitCode says 9:0).
SACCT_FIELDS = "JobID,State,ExitCode,DerivedExitCode,Elapsed,Start,End,NodeList"
CMD_TIMEOUT_S = 30


def sbatch_parameters(run: RunEntry, job_name: str) -> dict[str, Any]:
    """Map a plan run's `topology`/`slurm` blocks to submitit SlurmExecutor parameters.

    Names are sbatch-native (submitit's `_make_sbatch_string` arguments) so the same dict serves
    the real executor and the dry-run renderer. Every value is the plan's: no defaults here.
    """
    topo, slurm = run.topology, run.slurm
    params: dict[str, Any] = {
        "job_name": job_name,
        "time": slurm.time_min,
        "nodes": topo.nodes,
        "ntasks_per_node": topo.ranks_per_node,  # one task per GPU, or per CPU process
        "signal_delay_s": slurm.signal_delay_s,
    }
    if topo.on_gpu:
        params["gpus_per_node"] = topo.gpus_per_node
    if slurm.cpus_per_task:
        params["cpus_per_task"] = slurm.cpus_per_task
    for key in ("partition", "account", "qos", "constraint"):
        if value := getattr(slurm, key):
            params[key] = value
    if slurm.exclusive:
        params["exclusive"] = True
    if slurm.mem_gb:
        params["mem"] = f"{slurm.mem_gb}GB"
    if slurm.extra:
        params["additional_parameters"] = dict(slurm.extra)
    # The job's environment first, then the spec's own lines (module load...).
    setup = [f"export {k}={v}" for k, v in job_env(run).items()] + list(slurm.setup)
    if setup:
        params["setup"] = setup
    return params


#: glibc malloc settings for CPU training: never hand big blocks back to the kernel. A step's
#: logits (tokens x 100k vocab x fp32, hundreds of MB) are otherwise mmapped and unmapped every
#: step, and the page faults cost as much CPU as the step itself (measured: 1.77 s -> 0.87 s per
#: step of the demo model; `sys` time 0.96 s -> 0.08 s).
CPU_MALLOC_ENV: dict[str, str] = {
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_TRIM_THRESHOLD_": "4294967296",
    "MALLOC_TOP_PAD_": "536870912",
}


def job_env(run: RunEntry) -> dict[str, str]:
    """Environment a run's job process needs before Python starts (glibc reads it at start-up):
    the plan's threads per process (reproducible CPU numbers), and on CPU the malloc settings."""
    env = {"OMP_NUM_THREADS": str(run.training.threads)}
    if not run.topology.on_gpu:
        env.update(CPU_MALLOC_ENV)
    return env


def slurm_executor(folder: Path, run: RunEntry, params: dict[str, Any]) -> Any:
    """submitit's SlurmExecutor for one job array: ``params`` from :func:`sbatch_parameters`,
    the timeout requeue budget from the plan run (``max_num_timeout: 0`` = never requeue after a
    timeout; submitit's own default of 3 never applies)."""
    import submitit

    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=run.slurm.max_num_timeout)
    ex.update_parameters(**params)
    return ex


def submitit_command(folder: Path) -> str:
    """The command submitit puts after `srun` (same string as SlurmExecutor._submitit_command_str)."""
    return " ".join(
        [shlex.quote(sys.executable), "-u -m submitit.core._submit", shlex.quote(str(folder))]
    )


def render_sbatch(params: dict[str, Any], folder: Path, n_jobs: int) -> str:
    """Render the sbatch script submitit would submit for `n_jobs` runs (array when > 1)."""
    from submitit.slurm.slurm import _make_sbatch_string

    return _make_sbatch_string(
        command=submitit_command(folder),
        folder=folder,
        map_count=n_jobs if n_jobs > 1 else None,
        **params,
    )


def have_slurm() -> bool:
    return shutil.which("sbatch") is not None and shutil.which("sacct") is not None


def _run(cmd: list[str], timeout: float = CMD_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise UserError(f"`{cmd[0]}` not found: is this a Slurm login node?") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"`{' '.join(cmd)}` did not answer within {timeout:.0f} s") from None


def _query(cmd: list[str]) -> str | None:
    """stdout of a read-only Slurm query (sacct, squeue, scontrol), or None when it cannot be
    asked: not installed, no answer within ``CMD_TIMEOUT_S``, or a non-zero exit. Callers
    treat None as "unknown" and fall back to the run's own status file."""
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=CMD_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def test_only(script: Path) -> tuple[bool, str]:
    """`sbatch --test-only`: does Slurm consider this script satisfiable? (nothing is queued)."""
    proc = _run(["sbatch", "--test-only", str(script)])
    text = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    line = text[-1] if text else ""
    return proc.returncode == 0, line


def _expand_array_ids(job_id: str) -> list[str]:
    """`12_[0-2,5%4]` -> [12_0, 12_1, 12_2, 12_5]; plain ids unchanged."""
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job_id)
    if not m:
        return [job_id]
    base, spec = m.group(1), m.group(2).split("%")[0]
    out: list[str] = []
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out += [f"{base}_{i}" for i in range(int(lo), int(hi) + 1)]
        elif part:
            out.append(f"{base}_{part}")
    return out


def parse_sacct(text: str) -> dict[str, dict[str, str]]:
    """Parse `sacct --parsable2 -o SACCT_FIELDS` output into {job_id: record}.

    Step lines (``12_0.batch``, ``12_0.0``) are folded into their job's record as
    ``StepExitCodes`` (comma-separated ``code:signal``): a training task killed by signal 9
    shows only there (the job line says the batch script's ``9:0``).
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return {}
    header = lines[0].split("|")
    out: dict[str, dict[str, str]] = {}
    steps: dict[str, list[str]] = {}
    for line in lines[1:]:
        rec = dict(zip(header, line.split("|"), strict=False))
        job, dot, _ = rec.get("JobID", "").partition(".")
        if dot:
            steps.setdefault(job, []).append(rec.get("ExitCode", ""))
            continue
        for jid in _expand_array_ids(job):
            out[jid] = {**rec, "JobID": jid}
    for job, codes in steps.items():
        if job in out:
            out[job]["StepExitCodes"] = ",".join(c for c in codes if c)
    return out


def sacct_cache(results: ResultsDir) -> Path:
    return results.root / SACCT_CACHE


def sacct_states(
    results: ResultsDir, job_ids: list[str], max_age_s: float = 10.0
) -> dict[str, dict[str, str]] | None:
    """One sacct call for all `job_ids`, cached for `max_age_s`; None when sacct is unavailable.
    Purged jobs are absent (callers fall back to status.json)."""
    if not job_ids:
        return {}
    cache_path = sacct_cache(results)
    key = ",".join(sorted(set(job_ids)))
    try:
        cache = read_json(cache_path)
        if cache.get("key") == key and time.time() - float(cache.get("time", 0)) < max_age_s:
            return cache["records"]
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        pass
    out = _query(["sacct", "--parsable2", "-j", key, "-o", SACCT_FIELDS])
    if out is None:
        return None
    records = parse_sacct(out)
    write_json_atomic(cache_path, {"key": key, "time": time.time(), "records": records})
    return records


def invalidate_sacct_cache(results: ResultsDir) -> None:
    sacct_cache(results).unlink(missing_ok=True)


def scontrol_job(job_id: str) -> dict[str, str] | None:
    """``scontrol show job -o JOB`` as {Key: value} (JobState, Restarts...), None when it cannot
    be asked: the job tells a user's scancel (leaves RUNNING) from a requeue (Restarts grows)."""
    out = _query(["scontrol", "show", "job", "-o", job_id])
    if out is None or not out.strip():
        return None
    record: dict[str, str] = {}
    for token in out.split("\n", 1)[0].split():
        key, sep, value = token.partition("=")
        if sep and key not in record:
            record[key] = value
    return record


def squeue_states(job_ids: list[str]) -> dict[str, str] | None:
    """Live states of our jobs in one call (no accounting lag); None if the controller cannot be
    asked. Jobs that left the queue are absent."""
    if not job_ids:
        return {}
    listing = _query(["squeue", "-h", "-a", "-r", "-o", "%i|%T"])
    if listing is None:
        return None
    wanted = set(job_ids)
    out: dict[str, str] = {}
    for line in listing.splitlines():
        jid, _, state = line.strip().partition("|")
        for one in _expand_array_ids(jid):
            if one in wanted:
                out[one] = state
    return out


def scancel(job_id: str, graceful: bool) -> None:
    """Cancel a job. graceful: SIGTERM to the running steps only, so the training job saves a
    checkpoint and exits by itself (a plain scancel would SIGKILL it after KillWait)."""
    cmd = ["scancel", "--signal=TERM", job_id] if graceful else ["scancel", job_id]
    proc = _run(cmd)
    if proc.returncode != 0 and "already completed" not in proc.stderr.lower():
        raise UserError(f"scancel {job_id} failed: {proc.stderr.strip() or proc.stdout.strip()}")


# Slurm job state -> olmoablate state (before reconciling with the run's own status.json).
SLURM_STATE_MAP = {
    "PENDING": RunState.PENDING,
    "REQUEUED": RunState.PENDING,
    "REQUEUE_HOLD": RunState.PENDING,
    "REQUEUE_FED": RunState.PENDING,
    "CONFIGURING": RunState.RUNNING,
    "RUNNING": RunState.RUNNING,
    "COMPLETING": RunState.RUNNING,
    "RESIZING": RunState.RUNNING,
    "SUSPENDED": RunState.RUNNING,
    "STAGE_OUT": RunState.RUNNING,
    "SIGNALING": RunState.RUNNING,
    "COMPLETED": "ended",
    "CANCELLED": RunState.CANCELLED,
    "FAILED": RunState.FAILED,
    "TIMEOUT": RunState.FAILED,
    "OUT_OF_MEMORY": RunState.FAILED,
    "NODE_FAIL": RunState.FAILED,
    "BOOT_FAIL": RunState.FAILED,
    "DEADLINE": RunState.FAILED,
    "PREEMPTED": RunState.FAILED,
}


def map_slurm_state(state: str | None) -> str | None:
    if not state:
        return None
    return SLURM_STATE_MAP.get(state.split()[0].rstrip("+"), RunState.UNKNOWN)


# -- Which GPUs a task uses, Slurm or local: every task of a job sees all of the job's GPUs on its
# node and local rank r trains on ``cuda:r`` (OLMo-core's ``init_distributed``), so nothing may
# narrow ``CUDA_VISIBLE_DEVICES`` per task (submitit's ``export(set_cuda_visible_devices=True)``
# would). Locally each concurrent job (``--parallel``) gets its own slot of G GPUs; CPU runs none.


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """GPU ids this process may hand out: ``CUDA_VISIBLE_DEVICES`` when set (even empty), else
    one id per line of ``nvidia-smi -L``, else none."""
    env = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in env:
        return [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def check_local_capacity(visible: list[str], gpus_per_run: int, parallel: int) -> int:
    """How many runs may train at once locally; a GPU run that cannot get its GPUs is an error
    now (one line), not an invalid-device crash in every job."""
    if gpus_per_run <= 0:
        return parallel
    if len(visible) < gpus_per_run:
        raise UserError(
            f"topology.gpus_per_node = {gpus_per_run} but only {len(visible)} GPU(s) are visible "
            f"here (CUDA_VISIBLE_DEVICES={','.join(visible) or 'none'}); use --executor slurm or "
            "gpus_per_node: 0"
        )
    fit = len(visible) // gpus_per_run
    if parallel > fit:
        raise UserError(
            f"--parallel {parallel} runs x {gpus_per_run} GPUs each needs "
            f"{parallel * gpus_per_run} GPUs, {len(visible)} visible (allowed: --parallel <= {fit})"
        )
    return parallel


def check_local_topology(run_id: str, nodes: int) -> None:
    """Refuse a multi-node plan before anything is queued: the local executor starts every task
    on this machine, so an HSDP 2 x 8 plan would train as 1 x 8 (its tokens/s and MFU not the
    plan's). The job refuses it again at start."""
    if nodes > 1:
        raise UserError(
            f"runs[{run_id}].topology.nodes = {nodes} but the local executor runs on one machine "
            "(allowed with --executor local: nodes: 1; use --executor slurm for several nodes)"
        )


def local_slot_devices(visible: list[str], gpus_per_run: int, slot: int) -> str:
    """``CUDA_VISIBLE_DEVICES`` of the local job in ``slot`` (0-based): its own G GPUs."""
    if gpus_per_run <= 0:
        return ""
    start = slot * gpus_per_run
    chosen = visible[start : start + gpus_per_run]
    if len(chosen) < gpus_per_run:
        raise UserError(
            f"local slot {slot} needs GPUs {start}..{start + gpus_per_run - 1} of "
            f"{len(visible)} visible"
        )
    return ",".join(chosen)


def task_device(local_rank: int, local_world_size: int, environ: Mapping[str, str]) -> str:
    """The device of one task under the rule above; raises when the task cannot see its GPU
    (e.g. a cluster that binds one GPU per task), before OLMo-core fails with a bare ordinal."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        n = len([d for d in visible.split(",") if d.strip()])
        if n < local_world_size:
            raise RuntimeError(
                f"task with local rank {local_rank} sees {n} GPU(s) "
                f"(CUDA_VISIBLE_DEVICES={visible!r}) but {local_world_size} tasks share this "
                "node: every task must see all of the node's GPUs (no per-task GPU binding)"
            )
    return f"cuda:{local_rank}"
