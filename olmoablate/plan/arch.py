"""The architecture blocks of a variant, defined once for the spec, the models and the accounting.

Each rule that both the model and its cost need (``DepthAttention.sources``,
``Looped.loops_at_step``) is a method here, so they cannot disagree. Pure pydantic (login node).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from olmoablate.errors import PosInt, Strict, UserError, first_error
from olmoablate.plan.blocks import Block, LayerApp, Unrolled, get_block, is_block_key
from olmoablate.plan.sizes import ATTENTION_CYCLE, SizeDims

#: The bundled blocks (the keys of ``architecture`` in the plan; installed packages add more,
#: see :mod:`olmoablate.plan.blocks`).
BLOCKS = ("siamese_norm", "depth_attention", "looped", "layers")


class SiameseNorm(Strict):
    """SiameseNorm: two residual streams sharing attention/MLP weights; ``output_norms`` keeps
    OLMo 3's output norms inside the sublayer update Δ."""

    output_norms: bool = False


class DepthAttention(Strict):
    """Depth-Attention: a per-token softmax over the (key, value) of earlier layers ``sources``."""

    stride: int = Field(8, ge=1)
    recent_window: int = Field(0, ge=0)

    def sources(self, layer: int) -> list[int]:
        """S_l = {j < l : j mod stride == 0} ∪ {the ``recent_window`` layers before l}, sorted;
        ``layer`` counts unrolled layers (a looped model's loop t, block j is ``t * K + j``)."""
        chosen = {j for j in range(layer) if j % self.stride == 0}
        chosen.update(range(max(0, layer - self.recent_window), layer))
        return sorted(chosen)

    def layer_flops(self, layer: int, n_heads: int, n_kv_heads: int, head_dim: int) -> int:
        """Training FLOPs per token mixing adds to a differentiated application of unrolled layer
        ``layer`` with n >= 1 sources: 3 x (4·h_kv·d_h·(n+1), the scores and weighted sum over the
        sources and itself, + h_q·d_h for the group-mean query under GQA); 0 without sources.
        Softmax and elementwise work are not counted. The one formula the plan and model use."""
        n = len(self.sources(layer))
        if n == 0:
            return 0
        gqa = n_heads * head_dim if n_kv_heads < n_heads else 0
        return 3 * (4 * n_kv_heads * head_dim * (n + 1) + gqa)


#: The most layers a size has and a variant applies (``layers.n_layers``, a loop's body and its
#: unrolled depth body_layers x loops): DeepNet trained 1,000 (Wang et al. 2022); Llama 3.1
#: 405B has 126, OLMo 3 7B 32. Above it the spec is a typo; the accounting walks every layer.
MAX_LAYERS = 1024


class Curriculum(Strict):
    """Loop-count curriculum: ``b(step) = min(loops, start + increment * ((step - 1) //
    interval_steps))`` for OLMo-core's 1-based step."""

    start: int = Field(ge=1)
    increment: int = Field(ge=1)
    interval_steps: int = Field(ge=1)


