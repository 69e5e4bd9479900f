"""OLMo-core config subclasses for the ablation models, and the size/arch -> config builder.

Why subclass configs instead of forking: OLMo-core records ``_CLASS_`` in every config dict, so a
``TransformerConfig`` subclass round-trips through ``config.json`` / checkpoints, and every other
field (blocks, attention, RoPE, sliding windows, LM head) keeps OLMo-core's exact meaning.

The baseline (``arch == {}``) and ``layers``-only variants are plain ``TransformerConfig`` objects
equal to ``TransformerConfig.olmo3_<preset>(...)`` field for field (checked in the tests), so the
baseline model *is* OLMo-core's ``Transformer``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatch
from typing import Any

import torch
from olmo_core.config import DType
from olmo_core.nn.attention import AttentionBackendName, SlidingWindowAttentionConfig
from olmo_core.nn.feed_forward import FeedForwardConfig
from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig, TransformerType

from olmoablate.errors import UserError
from olmoablate.models.block_model import model_part
from olmoablate.models.transformer import AblationTransformer
from olmoablate.plan.arch import Architecture, parse_architecture
from olmoablate.plan.sizes import SizeDims, resolve

OLMO3_ROPE_THETA = 500_000
OLMO3_NORM_EPS = 1e-6


@dataclass
class AblationTransformerConfig(TransformerConfig):
    """``TransformerConfig`` + the ``arch`` mapping (:meth:`Architecture.as_mapping`: defaults
    filled in, JSON-able for OLMo-core's config files); builds :class:`AblationTransformer`."""

    arch: dict[str, Any] = field(default_factory=dict)

    def build(self, *, init_device: str = "cpu") -> AblationTransformer:  # type: ignore[override]
        if self.name != TransformerType.default:
            raise UserError(f"arch variants need the default transformer type, got {self.name}")
        model = AblationTransformer(
            arch=self.arch,
            d_model=self.d_model,
            vocab_size=self.vocab_size,
            n_layers=self.n_layers,
            block=self.block,
            embedding_norm=self.embedding_norm,
            lm_head=self.lm_head,
            dtype=self.dtype.as_pt(),
            init_method=self.init_method,
            init_device=init_device,
            init_seed=self.init_seed,
            init_std=self.init_std,
            embedding_init_std=self.embedding_init_std,
            block_overrides=self.block_overrides,
            block_pattern=self.block_pattern,
            embed_scale=self.embed_scale,
            tie_word_embeddings=self.tie_word_embeddings,
        )
        for name, param in model.named_parameters():
            if any(fnmatch(name, pattern) for pattern in self.freeze_params or []):
                param.requires_grad = False
        return model

    @property
    def num_params(self) -> int:
        settings = parse_architecture(self.arch)
        extra = sum(model_part(k).extra_model_params(o, self) for k, o in settings.blocks.items())
        return super().num_params + extra


def resolve_attn_backend(attn_backend: str | None) -> AttentionBackendName:
    """None = auto: ``flash_2`` when flash-attn imports and CUDA is available, else ``torch``."""
    if attn_backend is not None:
        try:
            return AttentionBackendName(attn_backend)
        except ValueError:
            allowed = ", ".join(b.value for b in AttentionBackendName)
            raise UserError(f"attn_backend: unknown {attn_backend!r}; allowed: {allowed}") from None
    import torch
    from olmo_core.nn.attention import flash_attn_api

    if torch.cuda.is_available() and flash_attn_api.has_flash_attn_2():
        return AttentionBackendName.flash_2
    return AttentionBackendName.torch


def olmo3_config(
    dims: SizeDims, *, n_layers: int, attn_backend: AttentionBackendName, init_seed: int
) -> TransformerConfig:
    """OLMo 3 semantics for any dims (what ``TransformerConfig.olmo3_*`` builds for presets)."""
    w = dims.sliding_window
    return TransformerConfig.llama_like(
        d_model=dims.d_model,
        vocab_size=dims.vocab_size,
        n_layers=n_layers,
        n_heads=dims.n_heads,
        n_kv_heads=None if dims.n_kv_heads == dims.n_heads else dims.n_kv_heads,
        block_name=TransformerBlockType.reordered_norm,
        qk_norm=True,
        rope_theta=OLMO3_ROPE_THETA,
        layer_norm_eps=OLMO3_NORM_EPS,
        feed_forward=FeedForwardConfig(
            hidden_size=dims.mlp_hidden_size, bias=False, dtype=DType.float32
        ),
        sliding_window=SlidingWindowAttentionConfig(
            pattern=[w, w, w, -1],
            force_full_attention_on_first_layer=False,
            force_full_attention_on_last_layer=True,
        ),
        attn_backend=attn_backend,
        init_seed=init_seed,
    )


def build_model_config(
    size: str | dict[str, Any] | SizeDims,
    arch: Mapping[str, Any] | Architecture | None,
    *,
    vocab_size: int | None = None,
    init_seed: int = 0,
    attn_backend: str | None = None,
) -> TransformerConfig:
    """The OLMo-core config the training job builds for ``size`` + ``arch``."""
    try:
        dims = resolve(size, vocab_size)
    except KeyError:
        raise UserError(f"size: unknown preset {size!r}") from None
    settings = parse_architecture(arch)
    config = olmo3_config(
        dims,
        n_layers=settings.n_physical_layers(dims.n_layers),
        attn_backend=resolve_attn_backend(attn_backend),
        init_seed=init_seed,
    )
    # Each block's torch half edits the config in the blocks' order (plan.json's order).
    mapping = settings.as_mapping()
    for key, opts in settings.blocks.items():
        config = model_part(key).configure(config, opts, dims, mapping)
    return config


def build_model(
    size: str | dict[str, Any] | SizeDims,
    arch: dict[str, Any] | Architecture | None,
    *,
    vocab_size: int | None = None,
    init_seed: int = 0,
    attn_backend: str | None = None,
    device: str | torch.device = "cpu",
) -> torch.nn.Module:
    """A ready-to-run model for tests, benchmarks, decoding and the accounting checks: built on
    ``meta`` and initialized exactly as the TrainModule does (``init_weights``); the job itself
    builds ``build_model_config(...)`` on meta and lets OLMo-core initialize it."""
    config = build_model_config(
        size, arch, vocab_size=vocab_size, init_seed=init_seed, attn_backend=attn_backend
    )
    model = config.build(init_device="meta")
    model.init_weights(device=torch.device(device))
    return model


def unique_param_count(model: torch.nn.Module) -> int:
    """Parameters counted once each, however often they are used (tied or looped weights)."""
    seen: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        seen[id(p)] = p.numel()
    return sum(seen.values())


def param_counts(model: torch.nn.Module) -> dict[str, int]:
    """``total`` / ``non_embedding`` / ``unique`` (= stored) parameters and ``effective``.

    ``effective`` counts the looped body once per loop (b = the model's current loop count), i.e.
    the size of the equivalent unrolled model; for non-looped models it equals ``unique``.
    """
    unique = unique_param_count(model)
    embeddings = model.embeddings.weight.numel()  # type: ignore[union-attr]
    effective = unique
    looped = getattr(getattr(model, "arch", None), "looped", None)
    if looped is not None:
        body = sum(p.numel() for p in model.blocks.parameters())  # type: ignore[union-attr]
        effective = unique + (int(model.current_loops) - 1) * body  # type: ignore[union-attr]
    return {
        "total": unique,
        "non_embedding": unique - embeddings,
        "unique": unique,
        "effective": effective,
    }
