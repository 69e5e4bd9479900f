"""Fault-injection hooks for tests: environment variables, never plan fields.

The plan holds only what an experiment means; these hooks change how a job behaves on one machine
so that tests can reach paths that real runs reach by bad luck:

- ``OLMOABLATE_DEBUG_NAN_AT_STEP=N`` poisons the gradients of step ``N`` (a deterministic way into
  the divergence path, without relying on an LR blow-up);
- ``OLMOABLATE_DEBUG_STEP_SECONDS=S`` sleeps ``S`` seconds after each step, so that a test that
  interrupts two parallel runs mid-way is not at the mercy of a busy CI machine's scheduler. It
  changes wall time only: the numbers of a run are the same with and without it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from olmo_core.train.callbacks import Callback

from olmoablate.errors import UserError
from olmoablate.train.records import _model_of

DEBUG_NAN_ENV = "OLMOABLATE_DEBUG_NAN_AT_STEP"
DEBUG_STEP_SECONDS_ENV = "OLMOABLATE_DEBUG_STEP_SECONDS"


@dataclass
class DebugNaNCallback(Callback):
    """Poisons the gradients of step ``at_step``.

    It runs after backward and before the optimizer step, so the grad norm of that exact step is
    NaN.
    """

    at_step: int = -1

    def pre_optim_step(self) -> None:
        if self.step != self.at_step:
            return
        for p in _model_of(self.trainer).parameters():
            if p.grad is not None:
                p.grad.fill_(float("nan"))
                break


@dataclass
class DebugSlowStepCallback(Callback):
    """Sleeps ``seconds`` after every step (wall time only; nothing a run computes changes)."""

    seconds: float = 0.0

    def post_step(self) -> None:
        time.sleep(self.seconds)


def _env_number(name: str, kind: type[int] | type[float]) -> int | float | None:
    value = os.environ.get(name)
    if not value:
        return None
    try:
        number = kind(value)
    except ValueError:
        wanted = "an integer" if kind is int else "a number"
        raise UserError(f"{name}={value!r}: expected {wanted}") from None
    if number < 0:
        raise UserError(f"{name}={value!r}: expected a number >= 0")
    return number


def debug_callbacks() -> dict[str, Callback]:
    """The test hooks the environment asks for (none in a normal run)."""
    out: dict[str, Callback] = {}
    nan_step = _env_number(DEBUG_NAN_ENV, int)
    if nan_step is not None:
        out["debug_nan"] = DebugNaNCallback(at_step=int(nan_step))
    seconds = _env_number(DEBUG_STEP_SECONDS_ENV, float)
    if seconds:
        out["debug_slow_step"] = DebugSlowStepCallback(seconds=float(seconds))
    return out
