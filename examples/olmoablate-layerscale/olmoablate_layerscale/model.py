"""LayerScale's torch half: an OLMo-core block-config subclass that builds the scaled block.

Equations and cost: :mod:`olmoablate_layerscale`. The λ vectors live inside each
``TransformerBlock``, so OLMo-core's per-block ``torch.compile`` and FSDP units cover them (no
model-level module, no graph break: λ is a parameter, not a Python float); they are initialised
explicitly to ε in ``reset_parameters`` (``Transformer.init_weights`` calls it after
``to_empty``) and draw no random numbers, so every other weight equals the baseline's for the
same ``init_seed``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from olmo_core.exceptions import OLMoConfigurationError
from olmo_core.nn.buffer_cache import BufferCache
from olmo_core.nn.transformer import TransformerConfig
from olmo_core.nn.transformer.block import ReorderedNormTransformerBlock
from olmo_core.nn.transformer.config import TransformerBlockConfig, TransformerBlockType

from olmoablate.models.block_model import BlockModel
from olmoablate.plan.sizes import SizeDims


class LayerScaleBlock(ReorderedNormTransformerBlock):
    """OLMo 3's block with ``λ_a``, ``λ_m`` (fp32, shape (d,)) on the two branch outputs."""

    def __init__(self, *, layerscale_init: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.layerscale_init = layerscale_init
        device = kwargs.get("init_device", "cpu")
        self.attention_scale = nn.Parameter(torch.empty(self.d_model, device=device))
        self.feed_forward_scale = nn.Parameter(torch.empty(self.d_model, device=device))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """λ = ε (explicit, constant: no RNG draws)."""
        with torch.no_grad():
            self.attention_scale.fill_(self.layerscale_init)
            self.feed_forward_scale.fill_(self.layerscale_init)

    def forward(  # type: ignore[override]
        self,
        x: torch.Tensor,
        *,
        loss_div_factor: torch.Tensor | float | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        del loss_div_factor
        delta = self.attention_norm(self.attention(x, **kwargs))
        h = x + (self.attention_scale * delta.float()).to(delta.dtype)
        delta = self.feed_forward_norm(self.feed_forward(h))
        return h + (self.feed_forward_scale * delta.float()).to(delta.dtype)


@dataclass
class LayerScaleBlockConfig(TransformerBlockConfig):
    """``TransformerBlockConfig`` (reordered norm) + ε; builds :class:`LayerScaleBlock`."""

    layerscale_init: float = 0.1

    def build(
        self,
        *,
        d_model: int,
        block_idx: int,
        n_layers: int,
        init_device: str = "cpu",
        cache: BufferCache | None = None,
    ) -> LayerScaleBlock:
        if self.name != TransformerBlockType.reordered_norm or self.feed_forward_moe:
            raise OLMoConfigurationError("LayerScale is defined here on OLMo 3's dense block")
        kwargs = self.as_dict(exclude_none=True, recurse=False)
        kwargs.pop("name")
        kwargs.update(
            d_model=d_model,
            block_idx=block_idx,
            n_layers=n_layers,
            init_device=init_device,
            cache=cache,
        )
        return LayerScaleBlock(**kwargs)

    def num_params(self, d_model: int) -> int:
        return super().num_params(d_model) + 2 * d_model


class LayerScaleModel(BlockModel):
    def configure(
        self, config: TransformerConfig, opts: Any, dims: SizeDims, arch: dict[str, Any]
    ) -> TransformerConfig:
        block = config.block
        assert not isinstance(block, dict)
        config.block = LayerScaleBlockConfig(
            **{f.name: getattr(block, f.name) for f in dataclasses.fields(block)},
            layerscale_init=opts.init,
        )
        return config


MODEL = LayerScaleModel()
