"""The pydantic base every contract model shares, and the small types they reuse.

Why strict: a typo in a 7B spec (``learning_rate`` instead of ``lr``) must fail `validate` in CI,
not silently train with a default for days; the same strictness makes a hand-edited plan.json
fail `Plan.load` with the field's name instead of a KeyError ten minutes into a Slurm job.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

#: Names of specs, variants, gates and eval sets (they become file and run names).
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class Strict(BaseModel):
    """Unknown keys, type coercions (``true`` as 1, ``"8"`` as 8) and inf/nan are errors."""

    model_config = ConfigDict(
        extra="forbid", strict=True, allow_inf_nan=False, populate_by_name=False
    )


PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
