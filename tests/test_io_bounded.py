"""Bounded parsing (olmoablate.io): a hostile spec or plan.json is a one-line error, fast.

The files here are the real thing: a 10-line YAML "billion laughs" (9**8 values once expanded),
a recursive alias, a deep nesting, an oversized file; each goes through the real CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olmoablate.errors import UserError
from olmoablate.io import MAX_YAML_BYTES, InputLimitError, compose_yaml_bounded
from olmoablate.plan.load import SpecError, load_spec
from olmoablate.plan.planfile import Plan
from olmoablate.testing import REPO

BOMB = (
    "name: bomb\n"
    + 'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
    + "".join(
        f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n"
        for p, n in zip("abcdefg", "bcdefgh", strict=True)
    )
)


def _cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
        timeout=60,
    )
    return proc, time.perf_counter() - t0


def test_alias_bomb_is_refused_in_well_under_a_second(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert len(BOMB.splitlines()) == 9
    t0 = time.perf_counter()
    with pytest.raises(SpecError) as info:
        load_spec(path)
    elapsed = time.perf_counter() - t0
    assert elapsed < 0.5, elapsed  # unbounded: 4.75 s and 1.1 GB at 9**7, > 30 s at 9**8
    (problem,) = info.value.problems
    assert "alias" in problem.message and problem.field == "<yaml>"
    for command in ("validate", "plan"):
        proc, _ = _cli(command, str(path))
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "alias" in lines[0] and str(path) in lines[0], lines
    # `submit`/`status` read only the spec's name, through the same bounded parse
    proc, _ = _cli("status", str(path))
    assert proc.returncode == 2 and "alias" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("name: r\nx: &x [1, *x]\n", "recursive"),
        ("name: d\nx: " + "[" * 200 + "]" * 200 + "\n", "nested deeper"),
        ("name: big\n" + "# padding\n" * (MAX_YAML_BYTES // 10 + 1), "over the limit"),
    ],
    ids=["recursive-alias", "deep-nesting", "oversized"],
)
def test_hostile_yaml_is_one_line(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    proc, _ = _cli("validate", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], lines


def test_ordinary_aliases_still_work() -> None:
    node, data = compose_yaml_bounded("base: &b {lr: 1}\nother: *b\nlist: [*b, *b]\n")
    assert node is not None and data["other"] == {"lr": 1} and data["list"][1]["lr"] == 1
    with pytest.raises(InputLimitError):
        compose_yaml_bounded(BOMB)


def test_hostile_plan_json_is_one_line(tmp_path: Path) -> None:
    deep = tmp_path / "plan.json"
    deep.write_text('{"schema": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(UserError, match="nested too deeply") as info:
        Plan.load(deep)
    assert "\n" not in str(info.value)
    proc, elapsed = _cli("status", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "nested too deeply" in proc.stderr


def test_spec_swapped_for_a_bomb_after_planning_does_not_stall_the_report(tmp_path: Path) -> None:
    """The report re-reads the spec to check its gate: a bomb there is a warning, at once."""
    import json

    from olmoablate.report.prereg import check_gate_unchanged
    from olmoablate.testing.synthetic import SynthSpec, make_results

    plan = make_results(tmp_path / "synth", SynthSpec(gate={"min_effect": 0.01}), {})
    spec = tmp_path / "spec.yaml"
    spec.write_text(BOMB.replace("name: bomb", "name: synth") + "gate: *h\n")
    plan["spec_path"] = str(spec)
    (tmp_path / "synth" / "plan.json").write_text(json.dumps(plan))
    t0 = time.perf_counter()
    warnings = check_gate_unchanged(Plan.from_json(plan))
    assert time.perf_counter() - t0 < 0.5
    assert len(warnings) == 1 and "InputLimitError" in warnings[0], warnings
