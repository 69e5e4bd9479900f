"""The bundled blocks — SiameseNorm, Depth-Attention, Looped OLMo, ``layers`` — through the same
:class:`olmoablate.contract.blocks.Block` interface any installed proposal uses.

Their options (and the rules the model, the training callback and the accounting share, e.g.
``DepthAttention.sources``, ``Looped.loops_at_step``) are in :mod:`olmoablate.contract.arch`;
the torch halves in :mod:`olmoablate.models.blocks`. The cost formulas (exact, checked against
OLMo-core and the built models in tests/contract/test_accounting.py):

* SiameseNorm: per layer γ + four RMSNorm weights (5·d), OLMo 3's two output norms (2·d) removed
  unless ``output_norms``; + the final X and Y norms (2·d). No extra matmuls: FLOPs unchanged.
* Depth-Attention: no parameters; per differentiated application of a layer with n ≥ 1 sources
  ``3 · (4·h_kv·d_h·(n+1) (+ h_q·d_h under GQA))`` FLOPs (scores and weighted sum over the
  sources and itself, forward + backward), a third of it in a forward-only application.
* Looped (K body blocks, b loops, T supervised): the body applied b times, the first b − T loops
  forward only, T read-outs; ``state_norm`` adds one RMSNorm weight (d).
* ``layers``: an OLMo 3 model with another depth.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from olmoablate.contract.arch import DepthAttention, Layers, Looped, SiameseNorm
from olmoablate.contract.base import PosInt, Strict
from olmoablate.contract.blocks import Block, LayerApp, Unrolled
from olmoablate.contract.sizes import SizeDims

#: The modules the bundled blocks' code identity hashes (besides their torch halves below).
_CONTRACT = (
    "olmoablate.contract.arch",
    "olmoablate.contract.bundled",
    "olmoablate.contract.blocks",
)
_MODELS = (
    "olmoablate.models.blocks",
    "olmoablate.models.bundled",
    "olmoablate.models.config",
    "olmoablate.models.transformer",
)


def depth_extra_forward_flops(n_sources: int, dims: SizeDims) -> int:
    """Forward FLOPs per token depth mixing adds to one layer with ``n_sources`` sources."""
    if n_sources == 0:
        return 0
    flops = 4 * dims.n_kv_heads * dims.head_dim * (n_sources + 1)
    if dims.n_kv_heads < dims.n_heads:
        flops += dims.n_heads * dims.head_dim
    return flops


class SiameseNormBlock(Block):
    name = "siamese_norm"
    Options = SiameseNorm
    summary = "two residual streams (post-norm X, pre-norm Y) sharing each layer's weights"
    model = "olmoablate.models.bundled:SIAMESE_NORM"
    excludes = {
        "looped": "neither design document defines a two-stream loop state; "
        "allowed with looped: depth_attention"
    }
    order = 10
    source_modules = (*_CONTRACT, *_MODELS, "olmoablate.models.siamese")

    def extra_params(self, opts: SiameseNorm, dims: SizeDims, n_layers: int) -> int:
        d = dims.d_model
        removed = 0 if opts.output_norms else 2 * d * n_layers
        return 5 * d * n_layers - removed + 2 * d

    def activation_bytes(self, opts: Any, dims: SizeDims, act_unit: int) -> int:
        return 5 * dims.d_model * act_unit


class DepthAttentionBlock(Block):
    name = "depth_attention"
    Options = DepthAttention
    summary = "per-token softmax over the (key, mixed value) of earlier layers"
    model = "olmoablate.models.bundled:DEPTH_ATTENTION"
    order = 20
    # einsum over a handful of sources: broadcast multiply + sum, not a matrix product
    layer_flops_counted = False
    source_modules = (*_CONTRACT, *_MODELS, "olmoablate.models.depth_attention")

    def layer_flops(
        self, opts: DepthAttention, dims: SizeDims, app: LayerApp, n_layers: int, seq_len: int
    ) -> int:
        return 3 * depth_extra_forward_flops(len(opts.sources(app.depth)), dims)

    def activation_bytes(self, opts: Any, dims: SizeDims, act_unit: int) -> int:
        return dims.n_kv_heads * dims.head_dim * act_unit


class LoopedBlock(Block):
    name = "looped"
    Options = Looped
    summary = "K body blocks applied b times (truncated backprop through the last `tail` loops)"
    model = "olmoablate.models.bundled:LOOPED"
    order = 30
    source_modules = (*_CONTRACT, *_MODELS)

    def check_size(self, opts: Looped, dims: SizeDims) -> tuple[str, str] | None:
        if opts.body_layers > dims.n_layers:
            return "body_layers", (
                f"body_layers={opts.body_layers} is larger than the depth of size "
                f"{dims.name} ({dims.n_layers} layers; allowed: multiples of 4 up to {dims.n_layers})"
            )
        return None

    def physical_layers(self, opts: Looped, n_layers: int) -> int:
        return opts.body_layers

    def extra_params(self, opts: Looped, dims: SizeDims, n_layers: int) -> int:
        return dims.d_model if opts.state_norm else 0

    def unroll(self, opts: Looped, n_layers: int, phase: int | None, training: bool) -> Unrolled:
        b = opts.loops if phase is None else phase
        tail = min(opts.tail, b) if training else 0
        apps = tuple(
            LayerApp(j, t * n_layers + j, grad=t >= b - tail)
            for t in range(b)
            for j in range(n_layers)
        )
        return Unrolled(apps, readouts=tail if training else 1)

    def phase_at(self, opts: Looped, step: int) -> int:
        return opts.loops_at_step(step)

    def phases(self, opts: Looped, steps: int) -> list[tuple[int, int]]:
        return opts.loop_schedule(steps)


class LayersBlock(Block):
    name = "layers"
    Options = Layers
    summary = "a standard OLMo 3 model with another depth (e.g. a parameter-matched reference)"
    model = "olmoablate.models.bundled:LAYERS"
    excludes = {"looped": "the loop body size is looped.body_layers"}
    order = 40
    source_modules = (*_CONTRACT, *_MODELS)

    def physical_layers(self, opts: Layers, n_layers: int) -> int:
        return opts.n_layers


SIAMESE_NORM = SiameseNormBlock()
DEPTH_ATTENTION = DepthAttentionBlock()
LOOPED = LoopedBlock()
LAYERS = LayersBlock()


# ---------------------------------------------------------------------------------- olmo_core
#: OLMo-core 3.0 values (checked against the library in tests/contract/test_bundled_olmo_core.py; kept as
#: text so `validate` never imports olmo_core/torch).
OLMO_CORE_ACTIVATIONS = ("silu", "gelu_tanh")
OLMO_CORE_BLOCK_NAMES = ("reordered_norm", "default", "peri_norm")
OLMO_CORE_GATES = ("headwise", "elementwise")


class OlmoCoreFields(Strict):
    """OLMo-core's own ``TransformerConfig`` fields as a variant (each field names where it
    lands in OLMo-core's config; unset = OLMo 3's value)."""

    #: block.sequence_mixer.qk_norm: false drops OLMo 3's QK-norm
    qk_norm: bool | None = None
    #: block.sequence_mixer.rope.theta (OLMo 3: 500,000)
    rope_theta: PosInt | None = None
    #: block.feed_forward.hidden_size (OLMo 3: the size's mlp_hidden_size)
    mlp_hidden_size: PosInt | None = None
    #: block.feed_forward.activation (OLMo 3: silu, i.e. SwiGLU)
    activation: Literal["silu", "gelu_tanh"] | None = None
    #: block.name: norm placement (OLMo 3: reordered_norm = norm on the sublayer output;
    #: default = pre-norm; peri_norm = both)
    block_name: Literal["reordered_norm", "default", "peri_norm"] | None = None
    #: block.sequence_mixer.gate: OLMo-core's sigmoid attention output gate (Qiu et al. 2025)
    attention_gate: Literal["headwise", "elementwise"] | None = None

    @model_validator(mode="after")
    def _some(self) -> OlmoCoreFields:
        if not self.model_dump(exclude_none=True):
            raise ValueError(
                f"set at least one OLMo-core field (allowed: {', '.join(type(self).model_fields)})"
            )
        return self


def _qk_norm_params(dims: SizeDims) -> int:
    return dims.n_heads * dims.head_dim + dims.n_kv_heads * dims.head_dim


def _gate_params(opts: OlmoCoreFields, dims: SizeDims) -> int:
    if opts.attention_gate == "headwise":
        return dims.d_model * dims.n_heads
    if opts.attention_gate == "elementwise":
        return dims.d_model * dims.n_heads * dims.head_dim
    return 0


class OlmoCoreBlock(Block):
    name = "olmo_core"
    Options = OlmoCoreFields
    summary = "OLMo-core's own fields: qk_norm, RoPE theta, MLP width/activation, norm placement, attention gate"
    model = "olmoablate.models.bundled:OLMO_CORE"
    excludes = {"siamese_norm": "SiameseNorm defines its own norms on OLMo 3's block"}
    order = 5  # first: the other blocks wrap the edited OLMo 3 config
    source_modules = (*_CONTRACT, *_MODELS)

    def extra_params(self, opts: OlmoCoreFields, dims: SizeDims, n_layers: int) -> int:
        per_layer = _gate_params(opts, dims)
        if opts.qk_norm is False:
            per_layer -= _qk_norm_params(dims)
        if opts.mlp_hidden_size is not None:
            per_layer += 3 * dims.d_model * (opts.mlp_hidden_size - dims.mlp_hidden_size)
        if opts.block_name == "peri_norm":
            per_layer += 2 * dims.d_model  # post-sublayer norms on top of the input norms
        return per_layer * n_layers

    def layer_flops(
        self, opts: OlmoCoreFields, dims: SizeDims, app: LayerApp, n_layers: int, seq_len: int
    ) -> int:
        # OLMo-core's convention: 6 x the attention/MLP parameters, the QK-norm weights included
        flops = 6 * _gate_params(opts, dims) + self.uncounted_layer_flops(
            opts, dims, app, n_layers, seq_len
        )
        if opts.mlp_hidden_size is not None:
            flops += 6 * 3 * dims.d_model * (opts.mlp_hidden_size - dims.mlp_hidden_size)
        return flops

    def uncounted_layer_flops(
        self, opts: OlmoCoreFields, dims: SizeDims, app: LayerApp, n_layers: int, seq_len: int
    ) -> int:
        return -6 * _qk_norm_params(dims) if opts.qk_norm is False else 0


OLMO_CORE = OlmoCoreBlock()
