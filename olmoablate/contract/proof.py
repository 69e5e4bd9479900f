"""proof.json: what the training job proved about a run before its first step.

Why a file: the report compares the arms' costs with the plan's figures and trusts that both
arms trained the block code the plan recorded. The job checks both at every (re)start
(:mod:`olmoablate.train.proof`, the one writer) and records here what it checked; the report
(:mod:`olmoablate.report.compare.pairing`) reads it back and never compares a pair whose arm trained
other code or another parameter count than planned.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from olmoablate.contract.base import first_error
from olmoablate.errors import UserError
from olmoablate.io import read_json, write_json_atomic


class ProofRecord(BaseModel):
    """The last (re)start's checks: block code hashes, unique parameters, FLOPs per token."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    run_id: str
    #: block key -> sha256 of its source files, as verified against the plan's ``code``
    code: dict[str, str]
    unique_params: int
    #: matrix-product training FLOPs per token counted on the built model, and the formula's
    counted_flops_per_token: float
    formula_flops_per_token: int
    flops_tolerance: float
    seq_len: int
    attempt: int
    checked: str

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.model_dump(mode="json"))

    @classmethod
    def read(cls, path: Path) -> ProofRecord | None:
        """The record at ``path``; None when there is none (a run from before proofs)."""
        if not path.is_file():
            return None
        try:
            return cls.model_validate(read_json(path))
        except (OSError, ValueError) as err:
            if isinstance(err, ValidationError):
                raise UserError(f"{path}: {first_error(err)}") from None
            raise UserError(f"{path}: unreadable ({err})") from None
