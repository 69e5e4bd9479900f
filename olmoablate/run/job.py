"""The training job: one run of ``plan.json`` trained (or resumed) with OLMo-core's Trainer.

``run_job(plan_path, run_id)`` is the one entry point of the local executor, of Slurm through
submitit (a picklable module-level function) and of ``torchrun``/``srun`` (``python -m
olmoablate.run.job PLAN RUN_ID``). It builds OLMo-core configs from the run entry only
(:mod:`olmoablate.run.trainer`), runs ``fit()`` (which resumes from the run's checkpoints by
itself) and decides the outcome by step count, not exit status: ``completed`` iff
``global_step >= training.steps``; ``interrupted`` after SIGTERM/SIGUSR2 (OLMo-core returns
normally once it saved a checkpoint); ``diverged`` on NaN/Inf or too many loss spikes (final);
anything else ``failed`` and re-raised. Plan paths resolve against ``plan.workdir`` without a
``chdir``, so the job is safe inside another program.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from olmo_core.train.callbacks import Callback

from olmoablate.errors import UserError
from olmoablate.models.build import param_counts
from olmoablate.plan.metrics import CE_LOSS
from olmoablate.plan.names import DONE_STATES, RunState, now_iso
from olmoablate.run import callbacks as cbs
from olmoablate.run import faults, proof
from olmoablate.run import trainer as cfgs
from olmoablate.run.callbacks import (
    CheckpointManifestCallback,
    failure_reason,
    record_failure,
    resume_point,
)
from olmoablate.run.files import RunStatus, RunSummary
from olmoablate.run.guards import ComputeDtypeCallback, StabilityCallback
from olmoablate.run.proof import check_code
from olmoablate.run.records import (
    FingerprintCallback,
    MetricsJSONLCallback,
    _model_of,
    peak_memory_gb,
)
from olmoablate.run.runplan import RunContext, load_run
from olmoablate.run.state import RunBusyError, trainer_lock
from olmoablate.run.summary import decode_figures, execution_record, where_record
from olmoablate.run.trainer import Environment

# -- Fault-injection hooks for tests: environment variables, never plan fields (the plan holds
# only what an experiment means). NAN_AT_STEP=N poisons step N's gradients (a deterministic way
# into divergence); STEP_SECONDS=S sleeps after each step so that interrupting tests do not race a
# busy machine (wall time only: the numbers are the same).


DEBUG_NAN_ENV = "OLMOABLATE_DEBUG_NAN_AT_STEP"
DEBUG_STEP_SECONDS_ENV = "OLMOABLATE_DEBUG_STEP_SECONDS"


@dataclass
class DebugNaNCallback(Callback):
    """Poisons the gradients of step ``at_step`` (after backward, before the optimizer step), so
    the grad norm of that exact step is NaN."""

    at_step: int = -1

    def pre_optim_step(self) -> None:
        if self.step != self.at_step:
            return
        for p in _model_of(self.trainer).parameters():
            if p.grad is not None:
                p.grad.fill_(float("nan"))
                break


@dataclass
class DebugSlowStepCallback(Callback):
    """Sleeps ``seconds`` after every step (wall time only; nothing a run computes changes)."""

    seconds: float = 0.0

    def post_step(self) -> None:
        time.sleep(self.seconds)


def _env_number(name: str, kind: type[int] | type[float]) -> int | float | None:
    value = os.environ.get(name)
    if not value:
        return None
    try:
        number = kind(value)
    except ValueError:
        wanted = "an integer" if kind is int else "a number"
        raise UserError(f"{name}={value!r}: expected {wanted}") from None
    if number < 0:
        raise UserError(f"{name}={value!r}: expected a number >= 0")
    return number


def debug_callbacks() -> dict[str, Callback]:
    """The test hooks the environment asks for."""
    out: dict[str, Callback] = {}
    nan_step = _env_number(DEBUG_NAN_ENV, int)
    if nan_step is not None:
        out["debug_nan"] = DebugNaNCallback(at_step=int(nan_step))
    seconds = _env_number(DEBUG_STEP_SECONDS_ENV, float)
    if seconds:
        out["debug_slow_step"] = DebugSlowStepCallback(seconds=float(seconds))
    return out


log = logging.getLogger(__name__)


def _environment(ctx: RunContext) -> Any:
    """CPU or CUDA, single process or torchrun/Slurm (RANK + WORLD_SIZE in the environment).

    The device is the plan's (``topology.gpus_per_node``), never a guess: a GPU plan on a node
    without CUDA would otherwise train on the CPU in fp32 while the plan costs it in bf16. On CUDA
    the run is always distributed (OLMo-core bootstraps a one-process group), so FSDP's
    mixed-precision policy applies even on one GPU, as in OLMo-core's own scripts.
    """
    import torch

    topo = ctx.run.topology
    gpus, use_cuda = topo.gpus_per_node, topo.on_gpu
    if use_cuda and not torch.cuda.is_available():
        raise UserError(
            f"runs[{ctx.run_id}].topology.gpus_per_node = {gpus} but CUDA is not available on "
            "this node (set gpus_per_node: 0 to train on CPU)"
        )
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != topo.world_size:
        # e.g. a 2-node plan started by the local executor: HSDP, tokens/s and MFU would not be
        # the plan's, and nothing else would say so.
        per_node = (
            f"gpus_per_node = {gpus}" if use_cuda else f"cpu_processes = {topo.cpu_processes}"
        )
        raise UserError(
            f"runs[{ctx.run_id}].topology plans {topo.world_size} ranks (nodes = {topo.nodes} x "
            f"{per_node}) but this job was started with {world} (WORLD_SIZE); start it with the "
            "plan's topology (--executor slurm for several nodes)"
        )
    distributed = ("RANK" in os.environ and "WORLD_SIZE" in os.environ) or use_cuda
    return Environment(
        device_type="cuda" if use_cuda else "cpu", world_size=world, distributed=distributed
    )


def _optimizer_state_bytes(optim: Any) -> int:
    """Bytes of optimizer state held by this rank (local shards under FSDP)."""
    import torch

    total = 0
    for state in optim.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                local = v.to_local() if hasattr(v, "to_local") else v
                total += local.numel() * local.element_size()
    return total


def check_batches(ctx: RunContext, sequences: int) -> None:
    """Refuse train data of fewer ``sequences`` than one global batch before the first step
    (`validate` refuses it where it can read the files; this covers files made or changed later,
    remote ones and mixes): an empty loader makes OLMo-core's trainer loop over empty epochs for
    ever, writing cache and logs and never reaching a cancel check."""
    tr = ctx.training
    need = tr.global_batch_size // tr.sequence_length
    if sequences >= need:
        return
    raise faults.TooLittleData(
        f"training data too short: {sequences} sequences of {tr.sequence_length} tokens, fewer "
        f"than one global batch of {need} (training.global_batch_size {tr.global_batch_size}): "
        "no step can train; give more data (training.data) or a smaller batch, then "
        + faults.redo_advice(ctx.run_dir.path.parent.parent, ctx.run_id)
    )


def _build_trainer(ctx: RunContext, env: Any, base_status: dict[str, Any]) -> tuple[Any, dict]:
    """Model, train module, data loader and trainer (with callbacks), from the run entry; the
    live callbacks by name."""
    from olmo_core.train import Duration, TrainerConfig
    from olmo_core.train.callbacks import ConsoleLoggerCallback

    run, tr, ev = ctx.run, ctx.training, ctx.evaluation
    steps, gbs = tr.steps, tr.global_batch_size
    stab, wb = tr.stability, tr.wandb

    dataset = cfgs.dataset_config(ctx).build()
    check_batches(ctx, len(dataset))  # before the model: the cheapest refusal first
    model_cfg = cfgs.model_config(run, env)
    model = model_cfg.build(init_device="meta")
    proof.at_start(ctx, model, model_cfg, int(base_status["attempt"]))  # before step 1
    train_module = cfgs.train_module_config(run, env).build(model)
    data_loader = cfgs.data_loader_config(ctx).build(
        dataset, dp_process_group=train_module.dp_process_group
    )

    rd = ctx.run_dir
    own: dict[str, Any] = {
        "metrics": MetricsJSONLCallback(path=str(rd.metrics), global_batch_size=gbs),
        "fingerprints": FingerprintCallback(path=str(rd.fingerprints), global_batch_size=gbs),
        "curriculum": cbs.LoopCurriculumCallback(),
        "stability": StabilityCallback(
            spike_window=stab.spike_window,
            spike_factor=stab.spike_factor,
            min_relative_jump=stab.min_relative_jump,
            max_spikes=stab.max_spikes,
            stop_on_nonfinite=stab.stop_on_nonfinite,
        ),
        "interrupt": cbs.InterruptCallback(),
        "checkpoint_manifest": CheckpointManifestCallback(),
        "compute_dtype": ComputeDtypeCallback(),
        "status": cbs.StatusCallback(
            path=str(rd.status),
            base=base_status,
            interval=max(1, min(10, steps // 20 or 1)),
            total_steps=steps,
            global_batch_size=gbs,
        ),
        "wandb": cbs.WandBLoggerCallback(
            run_id=ctx.run_id,
            wandb_id=cbs.wandb_id(ctx.spec_name, ctx.run_id),
            project=wb.project,
            entity=wb.entity,
            group=f"{ctx.spec_name}/{run.group_id}",
            job_type=run.arm,
            tags=cbs.tags_of(ctx.spec_name, run),
            mode=wb.mode,
            directory=str(rd.wandb_dir),
            link_path=str(rd.wandb),
            config={"spec": ctx.spec_name, "gate_sha256": ctx.plan.gate_sha256, **run.as_json()},
            global_batch_size=gbs,
            flops=cbs.FlopsAxis(run),
        ),
    }
    own.update(debug_callbacks())

    trainer_cfg = TrainerConfig(
        save_folder=str(rd.checkpoints),
        work_dir=str(ctx.cache_dir / "trainer"),
        save_overwrite=True,
        max_duration=Duration.steps(steps),
        **cfgs.trainer_intervals(run),
    )
    trainer_cfg = trainer_cfg.with_callback(
        "checkpointer",
        cbs.RecordsFirstCheckpointerCallback(
            save_interval=tr.checkpoint_interval,
            save_async=False if env.device_type == "cpu" else None,
            max_checkpoints=2,
            pre_train_checkpoint=False,
        ),
    ).with_callback("console_logger", ConsoleLoggerCallback(metrics_log_interval=10))
    eval_ds = cfgs.eval_dataset_config(ctx)
    if eval_ds is not None:
        max_eval_tokens, interval = ev.max_eval_tokens, ev.interval
        trainer_cfg = trainer_cfg.with_callback(
            "lm_evaluator",
            cbs.LoopedLMEvaluatorCallbackConfig(
                eval_dataset=eval_ds,
                eval_interval=interval,
                fixed_steps=[steps] if steps % interval else None,
                eval_duration=(
                    Duration.tokens(max_eval_tokens) if max_eval_tokens else Duration.epochs(1)
                ),
                loop_counts=list(run.loop_counts or []),
                depth_at=ev.depth,
            ),
        )
    tasks = list(ev.downstream)
    if tasks:
        trainer_cfg = trainer_cfg.with_callback(
            "downstream_evaluator",
            cfgs.downstream_evaluator_config(ctx, tasks, steps, run.loop_counts),
        )
    for name, cb in own.items():
        trainer_cfg = trainer_cfg.with_callback(name, cb)
    trainer = trainer_cfg.build(train_module, data_loader)
    # The trainer holds copies of the configured callbacks; keep handles on the live ones.
    return trainer, {name: trainer.callbacks[name] for name in own}


def _summary(
    trainer: Any, own: dict[str, Any], wall_s: float, steps_done: int, ctx: RunContext, env: Any
) -> dict[str, Any]:
    model = trainer.train_module.model
    counts = param_counts(model)
    metrics_cb = own["metrics"]
    steady = metrics_cb.steady_step_times()  # warm-up steps of this attempt excluded
    times = list(metrics_cb.step_times)
    mean_step = sum(steady) / len(steady) if steady else None
    gbs = int(trainer.global_batch_size)
    flops_per_token = ctx.run.train_flops_per_token
    mfu = None
    if mean_step and env.device_type == "cuda" and flops_per_token:
        peak = ctx.run.topology.gpu_peak_tflops * 1e12 * max(env.world_size, 1)
        mfu = flops_per_token * gbs / mean_step / peak
    return {
        "params": int(model.num_params),
        "non_embedding_params": int(model.num_non_embedding_params),
        "unique_params": counts["unique"],
        "effective_params": counts["effective"],
        # max over ranks (OLMo-core's MAX reduction of each step's peak), this rank's as floor
        "peak_memory_gb": max(metrics_cb.max_peak_memory_gb, peak_memory_gb()),
        "mean_step_time_s": mean_step,
        "steady_steps": len(steady),
        "tokens_per_s": gbs / mean_step if mean_step else None,
        "tokens_per_s_per_device": gbs / mean_step / max(env.world_size, 1) if mean_step else None,
        "mfu": mfu,
        "steps_this_attempt": len(times),
        "steps": steps_done,
        "tokens": steps_done * gbs,
        "wall_time_s": wall_s,
        "optimizer_state_bytes": _optimizer_state_bytes(trainer.train_module.optim),
        "loss_spikes": own["stability"].spikes,
        "execution": execution_record(trainer, own["compute_dtype"].compute_dtype, env, ctx),
        # the node the steps were timed on (the report says when two arms ran on different
        # ones), the job's nodes and its executor
        **where_record(),
    }


def run_job(plan_path: str, run_id: str) -> dict[str, Any]:
    """Train (or resume) ``run_id`` of ``plan_path``; return the final ``status.json`` dict (as
    is for a run already completed or diverged). Exceptions propagate once status.json says
    ``failed``, so executors see the failure."""
    t_start = time.perf_counter()
    ctx = load_run(plan_path, run_id)
    # status.json is the job's own record (not plan data): absent on a first start.
    previous = RunStatus.read(ctx.run_dir) or RunStatus()
    if previous.state in DONE_STATES:
        log.info(f"{run_id} is already {previous.state}; nothing to do")
        return previous.as_json()

    import torch
    from olmo_core.train import prepare_training_environment, teardown_training_environment

    env = _environment(ctx)
    if env.device_type == "cpu":
        torch.set_num_threads(ctx.training.threads)

    prepare_training_environment(
        seed=ctx.training.init_seed,
        # "cpu:gloo,cuda:nccl" makes OLMo-core call torch.cuda.set_device, which a CPU-only
        # torch build lacks; plain gloo is the CPU equivalent.
        backend=(
            None
            if not env.distributed
            else ("cpu:gloo,cuda:nccl" if env.device_type == "cuda" else "gloo")
        ),
    )
    with contextlib.ExitStack() as held:
        try:
            # One trainer per run folder: nothing is written before the lock is ours.
            _hold_trainer_lock(ctx, held)
        except BaseException:
            teardown_training_environment()
            raise
        # Read again under the lock: a trainer that held it may have finished the run.
        previous = RunStatus.read(ctx.run_dir) or RunStatus()
        if previous.state in DONE_STATES:
            teardown_training_environment()
            log.info(f"{run_id} is already {previous.state}; nothing to do")
            return previous.as_json()
        return _train(ctx, previous, env, t_start)


def _hold_trainer_lock(ctx: RunContext, held: contextlib.ExitStack) -> None:
    """Rank 0 takes the run's trainer lock (:func:`olmoablate.run.state.trainer_lock`) into
    ``held``; every rank learns whether it could, so a refused job stops on every rank with the
    same one line (:class:`olmoablate.run.state.RunBusyError`) and writes nothing."""
    from olmo_core.distributed.utils import broadcast_object, get_rank, is_distributed

    refused: str | None = None
    if get_rank() == 0:
        try:
            held.enter_context(trainer_lock(ctx.run_dir))
        except RunBusyError as err:
            refused = str(err)
    if is_distributed():
        refused = broadcast_object(refused)
    if refused is not None:
        raise RunBusyError(refused)


def _train(ctx: RunContext, previous: RunStatus, env: Any, t_start: float) -> dict[str, Any]:
    """:func:`run_job` once the trainer lock is held: the attempt, its status and its outcome."""
    from olmo_core.distributed.utils import get_rank
    from olmo_core.train import teardown_training_environment

    run_id = ctx.run_id
    status_path = ctx.run_dir.status
    steps, gbs = ctx.training.steps, ctx.training.global_batch_size
    where = where_record()
    base = {
        "run_id": run_id,
        "pair_id": ctx.run.pair_id,
        "arm": ctx.run.arm,
        # The launcher's attempt counter (submitit requeues) when set, else one per call.
        "attempt": int(os.environ.get("OLMOABLATE_ATTEMPT") or (previous.attempt or 0) + 1),
        "diverged_at_step": None,
        "reason": None,
        # where this attempt runs (rank 0), as summary.json says at the end
        "executor": where["executor"] or previous.executor,
        "host": where["hostname"],
    }

    def write_status(state: RunState, step: int, **extra: Any) -> dict[str, Any]:
        status = RunStatus.model_validate(
            {
                **base,
                "state": state,
                "step": step,
                "total_steps": steps,
                "tokens": step * gbs,
                "last_loss": None,
                "tokens_per_s": None,
                **extra,
            }
        )
        if get_rank() == 0:
            status = status.write(status_path)
        return status.as_json()

    trainer = None
    try:
        ctx.run_dir.path.mkdir(parents=True, exist_ok=True)
        write_status(RunState.RUNNING, previous.step or 0)
        # changed block code is refused before any checkpoint is read, judged or moved
        check_code(
            ctx.run,
            resuming=any(ctx.run_dir.checkpoints.glob("step*")),
            way_out=faults.redo_advice(ctx.run_dir.path.parent.parent, run_id),
        )
        fallback = resume_point(ctx, base, previous)
        trainer, own = _build_trainer(ctx, env, base)
        if fallback is not None:
            own["metrics"].attempt_note = fallback.metrics
        error: BaseException | None = None
        try:
            trainer.fit()
        except BaseException as exc:  # noqa: BLE001 - classified below, re-raised unless diverged
            error = exc
        step = int(trainer.global_step)
        stability = own["stability"]
        summary = _summary(trainer, own, time.perf_counter() - t_start, step, ctx, env)
        extra = {
            "last_loss": own["metrics"].last_row.get(CE_LOSS),  # absent before the first step
            "tokens_per_s": summary["tokens_per_s"],
        }
        if stability.diverged_at_step is not None:
            state = RunState.DIVERGED
            extra.update(diverged_at_step=stability.diverged_at_step, reason=stability.reason)
        elif error is not None:
            record_failure(write_status, ctx, step, failure_reason(ctx, error, step), **extra)
            raise error
        elif step >= steps:
            state = RunState.COMPLETED
        else:
            sig = own["interrupt"].signal_received
            state = RunState.INTERRUPTED
            extra["reason"] = f"{sig} received" if sig else "training stopped before the last step"
            # All of them, in order: the job wrapper decides cancel vs requeue from these.
            extra["signals"] = list(own["interrupt"].signals)
        if state == RunState.COMPLETED:
            summary.update(decode_figures(trainer, ctx, env))
        if get_rank() == 0:
            RunSummary.model_validate({**summary, "state": state}).write(ctx.run_dir.summary)
        return write_status(state, step, **extra)
    except UserError as err:
        if trainer is None:  # a refusal at job start (the proof, the blocks' code, the entry)
            write_status(RunState.FAILED, previous.step or 0, reason=refusal_reason(ctx, err))
        raise
    except Exception as err:  # before or around fit (a checkpoint, the data): one line, then up
        if trainer is None:
            step = previous.step or 0
            why = failure_reason(ctx, err, None, started=False)
            write_status(RunState.FAILED, step, reason=f"failed before training started: {why}")
        raise
    finally:
        teardown_training_environment()


def refusal_reason(ctx: RunContext, err: UserError) -> str:
    """The one line of a refusal at job start (a block's formula or code, the run entry): what
    was refused and the commands that recover it. Why not ``--retry-failed``: the same plan entry
    and the same code would be refused again; the fix is in the block or the spec, and a fixed
    block's code is new code, which needs a new plan and a fresh run. The traceback goes to
    error.log like every other failure's."""
    log_path = ctx.run_dir.path / faults.ERROR_LOG
    kept = faults.write_traceback(log_path, err, f"{now_iso()} {ctx.run_id} refused at job start")
    seen = f" (traceback in {log_path})" if kept else ""
    text = str(err)
    own = text.rfind("; ", 0, text.find("`olmoablate submit "))
    if "`olmoablate submit " in text and own >= 0:  # the refusal names its own way out
        return faults.cut(f"refused at job start: {text[:own]}", f"{seen}{text[own:]}")
    redo = faults.redo_advice(ctx.run_dir.path.parent.parent, ctx.run_id)
    return faults.cut(f"refused at job start: {text}", f"{seen}; fix the block or spec, then {redo}")


def main(argv: list[str] | None = None) -> int:
    """``python -m olmoablate.run.job PLAN RUN_ID`` (torchrun/srun entry point)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m olmoablate.run.job PLAN_JSON RUN_ID", file=sys.stderr)
        return 2
    try:
        status = run_job(args[0], args[1])
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    if os.environ.get("RANK", "0") == "0":
        print(json.dumps(status))
    return 0


if __name__ == "__main__":
    sys.exit(main())
