"""``summary.json``'s ``execution`` block: how a run actually executed, read from the live train
module after training (docs/gpu-settings.md lists the fields). Its own module because the report
compares these records between the arms of a pair (`olmoablate.report.pairing`): what is
recorded here is what must be equal for two arms' cost to be compared."""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from typing import Any

from olmoablate.models.generate import IncrementalDecoder
from olmoablate.run import trainer as cfgs
from olmoablate.run.runplan import RunContext


def execution_record(
    trainer: Any, compute_dtype: str | None, env: Any, ctx: RunContext
) -> dict[str, Any]:
    """How the run actually executed, from the live train module: what both arms must share and
    what the plan claimed, checkable after the fact. ``param_dtype`` is the FSDP mixed-precision
    policy (what FSDP casts the parameters to for compute); ``compute_dtype`` the dtype a linear
    layer really produced in the first forward."""
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
    """Where the run executed: rank 0's node (``hostname``), every node of the job (``nodes``)
    and who started it (``executor``: submitit's, None when started by hand)."""
    host = socket.gethostname()
    nodes = expand_nodelist(os.environ.get("SLURM_JOB_NODELIST") or "") or [host]
    return {"hostname": host, "nodes": nodes, "executor": os.environ.get("SUBMITIT_EXECUTOR")}


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed node list (``gpu[01-03,07],login1``) -> ``[gpu01, gpu02, ...]``."""
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


# -- Decode figures of a completed run (per-token latency, KV-cache size): decoding cost is part of
# what a variant costs, measured once on the trained setup.

log = logging.getLogger(__name__)


def _decode_model(trainer: Any, ctx: RunContext, env: Any) -> Any:
    """The trained model as one plain module on this rank's device, in the run's compute
    precision: in a single process the model itself; under DDP/FSDP/HSDP a replica loaded from
    the gathered full state dict on rank 0 (``None`` on the other ranks)."""
    import torch

    model = trainer.train_module.model
    if not env.distributed:
        return model
    from olmo_core.distributed.utils import get_rank
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if get_rank() != 0:
        return None
    device = trainer.train_module.device
    replica = cfgs.model_config(ctx.run, env).build(init_device="cpu")
    replica.load_state_dict(state, strict=True)
    replica = replica.to(device)
    if cfgs.computes_in_bf16(ctx.run):
        replica = replica.to(torch.bfloat16)
    if hasattr(model, "current_loops"):
        replica.current_loops = model.current_loops  # the loop count the arm was trained at
    return replica


def decode_figures(trainer: Any, ctx: RunContext, env: Any) -> dict[str, Any]:
    """Decode figures of the trained model (rank 0). Every rank must call this (the state-dict
    gather is collective)."""
    out: dict[str, Any] = {}
    try:
        model = _decode_model(trainer, ctx, env)
        if model is not None:
            out = _measure_decode(model, ctx)
    except Exception as err:  # noqa: BLE001 - a measurement must never fail a finished run
        log.warning(f"decode measurement skipped: {type(err).__name__}: {err}")
    if env.distributed:
        import torch

        torch.distributed.barrier()  # the other ranks wait for rank 0's measurement
    return out


def _measure_decode(
    model: Any, ctx: RunContext, prompt_tokens: int = 64, new_tokens: int = 16
) -> dict[str, Any]:
    """Greedy-decode latency per token and KV-cache bytes of the trained model (batch 1), with
    our KV-cache decoder (`olmoablate.models.generate`; looped arms at their trained loop count).
    Content does not change the cost, so the prompt is seeded random ids."""
    import torch

    prompt_len = max(1, min(prompt_tokens, ctx.training.sequence_length - new_tokens))
    vocab = ctx.training.data.vocab_size
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, min(vocab, 100_000), (1, prompt_len), generator=gen).to(device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), IncrementalDecoder(model, 1, prompt_len + new_tokens) as dec:
            logits = dec.step(prompt)
            nxt = logits[:, -1:].argmax(-1)
            t0 = time.perf_counter()
            for _ in range(new_tokens):
                nxt = dec.step(nxt)[:, -1:].argmax(-1)
            if device.type == "cuda":
                torch.cuda.synchronize()
            per_token = (time.perf_counter() - t0) / new_tokens
            cache = int(dec.cache_bytes())
    finally:
        model.train(was_training)
    return {
        "decode_latency_s": per_token,
        "kv_cache_bytes": cache,
        "decode_prompt_tokens": prompt_len,
        "decode_new_tokens": new_tokens,
        "decode_device": device.type,
    }
