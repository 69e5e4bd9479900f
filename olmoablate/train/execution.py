"""``summary.json``'s ``execution`` block: how a run actually executed, read from the live train
module after training (docs/gpu-settings.md lists the fields). Its own module because the report
compares these records between the arms of a pair (`olmoablate.report.compare.execution`): what is
recorded here is what must be equal for two arms' cost to be compared."""

from __future__ import annotations

from typing import Any

from olmoablate.train.plan import RunContext


def execution_record(
    trainer: Any, compute_dtype: str | None, env: Any, ctx: RunContext
) -> dict[str, Any]:
    """How the run actually executed (device, parallelism, precision, backend, compilation, GPU
    model), from the live train module: what both arms must share (the report refuses to compare
    the cost of arms whose records differ, `olmoablate.report.compare.execution`) and what the plan
    claimed, checkable after the fact. ``param_dtype`` is the FSDP mixed-precision policy the
    train module was built with (what FSDP casts the parameters to for compute);
    ``compute_dtype`` is the dtype a linear layer really produced in the first forward."""
    import torch

    tm = trainer.train_module
    dp = getattr(tm, "dp_config", None)
    autocast = getattr(tm, "autocast_precision", None)
    att = next(iter(tm.model.blocks.values())).attention
    backend = getattr(getattr(att, "backend", None), "__class__", type(None)).__name__
    return {
        "device": env.device_type,
        "world_size": env.world_size,
        "data_parallel": str(dp.name) if dp is not None else None,
        "param_dtype": str(dp.param_dtype) if dp is not None and dp.param_dtype else None,
        "autocast_dtype": str(autocast).removeprefix("torch.") if autocast is not None else None,
        "compute_dtype": compute_dtype,
        "attention_backend": backend,
        "compile": compile_record(ctx.run.training.compile, tm.model),
        "gpu_model": torch.cuda.get_device_name() if env.device_type == "cuda" else None,
    }


def compile_record(requested: Any, model: Any) -> dict[str, Any]:
    """Whether and how the model was compiled: OLMo-core's ``apply_compile`` compiles every
    block and the LM head separately with torch.compile's default backend (inductor)."""
    compiled = bool(getattr(model, "compile_enabled", False))
    return {
        "requested": requested,
        "compiled": compiled,
        "how": "torch.compile per block + LM head (inductor)" if compiled else None,
    }


def where_record() -> dict[str, Any]:
    """Where the run executed, for ``summary.json``: rank 0's node (``hostname``), every node of
    the job (``nodes``: Slurm's node list, else this one) and who started it (``executor``:
    submitit's ``SUBMITIT_EXECUTOR``, ``slurm`` or ``local``; None when started by hand). The
    report reads these from the run's own summary, never from launch's ledger."""
    import os
    import socket

    host = socket.gethostname()
    nodes = expand_nodelist(os.environ.get("SLURM_JOB_NODELIST") or "") or [host]
    return {"hostname": host, "nodes": nodes, "executor": os.environ.get("SUBMITIT_EXECUTOR")}


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed node list (``gpu[01-03,07],login1``) -> ``[gpu01, gpu02, ...]``."""
    import re

    out: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", text):
        if plain:
            out.append(plain.strip())
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not hi:
                out.append(prefix + lo)
            elif lo.isdigit() and hi.isdigit():
                out.extend(f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1))
    return [n for n in out if n]
