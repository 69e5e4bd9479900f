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
