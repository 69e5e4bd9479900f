"""Run entry -> OLMo-core configs (model, train module, dataset, data loader, trainer).

Why a pure translation layer: the pair contract says everything two arms share comes from the
plan entry, never from the arm. Keeping the mapping in one place, as plain OLMo-core config
dataclasses with no side effects, makes that auditable (tests build both arms' configs and check
that only the model differs) and keeps the job itself a thin ``build() -> fit()`` wrapper in the
OLMo-core idiom.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from olmoablate.errors import UserError
from olmoablate.train.plan import RunContext

if TYPE_CHECKING:  # pragma: no cover - typing only
    from olmo_core.data import NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
    from olmo_core.nn.transformer import TransformerConfig
    from olmo_core.optim import OptimConfig, Scheduler
    from olmo_core.train.train_module import TransformerTrainModuleConfig


@dataclass(frozen=True)
class Environment:
    """Where the job runs: decides precision and data parallelism, never the math of the run."""

    device_type: str  # "cpu" | "cuda"
    world_size: int = 1
    distributed: bool = False


def tokenizer_config(run: dict[str, Any]) -> TokenizerConfig:
    """Only the ids matter for training on pre-tokenized arrays (see notes §Tokenizer)."""
    from olmo_core.data import TokenizerConfig

    data = run["training"]["data"]
    return TokenizerConfig(
        vocab_size=int(data["vocab_size"]),
        eos_token_id=int(data["eos_token_id"]),
        pad_token_id=int(data["pad_token_id"]),
        bos_token_id=data.get("bos_token_id"),
    )


def _fallback_model_config(run: dict[str, Any], attn_backend: str | None) -> TransformerConfig:
    """OLMo 3 baseline built straight from OLMo-core, used only when olmoablate.models is absent.

    Same recipe as ``TransformerConfig.olmo3_*`` (reordered norm, full-width QK-norm, RoPE 5e5,
    SWA pattern [w, w, w, full] with the last layer full) but with the custom dims of the run.
    """
    from olmo_core.nn.attention import SlidingWindowAttentionConfig
    from olmo_core.nn.feed_forward import FeedForwardConfig
    from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig

    arch = dict(run.get("architecture") or {})
    dims = dict(run["size_dims"])
    layers = arch.pop("layers", None)
    if arch:
        raise UserError(
            f"runs[{run['run_id']}].architecture uses {sorted(arch)} but olmoablate.models is not "
            "installed; only the baseline ({}) and 'layers' are available"
        )
    n_layers = int((layers or {}).get("n_layers") or dims["n_layers"])
    w = int(dims["sliding_window"])
    return TransformerConfig.llama_like(
        d_model=int(dims["d_model"]),
        vocab_size=int(dims["vocab_size"]),
        n_layers=n_layers,
        n_heads=int(dims["n_heads"]),
        n_kv_heads=int(dims.get("n_kv_heads") or dims["n_heads"]),
        qk_norm=True,
        rope_theta=500_000,
        layer_norm_eps=1e-6,
        block_name=TransformerBlockType.reordered_norm,
        sliding_window=SlidingWindowAttentionConfig(
            pattern=[w, w, w, -1],
            force_full_attention_on_first_layer=False,
            force_full_attention_on_last_layer=True,
        ),
        attn_backend=attn_backend,  # type: ignore[arg-type]
        feed_forward=FeedForwardConfig(hidden_size=int(dims["mlp_hidden_size"]), bias=False),
    )


def model_config(run: dict[str, Any], env: Environment) -> TransformerConfig:
    """The model of this arm, with the pair's shared ``init_seed``.

    Uses ``olmoablate.models.build_model_config`` (the bundled variants) when that package
    provides it, else the OLMo-core baseline above. The torch attention backend is forced on CPU
    so GPU presets don't warn on every layer.
    """
    init_seed = int(run["training"].get("init_seed", 0))
    attn_backend = "torch" if env.device_type == "cpu" else None
    try:
        from olmoablate.models import build_model_config  # type: ignore[attr-defined]
    except ImportError:
        build_model_config = None
    if build_model_config is None:
        cfg = _fallback_model_config(run, attn_backend)
    else:
        try:
            cfg = build_model_config(
                run["size_dims"],
                run.get("architecture") or {},
                vocab_size=int(run["size_dims"]["vocab_size"]),
                init_seed=init_seed,
                attn_backend=attn_backend,
            )
        except (KeyError, ValueError) as err:
            raise UserError(f"runs[{run['run_id']}].architecture: {err}") from None
    cfg.init_seed = init_seed
    return cfg


def optim_config(run: dict[str, Any]) -> OptimConfig:
    """AdamW or OLMo 3's SkipStepAdamW; embeddings excluded from weight decay when asked."""
    from olmo_core.optim import AdamWConfig, OptimGroupOverride, SkipStepAdamWConfig

    o = run["training"]["optimizer"]
    overrides = None
    if o.get("no_decay_embeddings", True):
        overrides = [OptimGroupOverride(params=["embeddings.weight"], opts={"weight_decay": 0.0})]
    kwargs: dict[str, Any] = {
        "lr": float(o["lr"]),
        "betas": tuple(float(b) for b in o.get("betas", (0.9, 0.95))),
        "eps": float(o.get("eps", 1e-8)),
        "weight_decay": float(o.get("weight_decay", 0.1)),
        "group_overrides": overrides,
    }
    if o["name"] == "skip_step_adamw":
        return SkipStepAdamWConfig(**kwargs)
    return AdamWConfig(**kwargs)


