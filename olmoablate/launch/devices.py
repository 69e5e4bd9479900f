"""Which GPUs a training task uses: one rule for Slurm and local, one or many GPUs per node.

The rule: **every task of a job sees all of the job's GPUs on its node, and the task with local
rank r trains on ``cuda:r``**. That is what OLMo-core's ``init_distributed`` does
(``torch.cuda.set_device(f"cuda:{LOCAL_RANK}")``), so nothing may narrow ``CUDA_VISIBLE_DEVICES``
to one device per task (submitit's ``export(set_cuda_visible_devices=True)`` does, which turns
``cuda:r`` into an invalid ordinal on every rank but local rank 0).

* Slurm: ``--gpus-per-node=G`` with G tasks per node; Slurm gives every task of the step the
  node's G GPUs, so ``cuda:r`` is the r-th of them.
* Local executor: the launcher gives each concurrently running job (``--parallel N``) its own
  slot of G consecutive GPUs out of those this process may use (``CUDA_VISIBLE_DEVICES`` when set,
  else all of ``nvidia-smi -L``); CPU runs (``gpus_per_node: 0``) get none, so they never touch a
  GPU. Inside the job the same local-rank rule applies.

No torch here: the launcher imports this on login nodes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

from olmoablate.errors import UserError


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
    """The local executor starts every task on this one machine (submitit's LocalExecutor has
    no nodes): a multi-node plan would train with another world size than the plan's (an HSDP
    2 x 8 plan as 1 x 8 on one box, its tokens/s and MFU not the plan's). Refused before
    anything is queued; the job refuses it again at start (`olmoablate.train.job`)."""
    if nodes > 1:
        raise UserError(
            f"runs[{run_id}].topology.nodes = {nodes} but the local executor runs on one machine "
            "(allowed with --executor local: nodes: 1; use --executor slurm for several nodes)"
        )


def local_slot_devices(visible: list[str], gpus_per_run: int, slot: int) -> str:
    """``CUDA_VISIBLE_DEVICES`` for the local job in ``slot`` (0-based): its own G GPUs."""
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
