"""The bundled blocks' torch halves (SiameseNorm, Depth-Attention, Looped, ``layers``), written
against :class:`olmoablate.models.block_model.BlockModel` like any installed block."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from olmoablate.models.block_model import BlockModel
from olmoablate.models.build import AblationTransformerConfig
from olmoablate.models.depth_attention import DepthAttentionConfig
from olmoablate.models.siamese import SiameseNormBlockConfig

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from olmo_core.nn.transformer import TransformerConfig

    from olmoablate.plan.sizes import SizeDims


def fields_of(config: Any) -> dict[str, Any]:
    """A config dataclass's fields by name: how a block subclasses OLMo-core's config (build the
    subclass from the same fields plus its own)."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def ablation_config(config: TransformerConfig, arch: dict[str, Any]) -> TransformerConfig:
    """``config`` as an :class:`~olmoablate.models.build.AblationTransformerConfig` carrying
    ``arch`` (its model runs SiameseNorm's streams, Looped's loops, Depth-Attention's state)."""
    if isinstance(config, AblationTransformerConfig):
        return config
    return AblationTransformerConfig(**fields_of(config), arch=dict(arch))


class SiameseNormModel(BlockModel):
    def configure(
        self, config: TransformerConfig, opts: Any, dims: SizeDims, arch: dict[str, Any]
    ) -> TransformerConfig:
        block = config.block
        assert not isinstance(block, dict)
        config = ablation_config(config, arch)
        config.block = SiameseNormBlockConfig(**fields_of(block), output_norms=opts.output_norms)
        return config

    def extra_model_params(self, opts: Any, config: TransformerConfig) -> int:
        assert config.lm_head.layer_norm is not None
        return 2 * config.lm_head.layer_norm.num_params(config.d_model)  # final X and Y norms

    def apply_compile(self, model: torch.nn.Module, opts: Any) -> None:
        import torch

        model._merge_streams = torch.compile(model._merge_streams)  # type: ignore[method-assign]


class DepthAttentionModel(BlockModel):
    def configure(
        self, config: TransformerConfig, opts: Any, dims: SizeDims, arch: dict[str, Any]
    ) -> TransformerConfig:
        block = config.block
        assert not isinstance(block, dict)
        mixer = block.sequence_mixer
        config = ablation_config(config, arch)
        config.block = dataclasses.replace(
            block, sequence_mixer=DepthAttentionConfig(**fields_of(mixer))
        )
        return config


class LoopedModel(BlockModel):
    def configure(
        self, config: TransformerConfig, opts: Any, dims: SizeDims, arch: dict[str, Any]
    ) -> TransformerConfig:
        return ablation_config(config, arch)

    def extra_model_params(self, opts: Any, config: TransformerConfig) -> int:
        if not opts.state_norm:
            return 0
        assert config.lm_head.layer_norm is not None
        return config.lm_head.layer_norm.num_params(config.d_model)

    def apply_compile(self, model: torch.nn.Module, opts: Any) -> None:
        if model.state_norm is not None:  # type: ignore[union-attr]
            model.state_norm.compile()  # type: ignore[union-attr,operator]


class LayersModel(BlockModel):
    """The depth is the torch-free half's ``physical_layers``; the model is plain OLMo-core."""


SIAMESE_NORM = SiameseNormModel()
DEPTH_ATTENTION = DepthAttentionModel()
LOOPED = LoopedModel()
LAYERS = LayersModel()


class OlmoCoreModel(BlockModel):
    """OLMo-core's own fields, set on the OLMo 3 config before the other blocks wrap it."""

    def configure(
        self, config: TransformerConfig, opts: Any, dims: SizeDims, arch: dict[str, Any]
    ) -> TransformerConfig:
        from olmo_core.nn.attention import GateConfig, GateGranularity
        from olmo_core.nn.feed_forward import ActivationFunction
        from olmo_core.nn.transformer import TransformerBlockType

        block = config.block
        assert not isinstance(block, dict)
        mixer = block.sequence_mixer
        changes: dict[str, Any] = {}
        if opts.qk_norm is False:
            mixer = dataclasses.replace(mixer, qk_norm=None)
        if opts.rope_theta is not None:
            mixer = dataclasses.replace(
                mixer, rope=dataclasses.replace(mixer.rope, theta=opts.rope_theta)
            )
        if opts.attention_gate is not None:
            mixer = dataclasses.replace(
                mixer, gate=GateConfig(granularity=GateGranularity(opts.attention_gate))
            )
        ff = block.feed_forward
        if opts.mlp_hidden_size is not None:
            ff = dataclasses.replace(ff, hidden_size=opts.mlp_hidden_size)
        if opts.activation is not None:
            ff = dataclasses.replace(ff, activation=ActivationFunction(opts.activation))
        if opts.block_name is not None:
            changes["name"] = TransformerBlockType(opts.block_name)
        config.block = dataclasses.replace(block, sequence_mixer=mixer, feed_forward=ff, **changes)
        return config


OLMO_CORE = OlmoCoreModel()