def scheduler(run: dict[str, Any]) -> Scheduler:
    """The LR schedule over ``training.steps`` (OLMo-core's t_max defaults to max_steps)."""
    from olmo_core.optim import WSD, ConstantWithWarmup, CosWithWarmup, LinearWithWarmup

    s = run["training"]["schedule"]
    warmup = int(s.get("warmup_steps", 0))
    alpha_f = float(s.get("alpha_f", 0.1))
    name = s["name"]
    if name == "cosine":
        return CosWithWarmup(warmup=warmup, alpha_f=alpha_f)
    if name == "linear":
        return LinearWithWarmup(warmup=warmup, alpha_f=alpha_f)
    if name == "constant":
        return ConstantWithWarmup(warmup=warmup)
    # wsd: stable at lr, then decay over the last decay_fraction of the run to alpha_f * lr.
    lr = float(run["training"]["optimizer"]["lr"])
    return WSD(
        warmup=warmup,
        decay_fraction=float(s.get("decay_fraction", 0.1)),
        decay_min_lr=alpha_f * lr,
    )


def compile_enabled(run: dict[str, Any], env: Environment) -> bool:
    """``training.compile``: true/false as given; ``auto`` compiles on CUDA only.

    Why not on CPU by default: inductor compiles every distinct block graph with the C++
    toolchain, which costs tens of seconds per graph on a small CPU box, more than the short CPU
    runs (demo, tests) could save (measured in bench/RESULTS.md); ``true`` turns it on there too.
    The setting sits in the run's ``training`` mapping, which the pairing certificate covers, so
    the two arms of a pair always compile alike.
    """
    from olmoablate.spec.schema import COMPILE_DEFAULT

    value = run["training"].get("compile", COMPILE_DEFAULT)  # plans written before the field
    if value == "auto":
        return env.device_type == "cuda"
    if not isinstance(value, bool):
        raise UserError(
            f"runs[{run['run_id']}].training.compile = {value!r}; allowed: auto, true, false"
        )
    return value


def train_module_config(run: dict[str, Any], env: Environment) -> TransformerTrainModuleConfig:
    """Optimizer, schedule, clipping, z-loss, microbatching and parallelism/precision."""
    from olmo_core.config import DType
    from olmo_core.distributed.parallel import DataParallelType
    from olmo_core.train.train_module import (
        TransformerDataParallelConfig,
        TransformerTrainModuleConfig,
    )

    tr = run["training"]
    seq = int(tr["sequence_length"])
    gbs = int(tr["global_batch_size"])
    rank_batch = gbs // max(env.world_size, 1)
    if rank_batch * env.world_size != gbs or rank_batch % seq:
        raise UserError(
            f"runs[{run['run_id']}].training.global_batch_size = {gbs} tokens cannot be split "
            f"into whole sequences of {seq} over {env.world_size} data-parallel ranks"
        )
    micro = min(int(tr.get("microbatch_size") or gbs), rank_batch)
    while rank_batch % micro:  # largest whole-sequence microbatch that divides the rank batch
        micro -= seq

    precision = tr.get("precision", "auto")
    if precision == "bf16" and env.device_type != "cuda":
        raise UserError(
            f"runs[{run['run_id']}].training.precision = 'bf16' needs CUDA; allowed on CPU: auto, fp32"
        )
    dp_name = str((run.get("topology") or {}).get("data_parallel") or "").lower() or None
    if dp_name not in (None, "ddp", "fsdp"):
        raise UserError(
            f"runs[{run['run_id']}].topology.data_parallel = {dp_name!r}; allowed: ddp, fsdp"
        )
    dp_config = None
    if env.distributed:
        if dp_name is None:
            dp_name = "fsdp" if env.device_type == "cuda" else "ddp"
        half = env.device_type == "cuda" and precision in ("auto", "bf16")
        dp_config = TransformerDataParallelConfig(
            name=DataParallelType.fsdp if dp_name == "fsdp" else DataParallelType.ddp,
            param_dtype=DType.bfloat16 if (half and dp_name == "fsdp") else None,
            reduce_dtype=DType.float32,
        )
    autocast = None
    if env.device_type == "cuda" and precision in ("auto", "bf16") and dp_config is None:
        import torch

        autocast = torch.bfloat16

    grad_clip = tr.get("grad_clip")
    return TransformerTrainModuleConfig(
        rank_microbatch_size=micro,
        max_sequence_length=seq,
        optim=optim_config(run),
        scheduler=scheduler(run),
        max_grad_norm=float(grad_clip) if grad_clip else None,
        z_loss_multiplier=float(tr["z_loss"]) if tr.get("z_loss") else None,
        dp_config=dp_config,
        autocast_precision=autocast,
        compile_model=compile_enabled(run, env),
    )


