"""The record of a futility stop, as `olmoablate watch` writes it into a run's status.json.

Why a contract model: the stop crosses stages -- `watch` writes it, `status` and a campaign
board read it (what was stopped, at which look, and the GPU-hours it left unspent) -- so it has
one model here and typed readers (:meth:`FutilityStop.of`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError

from olmoablate.contract.base import Strict

#: The key of the record in status.json (and the file watch keeps its stops in).
STATUS_KEY, WATCH_FILE = "futility_stop", "watch.json"


class FutilityStop(Strict):
    """One variant stopped for futility by its gate's pre-registered design."""

    gate: str
    variant: str
    look: int = Field(ge=1)
    of: int = Field(ge=1)
    fraction: float = Field(gt=0, le=1)  # of the token budget, where the look was taken
    reason: str  # "stopped for futility at look 1 of 3, 25% of tokens"
    gpu_hours_saved: float = Field(ge=0)  # variant-arm GPU-hours not spent (plan's estimates)
    runs: list[str]

    @classmethod
    def of_status(cls, status: Any) -> FutilityStop | None:
        """The record in a parsed status.json, or None (absent or unreadable)."""
        return cls.of_record(status.get(STATUS_KEY) if isinstance(status, dict) else None)

    @classmethod
    def of_record(cls, record: Any) -> FutilityStop | None:
        """From status.json's ``futility_stop`` value, or None (absent or unreadable); read it
        as :attr:`olmoablate.contract.runfiles.RunStatus.futility`."""
        if not isinstance(record, dict):
            return None
        try:
            return cls.model_validate(record)
        except ValidationError:
            return None
