"""SiameseNorm block: two residual streams sharing one attention and one MLP per layer.

Exact definition (0-based layer ``l``, ``c_l = sqrt(2 (l + 1))``, X = post-norm-like stream,
Y = pre-norm-like stream, both starting at the token embeddings)::

    a   = γ_l ⊙ X + RMSNorm_ya(Y)                  γ_l: channel-wise, init 1 (precision below)
    Δ   = Attn(a)            [ → attention_norm(Δ)    if output_norms ]
    Y  += Δ ;  X = RMSNorm_x(X + Δ / c_l)
    m   = RMSNorm_in(X + RMSNorm_ym(Y))
    Δ   = MLP(m)             [ → feed_forward_norm(Δ) if output_norms ]
    Y  += Δ ;  X += Δ / c_l

and after the last layer ``LMHead(RMSNorm_head(RMSNorm_fx(X) + RMSNorm_fy(Y)))`` where
``RMSNorm_head`` is the LM head's own norm (see ``AblationTransformer``).

Parameters per layer: γ and four RMSNorm weights (``y_attention_norm``, ``x_norm``,
``y_feed_forward_norm``, ``feed_forward_input_norm``); OLMo 3's two output norms are deleted unless
``output_norms`` (unused parameters break DDP), and the final X and Y norms are the model's (the
count is :meth:`olmoablate.plan.arch.SiameseNormBlock.extra_params`). FLOPs equal the baseline's:
norms and γ are not counted, as OLMo-core does not count block norms.

Precision of γ: its parameter, gradient reduction and optimizer state are fp32 on every path; γ ⊙ X
is computed in fp32 and rounded once to the stream dtype. Under FSDP/HSDP with ``param_dtype=bf16``
γ enters the product rounded to bf16, like every norm weight of both arms: an fp32 compute copy
would need a nested ``fully_shard`` unit inside every compiled block (one more all-gather and
reduce-scatter per block and step) and would treat one weight of the variant unlike the baseline's.

The two streams travel between blocks as a tuple ``(X, Y)``; ``AblationTransformer.forward``
creates and merges them. A tuple (not a concatenation on the last dimension) avoids copying both
streams at every layer; FSDP2, activation checkpointing and ``torch.compile`` accept tuple inputs.
Every new parameter is constant-initialised in ``reset_parameters`` and draws no random numbers,
so the attention/MLP weights equal the baseline's for the same ``init_seed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from olmo_core.exceptions import OLMoConfigurationError
from olmo_core.nn.buffer_cache import BufferCache
from olmo_core.nn.transformer.block import TransformerBlock
from olmo_core.nn.transformer.config import TransformerBlockConfig, TransformerBlockType


class SiameseNormBlock(TransformerBlock):
    """One SiameseNorm layer; input and output are the stream pair ``(X, Y)``."""

    def __init__(self, *, output_norms: bool = False, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        layer_norm = kwargs["layer_norm"]
        init_device = str(kwargs.get("init_device", "cpu"))
        d_model = self.d_model
        self.output_norms = output_norms
        if not output_norms:
            del self.attention_norm
            del self.feed_forward_norm
        self.gamma = nn.Parameter(torch.ones(d_model, dtype=torch.float32, device=init_device))
        self.y_attention_norm = layer_norm.build(d_model, init_device=init_device)  # type: ignore[attr-defined]
        self.x_norm = layer_norm.build(d_model, init_device=init_device)  # type: ignore[attr-defined]
        self.y_feed_forward_norm = layer_norm.build(d_model, init_device=init_device)  # type: ignore[attr-defined]
        self.feed_forward_input_norm = layer_norm.build(d_model, init_device=init_device)  # type: ignore[attr-defined]
        self.depth_scale = math.sqrt(2.0 * (self.block_idx + 1))
        # 1/c_l as a 0-d buffer, not a Python float: torch.compile guards on float attributes,
        # so every layer would compile its own graph (and hit the recompile limit); as a tensor
        # all layers of one attention kind share one graph. ``addcmul`` keeps the eager update
        # one fused kernel. Not persistent: it is a constant of the layer index, not state.
        self.register_buffer(
            "inv_depth_scale",
            torch.tensor(1.0 / self.depth_scale, dtype=torch.float32, device=init_device),
            persistent=False,
        )

    def reset_parameters(self) -> None:
        """Called by ``Transformer.init_weights`` after ``to_empty``: γ = 1 (no RNG draws)."""
        nn.init.ones_(self.gamma)
        with torch.no_grad():
            self.inv_depth_scale.fill_(1.0 / self.depth_scale)

    def forward(  # type: ignore[override]
        self,
        x: tuple[torch.Tensor, torch.Tensor],
        *,
        loss_div_factor: torch.Tensor | float | None = None,
        **kwargs: object,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        del loss_div_factor
        xs, ys = x
        if xs.dtype == self.gamma.dtype:  # one fused kernel (fp32 γ on fp32 streams)
            a = torch.addcmul(self.y_attention_norm(ys), self.gamma, xs)
        else:  # γ ⊙ X in fp32, rounded to the stream dtype before the sum
            a = (self.gamma * xs.float()).to(xs.dtype) + self.y_attention_norm(ys)
        delta = self.attention(a, **kwargs)
        if self.output_norms:
            delta = self.attention_norm(delta)
        ys = ys + delta
        xs = self.x_norm(torch.addcmul(xs, delta, self.inv_depth_scale))
        delta = self.feed_forward(self.feed_forward_input_norm(xs + self.y_feed_forward_norm(ys)))
        if self.output_norms:
            delta = self.feed_forward_norm(delta)
        return torch.addcmul(xs, delta, self.inv_depth_scale), ys + delta

    def apply_tp(self, *args: object, **kwargs: object) -> None:
        raise NotImplementedError("tensor parallelism is not supported for SiameseNorm blocks")


@dataclass
class SiameseNormBlockConfig(TransformerBlockConfig):
    """Block config that builds :class:`SiameseNormBlock` (OLMo-core's build is a closed if/elif)."""

    output_norms: bool = False

    def build(
        self,
        *,
        d_model: int,
        block_idx: int,
        n_layers: int,
        init_device: str = "cpu",
        cache: BufferCache | None = None,
    ) -> SiameseNormBlock:
        if self.name != TransformerBlockType.reordered_norm:
            raise OLMoConfigurationError("SiameseNorm is defined on OLMo 3's reordered_norm block")
        if self.layer_norm is None or self.feed_forward is None or self.feed_forward_moe:
            raise OLMoConfigurationError("SiameseNorm needs a dense block with a layer_norm")
        kwargs = self.as_dict(exclude_none=True, recurse=False)
        kwargs.pop("name")
        kwargs.update(
            d_model=d_model,
            block_idx=block_idx,
            n_layers=n_layers,
            init_device=init_device,
            cache=cache,
        )
        return SiameseNormBlock(**kwargs)

    def num_params(self, d_model: int) -> int:
        assert self.layer_norm is not None
        norm = self.layer_norm.num_params(d_model)
        params = super().num_params(d_model)  # attention + MLP + the two output norms
        if not self.output_norms:
            params -= 2 * norm
        return params + d_model + 4 * norm  # γ + four new norms