class Looped(Strict):
    """Looped OLMo: K = ``body_layers`` blocks applied ``loops`` times, loss on the last ``tail``."""

    body_layers: int = Field(ge=1, le=MAX_LAYERS)
    loops: int = Field(ge=1, le=MAX_LAYERS)
    tail: int = Field(1, ge=1)
    input_injection: bool = True
    state_norm: bool = False
    curriculum: Curriculum | None = None

    @model_validator(mode="after")
    def _check(self) -> Looped:
        if self.body_layers % ATTENTION_CYCLE:
            raise ValueError(
                f"body_layers={self.body_layers} must be a multiple of {ATTENTION_CYCLE} so one "
                "loop keeps the [SWA, SWA, SWA, Full] cycle (allowed: 4, 8, 12, ...)"
            )
        if self.body_layers * self.loops > MAX_LAYERS:
            raise ValueError(
                f"body_layers x loops = {self.body_layers * self.loops} layers unrolled (allowed: "
                f"at most {MAX_LAYERS}, more than any published LM applies)"
            )
        if self.tail > self.loops:
            raise ValueError(f"tail={self.tail} must be <= loops={self.loops}")
        if self.curriculum is not None:
            if self.curriculum.start > self.loops:
                raise ValueError(
                    f"curriculum.start={self.curriculum.start} must be <= loops={self.loops}"
                )
            if self.curriculum.start < self.tail:
                raise ValueError(
                    f"curriculum.start={self.curriculum.start} must be >= tail={self.tail} "
                    "(every step supervises the last `tail` loops)"
                )
        return self

    def loops_at_step(self, step: int) -> int:
        """The loop count b of OLMo-core's 1-based ``global_step`` ``step``: the one definition
        the model, the training callback and the FLOPs accounting use."""
        c = self.curriculum
        if c is None:
            return self.loops
        return min(self.loops, c.start + c.increment * ((max(step, 1) - 1) // c.interval_steps))

    def loop_schedule(self, steps: int) -> list[tuple[int, int]]:
        """``[(b, number of steps trained with b), ...]`` for steps 1..``steps``, in order."""
        out: list[tuple[int, int]] = []
        step = 1
        while step <= steps:
            b = self.loops_at_step(step)
            if b == self.loops or self.curriculum is None:
                n = steps - step + 1
            else:
                c = self.curriculum
                n = min(c.interval_steps - (step - 1) % c.interval_steps, steps - step + 1)
            out.append((b, n))
            step += n
        return out


class Layers(Strict):
    """A standard OLMo 3 model with another depth, e.g. the parameter-matched reference of a loop."""

    n_layers: int = Field(ge=1, le=MAX_LAYERS)


class Architecture(Strict):
    """A variant: a combination of architecture blocks; no block at all is plain OLMo 3.
    ``blocks`` maps each registry key to its validated options, in the blocks' ``order``;
    ``arch.<name>`` reads a block's options (None when absent), e.g. ``arch.looped``."""

    blocks: dict[str, Any] = {}
    #: Restrict this variant to some of the spec's sizes (e.g. single-component ablations at 1B
    #: only). Not part of the architecture itself: never recorded in a run entry.
    sizes: list[str] | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _blocks(cls, data: Any, handler: Any) -> Architecture:
        if isinstance(data, Architecture) or not isinstance(data, Mapping):
            return handler(data)
        inner = data.get("blocks")
        if isinstance(inner, Mapping) and all(isinstance(v, BaseModel) for v in inner.values()):
            return handler(data)  # an Architecture's own fields (model_copy, a dump)

        errors: list[InitErrorDetails] = []
        found: dict[str, tuple[int, Any]] = {}
        for pos, (key, value) in enumerate(data.items()):
            if key == "sizes" or value is None:  # `block: null` = not set, as before
                continue
            try:
                block = get_block(str(key))
            except UserError as err:
                msg = str(err).split(": ", 1)[-1]
                errors.append(_value_error((key,), value, msg))
                continue
            try:
                found[str(key)] = (block.order * 10_000 + pos, block.parse(value))
            except ValidationError as err:
                errors.extend(_nested(key, err))
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        blocks = {k: v for k, (_, v) in sorted(found.items(), key=lambda kv: kv[1][0])}
        problem = _combination_problem(list(blocks))
        if problem:
            raise ValueError(problem)
        return handler({"blocks": blocks, **({"sizes": data["sizes"]} if "sizes" in data else {})})

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_"):
            blocks = self.__dict__.get("blocks")
            if blocks is not None and (name in blocks or is_block_key(name)):
                return blocks.get(name)
        return super().__getattr__(name)  # type: ignore[misc]

    @classmethod
    def field_model(cls, key: str) -> type | None:
        """The options model of block ``key`` (spec errors name its allowed fields)."""
        try:
            return get_block(key).Options
        except UserError:
            return None

    def as_mapping(self) -> dict[str, Any]:
        """Only the blocks that are set, with defaults filled in (what the plan records)."""
        return {k: v.model_dump() for k, v in self.blocks.items()}

    @property
    def is_baseline(self) -> bool:
        return not self.blocks

    @property
    def n_layers(self) -> int | None:
        layers = self.blocks.get("layers")
        return layers.n_layers if layers is not None else None

    def n_physical_layers(self, size_layers: int) -> int:
        """Blocks with their own weights: the loop body, the ``layers`` depth or the size's."""
        n = size_layers
        for key, opts in self.blocks.items():
            n = get_block(key).physical_layers(opts, n)
        return n


def _combination_problem(keys: list[str]) -> str | None:
    """The first pair of blocks one of which excludes the other (its reason), or None."""
    for key in keys:
        for other, why in get_block(key).excludes.items():
            if other in keys:
                return f"{other} cannot be combined with {key} ({why})"
    unrolling = [k for k in keys if type(get_block(k)).unroll is not Block.unroll]
    if len(unrolling) > 1:
        return f"{unrolling[0]} cannot be combined with {unrolling[1]} (both change how layers are applied)"
    return None


def _value_error(loc: tuple[Any, ...], value: Any, msg: str) -> InitErrorDetails:
    return InitErrorDetails(type="value_error", loc=loc, input=value, ctx={"error": msg})


def _nested(key: Any, err: ValidationError) -> list[InitErrorDetails]:
    """A block's option errors, located under the block's key."""
    out: list[InitErrorDetails] = []
    for e in err.errors():
        ctx = e.get("ctx") or {}
        if e["type"] == "value_error":
            out.append(_value_error((key, *e["loc"]), e["input"], str(ctx.get("error", e["msg"]))))
        else:
            out.append(InitErrorDetails(type=e["type"], loc=(key, *e["loc"]), input=e["input"], ctx=ctx))
    return out


def parse_architecture(
    arch: Architecture | Mapping[str, Any] | None, where: str = "architecture"
) -> Architecture:
    """``arch`` (a plan's mapping or a model) as an :class:`Architecture`, else a UserError."""
    if isinstance(arch, Architecture):
        return arch
    if arch is None:
        return Architecture()
    if not isinstance(arch, Mapping):
        raise UserError(f"{where}: expected a mapping of blocks ({', '.join(BLOCKS)})")
    try:
        return Architecture.model_validate({k: ({} if v is True else v) for k, v in arch.items()})
    except ValidationError as err:
        raise UserError(f"{where}: {first_error(err, BLOCKS)}") from None


# The bundled blocks, through the same Block interface any installed proposal uses; their cost
# hooks are exact (checked against OLMo-core and the built models in tests/plan/test_accounting.py).

#: The modules the bundled blocks' code identity hashes (besides their torch halves below).
_CONTRACT = ("olmoablate.plan.arch", "olmoablate.plan.blocks")
_MODELS = (
    "olmoablate.models.block_model",
    "olmoablate.models.bundled",
    "olmoablate.models.build",
    "olmoablate.models.transformer",
)


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
        return opts.layer_flops(app.depth, dims.n_heads, dims.n_kv_heads, dims.head_dim)

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
#: OLMo-core 3.0 values (checked against the library in tests/plan/test_arch_olmo_core.py; kept as
#: text so `validate` never imports olmo_core/torch).
OLMO_CORE_ACTIVATIONS = ("silu", "gelu_tanh")
OLMO_CORE_BLOCK_NAMES = ("reordered_norm", "default", "peri_norm")
OLMO_CORE_GATES = ("headwise", "elementwise")


class OlmoCoreFields(Strict):
    """OLMo-core's own ``TransformerConfig`` fields as a variant (unset = OLMo 3's value)."""

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
