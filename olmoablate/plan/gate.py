"""The spec's ``gate`` block (and ``budget``): what `plan` pre-registers and `report` decides with.
Its own module because `validate`, `plan` (the hash) and the report read it: defaults live once.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_serializer, model_validator

from olmoablate.errors import NonNegInt, PosInt, Strict
from olmoablate.io import sha256_of
from olmoablate.plan.metrics import CE_LOSS


class Budget(Strict):
    match: Literal["tokens", "flops"] = "tokens"
    variants: dict[str, Literal["tokens", "flops"]] = {}
    #: GPU-hour cap: a number, or per stage with an optional ``total`` ({total: 30000, 1B: 2500}).
    max_gpu_hours: Annotated[float, Field(gt=0)] | dict[str, Annotated[float, Field(gt=0)]] | None = Field(
        None, exclude_if=lambda v: v is None
    )


class GateNoiseMeasure(Strict):
    """``plan`` adds ``aa_seeds`` extra baselines (A/A runs) at the stage size with other seeds."""

    aa_seeds: PosInt


#: Validation context reading a bare-number ``noise.floor`` (old plan.json files) as known exactly.
LEGACY_FLOOR = "legacy_floor"
FLOOR_FORM = "{sd: <sd of the paired delta>, pairs: <seed pairs it was measured from>}"


#: A floor from fewer seed pairs than this is a warning in `plan` and `report`.
MIN_FLOOR_PAIRS = 5


class NoiseFloor(Strict):
    """A paired-delta sd measured earlier. Why ``pairs``: an sd from n seed pairs has n - 1 dof;
    taken as exact, a one-seed gate falsely proceeds 12% (3 pairs) or 8.7% (5) at nominal 5%.
    ``known: true`` claims it exact (normal bound) and the verdict says so."""

    sd: float = Field(gt=0)
    pairs: int | None = Field(None, ge=2)
    known: bool = False

    @model_validator(mode="after")
    def _dof(self) -> NoiseFloor:
        if (self.pairs is None) == (not self.known):
            raise ValueError(
                "noise.floor needs `pairs` (how many seed pairs the sd was measured from: t bound "
                "with pairs - 1 dof) or `known: true` (sd exact, normal bound), exactly one"
            )
        return self


class GateNoise(Strict):
    """Where a one-seed gate's noise comes from (docs/gate-statistics.md): ``floor`` (the sd of
    the paired last_n delta, measured earlier) or ``measure`` (A/A baselines now)."""

    floor: NoiseFloor | float | None = None
    measure: GateNoiseMeasure | None = None

    @field_validator("floor", mode="before")
    @classmethod
    def _floor_form(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if not (info.context or {}).get(LEGACY_FLOOR):
                raise ValueError(
                    f"a bare number ({v:g}) is no longer accepted: give {FLOOR_FORM} "
                    f"(t bound with pairs - 1 dof), or {{sd: {v:g}, known: true}} to treat it "
                    "as exact"
                )
            if not v > 0:
                raise ValueError("noise.floor must be > 0")
            return float(v)
        return v

    @model_validator(mode="after")
    def _one(self) -> GateNoise:
        if self.floor is not None and self.measure is not None:
            raise ValueError("give noise.floor (measured earlier) or noise.measure, not both")
        return self

    @property
    def floor_sd(self) -> float | None:
        f = self.floor
        return f.sd if isinstance(f, NoiseFloor) else f

    @property
    def floor_dof(self) -> float:  # pairs - 1; inf when known (or legacy)
        f = self.floor
        if isinstance(f, NoiseFloor) and f.pairs is not None:
            return float(f.pairs - 1)
        return math.inf


class SequentialDesign(Strict):
    """A pre-registered sequential gate (docs/gate-statistics.md, "Sequential designs").
    ``seed_stages``: cumulative seed pairs looked at on the full budget (the last: every seed);
    alpha is spent across them by a Lan-DeMets ``spending`` function, so adding the planned seeds
    keeps the false-proceed rate. ``interim``: budget fractions where the gate may only stop for
    futility (non-binding). A proceed only ever comes from a full-budget look."""

    seed_stages: list[PosInt] = []
    spending: Literal["obrien_fleming", "pocock"] = "obrien_fleming"
    interim: list[float] = []
    futility_confidence: float = Field(0.5, ge=0.5, lt=1)

    @model_validator(mode="after")
    def _check(self) -> SequentialDesign:
        st = self.seed_stages
        if any(b <= a for a, b in pairwise(st)):
            raise ValueError(f"seed_stages must increase (cumulative seeds), got {st}")
        if st and st[0] < 2:
            raise ValueError("seed_stages start at 2 seeds (a look needs their spread)")
        fr = self.interim
        if any(not 0 < f < 1 for f in fr) or any(b <= a for a, b in pairwise(fr)):
            raise ValueError(f"interim must be increasing fractions in (0, 1), got {fr}")
        if not st and not fr:
            raise ValueError("a sequential design needs seed_stages, interim looks or both")
        return self


class GateStability(Strict):
    max_loss_spikes: NonNegInt = 3
    max_grad_norm: float | None = Field(None, gt=0)
    allow_nonfinite: bool = False


class LadderLaw(Strict):
    """An assumed baseline law ``L(C) = E + A * C^(-alpha)`` (C in training FLOPs)."""

    E: float = Field(ge=0)
    A: float = Field(gt=0)
    alpha: float = Field(gt=0)


class LadderPlanning(Strict):
    """What `plan` assumes to say, before any compute, how wide a multiplier gate's projected
    intervals will be (docs/scaling.md). Why declared: the width depends on the seed noise and
    the law's curvature, which only an earlier ladder (or the store's baseline rungs) measures.
    ``sd_delta``: sd of one seed's paired difference (baseline - variant loss) at a rung;
    ``sd_mean``: sd of the pair's average (the seed's shared effect); ``multiplier``: the true
    multiplier the simulation assumes (default: ``min_multiplier``, the hardest case)."""

    sd_delta: float = Field(gt=0)
    sd_mean: float = Field(gt=0)
    law: LadderLaw
    multiplier: float | None = Field(None, gt=0, exclude_if=lambda v: v is None)


#: A multiplier gate's fields, each left out of the dump while at its default (old gate hashes).
MULTIPLIER_FIELDS = ("min_multiplier", "at", "unit", "rungs", "planning")
#: A complementary (factorial) gate's fields, likewise.
FACTORIAL_FIELDS = ("of", "combined")


class Gate(Strict):
    stage: str
    promote_to: list[str] = []
    rule: Literal["quality", "quality_per_param", "multiplier", "complementary"] = "quality"
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
    #: Compare a pair with a truncated metrics.jsonl at the tokens both arms reached. Not dumped
    #: while False, so gates pre-registered before the field keep their sha256.
    allow_partial_pairs: bool = Field(False, exclude_if=lambda v: v is False)
    sequential: SequentialDesign | None = None
    # rule multiplier (docs/scaling.md): proceed when the projected compute multiplier's lower
    # bound clears ``min_multiplier`` at every target. Not dumped at their defaults, so gates
    # pre-registered before the rule keep their sha256; checked against the spec in
    # `olmoablate.plan.checks` (check_gate, check_ladder).
    min_multiplier: float | None = Field(None, gt=0, exclude_if=lambda v: v is None)
    #: Target sizes (presets or custom sizes; a size outside ``sizes`` is priced, not planned).
    #: Default: ``promote_to``.
    at: list[str] = Field([], exclude_if=lambda v: not v)
    #: Which multiplier the gate decides on; the report prints all three.
    unit: Literal["flops", "tokens", "params"] = Field("flops", exclude_if=lambda v: v == "flops")
    #: Sizes used as rungs. Default: every spec size the variant trains at, other than the
    #: targets, in the baseline's training-FLOPs order.
    rungs: list[str] = Field([], exclude_if=lambda v: not v)
    planning: LadderPlanning | None = Field(None, exclude_if=lambda v: v is None)
    # rule complementary (docs/gate-statistics.md, "Factorial verdicts"): the two single-change
    # variants and the variant with both. Not dumped at their defaults (old gate hashes).
    of: list[str] = Field([], exclude_if=lambda v: not v)
    combined: str | None = Field(None, exclude_if=lambda v: v is None)

    @property
    def targets(self) -> list[str]:
        """A multiplier gate's target sizes: ``at``, else ``promote_to``."""
        return list(self.at or self.promote_to)

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:  # as before designs: old gate hashes verify
        out = handler(self)
        if out.get("sequential") is None:
            out.pop("sequential", None)
        return out

    def check_seeds(self, n_seeds: int) -> str | None:
        """Why the design does not fit a spec with ``n_seeds`` seeds (None when it does)."""
        st = self.sequential.seed_stages if self.sequential else []
        if st and st[-1] != n_seeds:
            return (
                f"sequential.seed_stages {st} must end at the spec's {n_seeds} seeds (the plan "
                "holds every planned seed; later stages run only if the earlier looks are "
                "inconclusive)"
            )
        return None

    @model_validator(mode="after")
    def _check(self) -> Gate:
        if self.rule == "quality_per_param" and not self.reference:
            raise ValueError(
                "rule quality_per_param needs `reference`: the variant that is the "
                "parameter-matched OLMo 3 model (e.g. `layers: {n_layers: 4}`)"
            )
        if self.rule != "multiplier":
            given = [f for f in MULTIPLIER_FIELDS if f in self.model_fields_set]
            if given:
                raise ValueError(
                    f"{', '.join(given)}: only for rule multiplier (rule is {self.rule})"
                )
        if self.rule != "complementary":
            given = [f for f in FACTORIAL_FIELDS if f in self.model_fields_set]
            if given:
                raise ValueError(
                    f"{', '.join(given)}: only for rule complementary (rule is {self.rule})"
                )
        return self


def design_record(block: dict[str, Any], seeds: list[int]) -> dict[str, Any]:
    """The gate's seeds and the hash of block + seeds. Why: adding seeds after a look and
    re-testing at full alpha raises the false-proceed rate to 8-10%; changed seeds must show."""
    return {"seeds": list(seeds), "design_sha256": sha256_of({"gate": block, "seeds": list(seeds)})}
