"""The fault-injection hooks: read from the environment, refused with one line when malformed."""

from __future__ import annotations

import pytest

from olmoablate.errors import UserError
from olmoablate.run.job import (
    DEBUG_NAN_ENV,
    DEBUG_STEP_SECONDS_ENV,
    DebugNaNCallback,
    DebugSlowStepCallback,
    debug_callbacks,
)


def test_no_hooks_in_a_normal_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEBUG_NAN_ENV, raising=False)
    monkeypatch.delenv(DEBUG_STEP_SECONDS_ENV, raising=False)
    assert debug_callbacks() == {}
    monkeypatch.setenv(DEBUG_STEP_SECONDS_ENV, "0")
    assert debug_callbacks() == {}


def test_hooks_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEBUG_NAN_ENV, "4")
    monkeypatch.setenv(DEBUG_STEP_SECONDS_ENV, "0.25")
    cbs = debug_callbacks()
    assert isinstance(cbs["debug_nan"], DebugNaNCallback) and cbs["debug_nan"].at_step == 4
    slow = cbs["debug_slow_step"]
    assert isinstance(slow, DebugSlowStepCallback) and slow.seconds == 0.25


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        (DEBUG_NAN_ENV, "four", "expected an integer"),
        (DEBUG_STEP_SECONDS_ENV, "fast", "expected a number"),
        (DEBUG_STEP_SECONDS_ENV, "-1", "expected a number >= 0"),
    ],
)
def test_malformed_hook_is_one_line(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, match: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(UserError, match=match) as exc:
        debug_callbacks()
    assert name in str(exc.value) and "\n" not in str(exc.value)
