"""The plan's run-entry sections, built from the spec's own models (one definition per field).

Why derived, not re-typed: ``training`` and ``slurm`` typed again by hand declared one field in
four places whose types and bounds drifted. :func:`resolved` keeps the spec model's fields, order,
annotations and bounds, with only declared differences (``required``, ``drop``, ``rename``,
``replace``/``add``); every field is required. Sections copied verbatim keep the spec's model.

Why ``create_model`` rather than subclasses: a subclass cannot drop a field and would inherit the
spec models' validators (one reads ``warmup_fraction``, which the plan drops; one accepts spec
shorthands such as ``tokens: 10M`` that a plan must not hold).
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from olmoablate.plan.schema import Data, Schedule, Slurm, Training


class PlanModel(BaseModel):
    """Frozen (a stage cannot edit the plan in memory), unknown keys are errors; validators are
    built on first use (``defer_build``, see :class:`olmoablate.errors.Strict`)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, allow_inf_nan=False, defer_build=True
    )


def _without_none(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = tuple(a for a in typing.get_args(annotation) if a is not type(None))
        if len(rest) == 1:
            return rest[0]
        return typing.Union[rest]  # noqa: UP007 - built from a tuple
    return annotation


def field_type(info: FieldInfo) -> Any:
    """A field's annotation with its constraints (``Field(gt=0)``), without its default."""
    ann = info.annotation
    return Annotated[(ann, *info.metadata)] if info.metadata else ann


def resolved(
    spec_model: type[BaseModel],
    name: str,
    *,
    required: tuple[str, ...] = (),
    drop: tuple[str, ...] = (),
    rename: dict[str, str] | None = None,
    replace: dict[str, Any] | None = None,
    add: dict[str, tuple[str | None, Any]] | None = None,
    doc: str = "",
) -> type[PlanModel]:
    """The run-entry model of ``spec_model``. ``add``: new field -> (the field it follows, or None
    for the end; its type). A renamed field moves to the end (where plans have written it)."""
    rename, replace, add = rename or {}, replace or {}, add or {}
    fields: dict[str, Any] = {}
    moved: dict[str, Any] = {}
    for key, info in spec_model.model_fields.items():
        if key in drop:
            continue
        ann = replace[key] if key in replace else field_type(info)
        if key in required:
            ann = _without_none(ann)
        (moved if key in rename else fields)[rename.get(key, key)] = (ann, ...)
    fields.update(moved)
    order = list(fields)
    for new, (prev, ann) in add.items():  # each after its predecessor (a spec or added field)
        order.insert(order.index(prev) + 1 if prev is not None else len(order), new)
        fields[new] = (ann, ...)
    fields = {k: fields[k] for k in order}
    unknown = (set(required) | set(drop) | set(rename) | set(replace)) - set(
        spec_model.model_fields
    )
    if unknown:  # a renamed spec field must not silently drop out of the plan's model
        raise TypeError(f"{name}: {spec_model.__name__} has no field(s) {sorted(unknown)}")
    model = create_model(name, __base__=PlanModel, __doc__=doc or None, **fields)
    model.__module__ = __name__
    return model


RunSchedule = resolved(
    Schedule,
    "RunSchedule",
    drop=("warmup_fraction",),
    required=("warmup_steps",),
    doc="``training.schedule`` as planned: the warm-up resolved to steps.",
)

RunData = resolved(
    Data,
    "RunData",
    drop=("vary_with_seed",),
    required=("eos_token_id", "pad_token_id"),
    add={
        "vocab_size": ("seed", Annotated[int, Field(gt=0)]),
        "tokenizer_sha256": ("vocab_size", str | None),
        "dtype": ("tokenizer_sha256", str),
    },
    doc="``training.data`` as planned: the spec's ``data`` with the seed offset applied and the "
    "tokenizer's facts (vocab, EOS, PAD, file hash) and the token dtype resolved.",
)

RunTraining = resolved(
    Training,
    "RunTraining",
    required=("microbatch_size",),
    replace={"schedule": RunSchedule, "data": RunData},
    add={"steps": ("microbatch_size", Annotated[int, Field(gt=0)])},
    doc="``training`` as planned for one size and seed (tokens and steps of this arm).",
)

RunSlurm = resolved(
    Slurm,
    "RunSlurm",
    rename={"time": "time_min"},
    doc="``slurm`` as planned: the spec's block with the time limit in minutes (``time_min``).",
)

#: How each run-entry section differs from its spec model (read by tests/plan/test_planfile.py,
#: which checks every other field has the spec's type).
RESOLUTIONS: dict[str, tuple[type[BaseModel], type[PlanModel]]] = {
    "training": (Training, RunTraining),
    "training.schedule": (Schedule, RunSchedule),
    "training.data": (Data, RunData),
    "slurm": (Slurm, RunSlurm),
}
