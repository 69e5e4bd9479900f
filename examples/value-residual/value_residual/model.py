"""Value residual's torch half: layer 0's attention publishes v_1, the later layers mix it in.

Equations and cost: :mod:`value_residual`. Cross-layer state without a model of its own:
OLMo-core runs ``blocks`` in order, so layer 0's attention writes v_1 into a small holder that
every attention module of the same model shares and the later layers read in the same forward
(:class:`AblationTransformer` runs only the bundled blocks' model-level code). The values are
changed in ``Attention._prepare_qkv``, OLMo-core's hook between the projections and SDPA/the KV
cache. λ lives in each later layer's attention module, is set in ``reset_parameters`` (called by
``Transformer.init_weights`` on every module) and draws no random numbers, so every other weight
equals the baseline's for the same ``init_seed``. Checked on CPU (eager); not yet under
``torch.compile``, where the holder is a side effect of the compiled block.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from olmo_core.nn.attention import Attention
from olmo_core.nn.buffer_cache import BufferCache
from olmo_core.nn.transformer import TransformerConfig
from olmo_core.nn.transformer.config import TransformerBlockConfig

from olmoablate.models.block_model import BlockModel
from olmoablate.plan.sizes import SizeDims


class _V1:
    """Per-model holder of the first layer's values of the current forward."""

    v1: torch.Tensor | None = None


class ValueResidualAttention(Attention):
    """OLMo-core's ``Attention`` whose values are mixed with layer 0's (layer 0 publishes them)."""

    vr_state: _V1
    vr_first: bool
    vr_init: float

    def reset_parameters(self) -> None:
        if not self.vr_first:  # layer 0 has no λ
            with torch.no_grad():
                self.vr_lambda.fill_(self.vr_init)

    def _prepare_qkv(self, x: torch.Tensor, **kwargs: Any):  # type: ignore[override]
        q, k, v = super()._prepare_qkv(x, **kwargs)
        if self.vr_first:
            self.vr_state.v1 = v
            return q, k, v
        v1 = self.vr_state.v1
        assert v1 is not None, "layer 0 runs first"
        lam = self.vr_lambda
        v = (lam * v.float() + (1 - lam) * v1.float()).to(v.dtype)
        return q, k, v


@dataclass
class ValueResidualBlockConfig(TransformerBlockConfig):
    """Builds OLMo-core's block, then specialises its attention (``AttentionConfig.build`` picks
    OLMo-core's classes by name, so subclassing the module here is shorter than re-building it)."""

    vr_init: float = 0.5
    vr_learnable: bool = True

    def build(  # type: ignore[override]
        self,
        *,
        d_model: int,
        block_idx: int,
        n_layers: int,
        init_device: str = "cpu",
        cache: BufferCache | None = None,
    ) -> nn.Module:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(TransformerBlockConfig)}
        block = TransformerBlockConfig(**fields).build(
            d_model=d_model, block_idx=block_idx, n_layers=n_layers, init_device=init_device,
            cache=cache,
        )
        att = block.attention
        if type(att) is not Attention:
            raise TypeError(f"value residual needs OLMo-core's Attention, got {type(att).__name__}")
        if block_idx == 0:  # a new model: a new holder (blocks are built in order)
            self.__dict__["_vr_state"] = _V1()
        att.__class__ = ValueResidualAttention
        att.vr_state = self.__dict__["_vr_state"]
        att.vr_first = block_idx == 0
        att.vr_init = self.vr_init
        if block_idx > 0:  # layer 0 is v_1 itself: nothing to mix
            lam = torch.full((1,), self.vr_init, device=init_device)
            if self.vr_learnable:
                att.vr_lambda = nn.Parameter(lam)
            else:
                att.register_buffer("vr_lambda", lam, persistent=False)
        return block


class ValueResidualModel(BlockModel):
    def configure(
        self, config: TransformerConfig, opts: Any, dims: SizeDims, arch: dict[str, Any]
    ) -> TransformerConfig:
        block = config.block
        assert not isinstance(block, dict)
        config.block = ValueResidualBlockConfig(
            **{f.name: getattr(block, f.name) for f in dataclasses.fields(block)},
            vr_init=opts.init,
            vr_learnable=opts.learnable,
        )
        return config


MODEL = ValueResidualModel()
