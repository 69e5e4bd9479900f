"""Checks of a block as it is loaded and how its option types read (for ``olmoablate blocks``).

Kept apart from the registry (:mod:`olmoablate.contract.blocks`) so that module stays the
interface and the registry; everything here is torch-free and imports nothing heavy.
"""

from __future__ import annotations

import importlib.util
import re
import types
import typing
from typing import Any

from pydantic import BaseModel

from olmoablate.errors import UserError


def check_block(block: Any, ref: str, where: str) -> None:
    """The class attributes every block sets, checked when it is loaded, so that a block that
    lacks one (or names a torch half that does not exist) is a one-line error in ``validate``
    rather than an internal error there or a failure of the training job."""
    name, options, model = (getattr(block, a, None) for a in ("name", "Options", "model"))
    missing = [
        f"{attr} ({what})"
        for attr, ok, what in (
            ("name", isinstance(name, str) and name, "the key in a variant"),
            ("Options", isinstance(options, type) and issubclass(options, BaseModel),
             "a pydantic model of its options"),
            ("model", isinstance(model, str) and ":" in model,
             "'module:attr' of its olmoablate.models.blocks.BlockModel"),
        )
        if not ok
    ]
    if missing:
        raise UserError(f"{where}: block {ref!r} does not set {', '.join(missing)}")
    module = str(model).partition(":")[0]
    try:  # found without importing it (the torch half is imported by the job only)
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise UserError(
            f"{where}: block {ref!r}: its torch half {model!r} cannot be found "
            f"(no module {module!r} where this runs)"
        )


def type_name(ann: Any) -> str:
    """``ann`` as a reader writes it: ``int | None``, ``'silu' | 'gelu_tanh'``, ``list[int]``
    (``typing.Optional[...]`` used to print as a bare ``Optional``)."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if ann is type(None):
        return "None"
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    if isinstance(ann, type):
        return ann.__name__
    return re.sub(r"\b(?:[a-z_][a-z0-9_]*\.)+(?=[A-Za-z_])", "", str(ann))  # bare names
