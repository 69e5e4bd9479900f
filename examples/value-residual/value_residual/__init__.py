"""Value-residual learning as an olmoablate block — the torch-free half (a ``module:attr`` block).

Zhou et al. 2024, "Value Residual Learning for Alleviating Attention Concentration in
Transformers" (ResFormer): every layer but the first mixes its attention values with the first
layer's values before attention::

    v_n <- λ_n · v_n + (1 − λ_n) · v_1,     λ_n a learned scalar per layer (n >= 2), init ``init``

Cost (exact): L − 1 fp32 scalars (none with ``learnable: false``); the mix is elementwise, so
OLMo-core's FLOPs convention (6 x matmul params + attention) is unchanged and the FLOP counter
sees no new matrix product; activations keep the mixed v per layer. The KV cache stores the
mixed values, so decoding needs nothing more. The torch half is :mod:`value_residual.model`.
Not combinable with Depth-Attention (its own attention) or Looped OLMo (v_1 of a loop is not
defined by the paper). Used from a spec with this folder on ``PYTHONPATH``::

    variants:
      vres: {"value_residual:BLOCK": {init: 0.5}}
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from olmoablate.errors import Strict
from olmoablate.plan.blocks import Block
from olmoablate.plan.sizes import SizeDims


class ValueResidualOptions(Strict):
    """``init``: λ at step 0 (1 = the baseline); ``learnable``: train λ (else a fixed mix)."""

    init: float = Field(0.5, ge=0, le=1)
    learnable: bool = True


class ValueResidual(Block):
    name = "value_residual"
    Options = ValueResidualOptions
    summary = "v_n <- λ_n v_n + (1-λ_n) v_1 in every layer but the first (Zhou et al. 2024)"
    model = "value_residual.model:MODEL"
    excludes = {
        "siamese_norm": "both replace OLMo 3's transformer block",
        "depth_attention": "Depth-Attention replaces OLMo-core's Attention",
        "looped": "v_1 of a looped model is not defined by the paper",
    }

    def check_size(self, opts: Any, dims: SizeDims) -> str | tuple[str, str] | None:
        if dims.n_layers < 2:
            return "value residuals need at least 2 layers"
        return None

    def extra_params(self, opts: Any, dims: SizeDims, n_layers: int) -> int:
        return (n_layers - 1) if opts.learnable else 0

    def activation_bytes(self, opts: Any, dims: SizeDims, act_unit: int) -> int:
        return dims.n_kv_heads * dims.head_dim * act_unit  # the mixed v per layer


BLOCK = ValueResidual()