def dataset_config(ctx: RunContext) -> NumpyFSLDatasetConfig:
    """Training tokens: explicit token files, or an OLMo-core data mix under ``data.root``."""
    from olmo_core.data import NumpyFSLDatasetConfig

    tr = ctx.training
    data = tr["data"]
    common: dict[str, Any] = {
        "tokenizer": tokenizer_config(ctx.run),
        "sequence_length": int(tr["sequence_length"]),
        "work_dir": str(ctx.run_dir / "cache" / "dataset"),
    }
    if data.get("mix"):
        root = data.get("root")
        return NumpyFSLDatasetConfig.from_data_mix(
            data["mix"],
            mix_base_dir=ctx.resolve(root) if root else None,
            **common,
        )
    return NumpyFSLDatasetConfig(paths=[ctx.resolve(p) for p in data["paths"]], **common)


def data_loader_config(ctx: RunContext) -> NumpyDataLoaderConfig:
    """Seeded loader: the global batch of step i depends only on data, seed and batch size."""
    from olmo_core.data import NumpyDataLoaderConfig

    tr = ctx.training
    return NumpyDataLoaderConfig(
        global_batch_size=int(tr["global_batch_size"]),
        seed=int(tr["data"].get("seed", 34521)),
        work_dir=str(ctx.run_dir / "cache" / "loader"),
        num_workers=0,
    )


def eval_dataset_config(ctx: RunContext) -> Any | None:
    """All held-out LM sets as one padded dataset; each file carries its set name as label."""
    from olmo_core.data import NumpyPaddedFSLDatasetConfig

    sets = ctx.evaluation.get("lm_sets") or {}
    if not sets:
        return None
    paths: list[str] = []
    metadata: list[dict[str, Any]] = []
    for label, files in sets.items():
        files = [files] if isinstance(files, str) else list(files)
        for f in files:
            paths.append(ctx.resolve(f))
            metadata.append({"label": str(label)})
    return NumpyPaddedFSLDatasetConfig(
        tokenizer=tokenizer_config(ctx.run),
        paths=paths,
        metadata=metadata,
        sequence_length=int(ctx.training["sequence_length"]),
        work_dir=str(ctx.run_dir / "cache" / "eval"),
    )


def downstream_evaluator_config(ctx: RunContext, tasks: list[str], steps: int) -> Any:
    """OLMo-core's downstream evaluator (ai2-olmo-eval) on the offline dolma2 tokenizer file.

    Same points as the LM evaluator (every ``evaluation.interval`` steps and at the end), so both
    arms are scored on identical checkpoints. ``evaluation.max_downstream_batches`` (optional)
    caps each task's eval for quick checks; by default every instance is scored.
    """
    from olmo_core.data import TokenizerConfig
    from olmo_core.train import Duration
    from olmo_core.train.callbacks import DownstreamEvaluatorCallbackConfig

    from olmoablate.data import tokenizer_path

    data = ctx.training["data"]
    interval = int(ctx.evaluation["interval"])
    cap = ctx.evaluation.get("max_downstream_batches")
    return DownstreamEvaluatorCallbackConfig(
        tasks=tasks,
        tokenizer=TokenizerConfig(
            vocab_size=int(data.get("vocab_size", 100352)),
            eos_token_id=int(data.get("eos_token_id", 100257)),
            pad_token_id=int(data.get("pad_token_id", 100277)),
            identifier=str(tokenizer_path()),
        ),
        eval_interval=interval,
        fixed_steps=[steps] if steps % interval else None,
        eval_duration=Duration.steps(int(cap)) if cap else Duration.epochs(1),
    )
