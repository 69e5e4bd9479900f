"""The spec's ``gate`` block (and ``budget``): what `plan` pre-registers and `report` decides with.

Why its own module: the gate is read by three stages — `validate` checks it, `plan` hashes it
into plan.json (pre-registration) and the report's statistics run on it — so its defaults (the
step-time and memory limits, the confidence, the noise source) are defined here once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from olmoablate.contract.base import NonNegInt, PosInt, Strict
from olmoablate.contract.metrics import CE_LOSS


class Budget(Strict):
    match: Literal["tokens", "flops"] = "tokens"
    variants: dict[str, Literal["tokens", "flops"]] = {}


class GateNoiseMeasure(Strict):
    """Measure the run-to-run noise now: ``plan`` adds ``aa_seeds`` extra baselines at the stage
    size with other seeds (A/A runs, priced like any run)."""

    aa_seeds: PosInt


class GateNoise(Strict):
    """Where a one-seed gate's noise comes from (docs/gate-statistics.md).

    ``floor``: the standard deviation of the paired delta (variant - baseline, last_n mean)
    across seeds for this recipe, measured earlier. ``measure``: A/A baselines measured now.
    Several paired seeds need neither (their spread is used).
    """

    floor: float | None = Field(None, gt=0)
    measure: GateNoiseMeasure | None = None

    @model_validator(mode="after")
    def _one(self) -> GateNoise:
        if self.floor is not None and self.measure is not None:
            raise ValueError("give noise.floor (measured earlier) or noise.measure, not both")
        return self


class GateStability(Strict):
    max_loss_spikes: NonNegInt = 3
    max_grad_norm: float | None = Field(None, gt=0)
    allow_nonfinite: bool = False


class Gate(Strict):
    stage: str
    promote_to: list[str] = []
    rule: Literal["quality", "quality_per_param"] = "quality"
    metric: str = CE_LOSS
    direction: Literal["lower", "higher"] = "lower"
    min_effect: float = Field(0.0, ge=0)
    confidence: float = Field(0.95, gt=0.5, lt=1)
    last_n: PosInt = 3
    variant: str | None = None
    reference: str | None = None
    tolerance: float = Field(0.02, ge=0)
    noise: GateNoise = GateNoise()
    stability: GateStability = GateStability()
    max_step_time_overhead: float | None = Field(0.10, ge=0)
    max_peak_memory_overhead: float | None = Field(0.10, ge=0)
    max_decode_latency_overhead: float | None = Field(None, ge=0)
    #: Let a pair whose completed arm logged fewer tokens than planned (a truncated
    #: metrics.jsonl) into the gate, compared at the tokens both arms reached. Left out of the
    #: gate's dump while False, so gates pre-registered before the field keep their sha256.
    allow_partial_pairs: bool = Field(False, exclude_if=lambda v: v is False)

    @model_validator(mode="after")
    def _check(self) -> Gate:
        if self.rule == "quality_per_param" and not self.reference:
            raise ValueError(
                "rule quality_per_param needs `reference`: the variant that is the "
                "parameter-matched OLMo 3 model (e.g. `layers: {n_layers: 4}`)"
            )
        return self
