"""LayerScale as an olmoablate block — the torch-free half (options, combinations, exact cost).

LayerScale (Touvron, Cord, Sablayrolles, Synnaeve, Jégou: "Going deeper with Image Transformers",
ICCV 2021, eq. 4) multiplies the output of every residual branch by a learned per-channel
diagonal matrix initialised to a small ε, so that a deep network starts close to the identity::

    x'_l    = x_l  + diag(λ_l)  · SA(η(x_l))
    x_{l+1} = x'_l + diag(λ'_l) · FFN(η(x'_l))          λ_l, λ'_l ∈ R^d, initialised to ε

On OLMo 3's reordered-norm block (norm on the branch output, not its input) the branch outputs
are ``attention_norm(Attn(x))`` and ``feed_forward_norm(MLP(h))``, so here::

    h   = x + λ_a ⊙ attention_norm(Attn(x))
    out = h + λ_m ⊙ feed_forward_norm(MLP(h))

Cost (exact): 2·d parameters per layer (fp32, like OLMo-core's norm weights); no matrix product,
so OLMo-core's FLOPs convention (6 x matmul params + attention) is unchanged, as for block norms;
activations keep the two scaled branch outputs (2·d per layer and token); the KV cache is the
baseline's and decoding runs the block's own forward. The torch half is
:mod:`olmoablate_layerscale.model`. Spec::

    variants:
      layerscale: {layerscale: {init: 0.1}}      # CaiT: 0.1 up to depth 18, 1e-5 at 24, 1e-6 deeper
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from olmoablate.errors import Strict
from olmoablate.plan.blocks import Block
from olmoablate.plan.sizes import SizeDims

__all__ = ["BLOCK", "LayerScale", "LayerScaleOptions"]


class LayerScaleOptions(Strict):
    """``init``: ε, the initial value of every λ (> 0; CaiT uses 0.1 for depth <= 18)."""

    init: float = Field(0.1, gt=0)


class LayerScale(Block):
    name = "layerscale"
    Options = LayerScaleOptions
    summary = "learned per-channel scale λ (init ε) on every residual branch (Touvron et al. 2021)"
    model = "olmoablate_layerscale.model:MODEL"
    excludes = {"siamese_norm": "both replace OLMo 3's transformer block"}

    def extra_params(self, opts: Any, dims: SizeDims, n_layers: int) -> int:
        return 2 * dims.d_model * n_layers

    def activation_bytes(self, opts: Any, dims: SizeDims, act_unit: int) -> int:
        return 2 * dims.d_model * act_unit


BLOCK = LayerScale()
