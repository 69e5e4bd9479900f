"""The architecture blocks of a variant, defined once for the spec, the models and the accounting.

Why here: the spec validates them, the plan records them, the model builder instantiates them and
the accounting counts their parameters and FLOPs. Each rule that more than one of those needs —
which earlier layers a Depth-Attention layer reads (``DepthAttention.sources``), how many loops
a looped model runs at a training step (``Looped.loops_at_step``) — is a method here, so the model
and the cost of the model cannot disagree. Pure pydantic: ``validate``/``plan`` import it on a
login node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from olmoablate.contract.base import Strict, first_error
from olmoablate.contract.sizes import ATTENTION_CYCLE
from olmoablate.errors import UserError

#: The bundled blocks (the keys of ``architecture`` in the plan; installed packages add more,
#: see :mod:`olmoablate.contract.blocks`).
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
        """S_l = {j < l : j mod stride == 0} ∪ {the ``recent_window`` layers before l}, sorted.

        ``layer`` counts unrolled layers (a looped model's loop t, block j is ``t * K + j``).
        """
        chosen = {j for j in range(layer) if j % self.stride == 0}
        chosen.update(range(max(0, layer - self.recent_window), layer))
        return sorted(chosen)


class Curriculum(Strict):
    """Loop-count curriculum: ``b(step) = min(loops, start + increment * ((step - 1) //
    interval_steps))`` for OLMo-core's 1-based step."""

    start: int = Field(ge=1)
    increment: int = Field(ge=1)
    interval_steps: int = Field(ge=1)


class Looped(Strict):
    """Looped OLMo: K = ``body_layers`` blocks applied ``loops`` times, loss on the last ``tail``."""

    body_layers: int = Field(ge=1)
    loops: int = Field(ge=1)
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
        """The loop count b of training step ``step``: OLMo-core's 1-based ``global_step`` of the
        step being trained (the first step is 1). The one definition the model, the training
        callback and the FLOPs accounting all use."""
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

    n_layers: int = Field(ge=1)


class Architecture(Strict):
    """A variant: a combination of architecture blocks; no block at all is plain OLMo 3.

    Blocks are found through the registry (:func:`olmoablate.contract.blocks.get_block`: bundled,
    installed through the ``olmoablate.blocks`` entry points, or a ``module:attr`` key), so this
    model has no field per block: ``blocks`` maps each key to its validated options, in the
    blocks' ``order``. ``arch.<name>`` reads a block's options (None when absent) for any
    registered name, e.g. ``arch.looped``.
    """

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
        from olmoablate.contract.blocks import get_block

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
            from olmoablate.contract.blocks import is_block_key

            blocks = self.__dict__.get("blocks")
            if blocks is not None and (name in blocks or is_block_key(name)):
                return blocks.get(name)
        return super().__getattr__(name)  # type: ignore[misc]

    @classmethod
    def field_model(cls, key: str) -> type | None:
        """The options model of block ``key`` (spec errors name its allowed fields)."""
        from olmoablate.contract.blocks import get_block

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
        """``layers.n_layers`` when the variant changes the depth, else None."""
        layers = self.blocks.get("layers")
        return layers.n_layers if layers is not None else None

    def n_physical_layers(self, size_layers: int) -> int:
        """Blocks with their own weights: the loop body, the ``layers`` depth or the size's."""
        from olmoablate.contract.blocks import get_block

        n = size_layers
        for key, opts in self.blocks.items():
            n = get_block(key).physical_layers(opts, n)
        return n


def _combination_problem(keys: list[str]) -> str | None:
    """The first pair of blocks one of which excludes the other (its reason), or None."""
    from olmoablate.contract.blocks import get_block

    for key in keys:
        for other, why in get_block(key).excludes.items():
            if other in keys:
                return f"{other} cannot be combined with {key} ({why})"
    unrolling = [k for k in keys if type(get_block(k)).unroll is not _base_unroll()]
    if len(unrolling) > 1:
        return f"{unrolling[0]} cannot be combined with {unrolling[1]} (both change how layers are applied)"
    return None


def _base_unroll() -> Any:
    from olmoablate.contract.blocks import Block

    return Block.unroll


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
    """``arch`` (a plan's mapping or a model) as an :class:`Architecture`; a one-line UserError
    naming the field and what is allowed when it is not one."""
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
