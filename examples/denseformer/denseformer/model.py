"""DenseFormer's torch half: each block averages the embeddings and all block outputs so far.

Equations and cost: :mod:`denseformer`. Cross-layer state without a model of its own (see
docs/blocks.md, "Cross-layer state"): OLMo-core runs ``blocks`` in order, so block 0 starts a
per-model list with its input (the embeddings) and every block appends its raw output, then
returns the weighted average as the next block's input. The list lives on a holder created when
block 0 is built, so each built model (the trained one, the proof's fake-tensor replica) has its
own; it is reset by every forward's block 0, so decode (the model's own forward on new tokens)
equals forward. The weights live in a small ``dwa`` module inside each block (compiled and
sharded with it) and are set in its ``reset_parameters`` without drawing random numbers, so
every other weight equals the baseline's for the same ``init_seed``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from olmo_core.nn.buffer_cache import BufferCache
from olmo_core.nn.transformer import TransformerConfig
from olmo_core.nn.transformer.config import TransformerBlockConfig

from olmoablate.models.block_model import BlockModel
from olmoablate.plan.sizes import SizeDims


class _Outputs:
    """Per-model holder: x_0 and the block outputs of the current forward."""

    outs: list[torch.Tensor]

    def __init__(self) -> None:
        self.outs = []


class DWA(nn.Module):
    """The weights alpha_{i, 0..i+1} of block i; identity at init (1 on its own output)."""

    def __init__(self, n_sources: int, init_device: str = "cpu") -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(n_sources, device=init_device))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.alpha.zero_()
            self.alpha[-1] = 1.0


class _DWABlock:
    """Mixed into the class of the block OLMo-core built: its forward, then the average."""

    dwa: DWA
    dwa_state: _Outputs
    dwa_first: bool

    def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        out = super().forward(x, **kwargs)  # type: ignore[misc]
        if self.dwa_first:
            self.dwa_state.outs = [x]
        outs = self.dwa_state.outs
        outs.append(out)
        alpha = self.dwa.alpha
        mixed = alpha[0] * outs[0].float()
        for j in range(1, len(outs)):
            mixed = mixed + alpha[j] * outs[j].float()
        return mixed.to(out.dtype)


_CLASSES: dict[type, type] = {}


def _with_dwa(cls: type) -> type:
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"DWA{cls.__name__}", (_DWABlock, cls), {})
    return _CLASSES[cls]


@dataclass
class DenseFormerBlockConfig(TransformerBlockConfig):
    """Builds OLMo-core's block, then gives it the depth-weighted average of block ``block_idx``."""

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
        if block_idx == 0:  # a new model: a new holder (blocks are built in order)
            self.__dict__["_dwa_state"] = _Outputs()
        block.__class__ = _with_dwa(type(block))
        block.dwa = DWA(block_idx + 2, init_device)
        block.dwa_state = self.__dict__["_dwa_state"]
        block.dwa_first = block_idx == 0
        return block


class DenseFormerModel(BlockModel):
    def configure(
        self, config: TransformerConfig, opts: Any, dims: SizeDims, arch: dict[str, Any]
    ) -> TransformerConfig:
        block = config.block
        assert not isinstance(block, dict)
        config.block = DenseFormerBlockConfig(
            **{f.name: getattr(block, f.name) for f in dataclasses.fields(block)}
        )
        return config


MODEL = DenseFormerModel()
