"""DenseFormer's depth-weighted average as an olmoablate block - the torch-free half.

Pagliardini et al. 2024, "DenseFormer: Enhancing Information Flow in Transformers via Depth
Weighted Averaging": after block i (0-based, of L) the next block's input is a learned weighted
average of the embeddings and every block output so far::

    x_0 = embeddings,   x_{i+1} = Block_i(y_i),   y_0 = x_0,
    y_{i+1} = sum_{j=0}^{i+1} alpha_{i,j} x_j          (alpha_{i,i+1} = 1, the rest 0 at init)

so at step 0 the model is OLMo 3 exactly (the identity mix). Written from docs/blocks.md alone
as its second worked cross-layer example (a model-level mix that needs no model of its own).

Cost (exact): sum_{i<L} (i + 2) = L (L + 3) / 2 fp32 scalars. The mix is elementwise, but its
work grows with depth (i + 2 multiply-adds per element after block i), so it is declared as
``layer_flops`` = 3 x 2 (i + 2) d_model training FLOPs per token, with ``layer_flops_counted =
False``: the plan counts it, the job's FLOP counter (matrix products only) leaves it out.
Activations keep every block output until the backward (L x d per token at most).
"""

from __future__ import annotations

from typing import Any

from olmoablate.errors import Strict
from olmoablate.plan.blocks import Block, LayerApp
from olmoablate.plan.sizes import SizeDims


class DenseFormerOptions(Strict):
    """No options: the paper's DWA after every block, initialised to the identity."""


class DenseFormer(Block):
    name = "denseformer"
    Options = DenseFormerOptions
    summary = "y_{i+1} = sum_j alpha_ij x_j over the embeddings and all block outputs (DWA)"
    model = "denseformer.model:MODEL"
    layer_flops_counted = False  # elementwise multiply-adds: no matrix product to count
    excludes = {
        "siamese_norm": "SiameseNorm's two streams have no single block output to average",
        "depth_attention": "Depth-Attention replaces the model (AblationTransformer)",
        "looped": "a looped model applies a block several times per forward",
    }

    def extra_params(self, opts: Any, dims: SizeDims, n_layers: int) -> int:
        return n_layers * (n_layers + 3) // 2

    def layer_flops(
        self, opts: Any, dims: SizeDims, app: LayerApp, n_layers: int, seq_len: int
    ) -> int:
        return 3 * 2 * (app.layer + 2) * dims.d_model

    def activation_bytes(self, opts: Any, dims: SizeDims, act_unit: int) -> int:
        return dims.d_model * act_unit  # each block's output, kept for the later averages


BLOCK = DenseFormer()
