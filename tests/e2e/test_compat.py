"""Results folders written before the typed contract layer still `status` and `report` (issue 13).

tests/fixtures/results_v1 is a real results folder made by the release before the contract layer
(main e75ec36), tests/fixtures/results_v2 one made by the release before the typed run files
(main 5a8b340; how: their README.md). The current code must list every run and write a
byte-identical gate.json (and, for v2, comparison.csv): the verdicts, estimates and reasons a team
already acted on do not move when the code under them is restructured. Neither file holds
timestamps or absolute paths, so nothing is normalised.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from olmoablate.testing import TESTS
from olmoablate.testing import run_cli as _cli

FIXTURE = TESTS / "fixtures" / "results_v1"
SPEC = "compat_v1"
#: (fixture folder, spec name, the stored report outputs it must reproduce byte for byte)
RELEASES = [
    pytest.param("results_v1", "compat_v1", ("gate.json",), id="v1"),
    pytest.param("results_v2", "compat_v2", ("gate.json", "comparison.csv"), id="v2"),
]


@pytest.fixture
def old_results(tmp_path: Path) -> Path:
    """A scratch copy of the fixture (the report writes into the results folder)."""
    work = tmp_path / "work"
    shutil.copytree(FIXTURE, work)
    (work / "gate.json").unlink()  # the stored verdict stays in the repository, not in the copy
    return work


def _plan_runs() -> list[str]:
    plan = json.loads((FIXTURE / "results" / SPEC / "plan.json").read_text())
    return [r["run_id"] for r in plan["runs"]]


def test_fixture_is_a_complete_old_folder() -> None:
    runs = _plan_runs()
    assert len(runs) == 6
    for rid in runs:
        for name in ("status.json", "metrics.jsonl", "fingerprints.jsonl", "summary.json"):
            assert (FIXTURE / "results" / SPEC / "runs" / rid / name).is_file(), (rid, name)
    gate = json.loads((FIXTURE / "gate.json").read_text())
    assert gate["verdicts"] == {"sn_da": "proceed", "looped": "inconclusive"}


def test_status_lists_every_run(old_results: Path) -> None:
    out = _cli("status", f"{SPEC}.yaml", "--json", cwd=old_results)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = json.loads(out.stdout)
    assert [r["run_id"] for r in rows] == _plan_runs()
    assert {r["state"] for r in rows} == {"completed"}
    table = _cli("status", f"results/{SPEC}", cwd=old_results)
    assert table.returncode == 0, table.stdout + table.stderr
    for rid in _plan_runs():
        assert rid in table.stdout


@pytest.mark.parametrize(("folder", "spec", "outputs"), RELEASES)
def test_report_writes_identical_outputs(
    tmp_path: Path, folder: str, spec: str, outputs: tuple[str, ...]
) -> None:
    fixture = TESTS / "fixtures" / folder
    work = tmp_path / "work"
    shutil.copytree(fixture, work)
    for name in outputs:  # the stored outputs stay in the repository, not in the copy
        (work / name).unlink()
    res = work / "results" / spec
    inputs = {p: p.read_bytes() for p in res.rglob("*") if p.is_file()}
    out = _cli("report", f"{spec}.yaml", cwd=work)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in outputs:
        want = _known_changes((fixture / name).read_text())
        got = _known_changes((res / name).read_text())
        if name.endswith(".json"):
            assert json.loads(got) == json.loads(want)  # first the content, with a readable diff
        else:
            assert got.splitlines() == want.splitlines(), name
        assert got == want, name  # then the bytes: key order and number formatting too
    assert "gate verdicts: sn_da: proceed; looped: inconclusive" in out.stdout
    for p, data in inputs.items():  # nothing the old release wrote is rewritten or lost
        assert p.read_bytes() == data, p


#: Sentences a later release deliberately rewrote, each with its issue (everything else stays
#: byte for byte): issue 34 replaced the seeds line's plug-in power ("3 paired seeds give a 99%
#: chance", at the observed effect and full alpha) by a predictive chance at the level added seeds
#: are tested at -- the old number was not calibrated, so it is not kept for old folders.
_REWRITTEN = [re.compile(r"seeds: \d+ paired seeds give a [^\"]*?a chance, not a promise")]


def _known_changes(text: str) -> str:
    for pattern in _REWRITTEN:
        text = pattern.sub("seeds: <rewritten by issue 34>", text)
    return text


def test_old_plan_loads_with_the_contract() -> None:
    """The acceptance test of item 6: the typed model reads the old release's schema-1 plan.json,
    and holds it in the current format (issue 22: its gate once, in `gates`)."""
    from olmoablate.plan.planfile import PLAN_SCHEMA, Plan

    path = FIXTURE / "results" / SPEC / "plan.json"
    raw = json.loads(path.read_text())
    plan = Plan.load(path)
    assert [r.run_id for r in plan.runs] == _plan_runs()
    assert len(plan.pairs) == 4 and [g.name for g in plan.gates] == ["sn_da", "looped"]
    looped = plan.run("micro-s0-looped")
    assert looped.architecture.looped is not None
    # the loop counts the old release really trained (its `train/loops` column, steps 1..24)
    rows = (FIXTURE / "results" / SPEC / "runs" / looped.run_id / "metrics.jsonl").read_text()
    trained = {
        r["step"]: int(r["train/loops"])
        for r in map(json.loads, rows.splitlines())
        if "train/loops" in r
    }
    assert sorted(set(trained.values())) == [1, 2, 3]
    assert {s: looped.architecture.looped.loops_at_step(s) for s in trained} == trained
    # Written again, it is the upgraded format: the top-level copy of the first gate is gone
    # (it equalled gates[0], or the plan would not load) and everything else is as it was.
    assert raw["schema"] == 1 and raw["gate"] == raw["gates"][0]["gate"]
    upgraded = plan.as_json()
    assert upgraded["schema"] == PLAN_SCHEMA == 2
    dropped = ("schema", "gate", "gate_sha256", "gate_raw_sha256")
    assert upgraded == {**{k: v for k, v in raw.items() if k not in dropped}, "schema": 2}
    assert list(upgraded) == [k for k in raw if k not in dropped[1:]]  # same key order
    assert plan.gate_sha256 == raw["gate_sha256"] == raw["gates"][0]["gate_sha256"]
    assert plan.gate_raw_sha256 == raw["gate_raw_sha256"]
    for run in plan.runs:  # the old certificates still verify
        assert run.certificate_now() == run.certificate
