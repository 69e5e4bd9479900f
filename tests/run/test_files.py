"""The typed run files (run/files.py): status.json, summary.json and the ledger's entries.

Round trips, the files an older release wrote (tests/fixtures/results_v1), unknown states refused
in one line naming the file and the field, and two checks over the package's source: every run
state is spelled once (in plan/names.py) and no stage reads a run file with ``.get("``.
"""

from __future__ import annotations

import ast
import datetime
import json
import re
from pathlib import Path

import pytest

from olmoablate.errors import UserError
from olmoablate.plan.layout import ResultsDir
from olmoablate.plan.names import RunState, now_iso, parse_time
from olmoablate.run.files import LedgerFile, LedgerRun, RunStatus, RunSummary
from olmoablate.testing import REPO, TESTS

PACKAGE = REPO / "olmoablate"
OLD = TESTS / "fixtures" / "results_v1" / "results" / "compat_v1"


def test_status_round_trip_keeps_unknown_keys(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    written = RunStatus(run_id="r", state=RunState.RUNNING, step=3, signals=["SIGTERM"]).write(path)
    raw = json.loads(path.read_text())
    assert raw["state"] == "running" and raw["step"] == 3 and raw["signals"] == ["SIGTERM"]
    assert parse_time(raw["updated"]) == written.updated
    path.write_text(json.dumps({**raw, "from_a_newer_release": {"x": 1}}))
    RunStatus.update(path, state=RunState.CANCELLED, reason="cancelled by user")
    after = json.loads(path.read_text())
    assert after["from_a_newer_release"] == {"x": 1} and after["state"] == "cancelled"
    assert after["step"] == 3 and after["reason"] == "cancelled by user"
    status = RunStatus.load(path)
    assert status is not None and status.state == RunState.CANCELLED and status.present


def test_one_timestamp_format_reads_both() -> None:
    now = now_iso()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", now)
    old, new = parse_time("2026-12-01T13:12:42+0000"), parse_time("2026-12-01T13:12:42+00:00")
    assert old == new == datetime.datetime(2026, 12, 1, 13, 12, 42, tzinfo=datetime.timezone.utc)
    assert parse_time("2026-01-01T00:00:00Z") is not None and parse_time("soon") is None


def test_old_release_files_read() -> None:
    for run in sorted((OLD / "runs").iterdir()):
        status = RunStatus.load(run / "status.json")
        summary = RunSummary.load(run / "summary.json")
        assert status is not None and status.state == RunState.COMPLETED
        assert status.updated is not None and status.updated.tzinfo is not None
        assert summary is not None and summary.execution is not None
        assert summary.hostname == "vm" and summary.execution.device == "cpu"
        # what the file holds reads back as it is (no key invented or lost)
        assert summary.as_json() == json.loads((run / "summary.json").read_text())
    ledger = LedgerFile.check(json.loads((OLD / "ledger.json").read_text()), "ledger.json")
    entry = ledger.runs["micro-s0-baseline"]
    assert entry.state == RunState.COMPLETED and entry.attempts == 1
    assert entry.last_job is not None and entry.last_job.host == "vm"


def test_partial_and_missing_files_are_tolerated(tmp_path: Path) -> None:
    run = ResultsDir(tmp_path).run("r")
    assert RunStatus.read(run) is None and RunSummary.read(run) is None
    run.path.mkdir(parents=True)
    run.status.write_text('{"state": "runn')  # a torn write
    assert RunStatus.read(run) is None
    run.status.write_text('{"step": 4}')
    status = RunStatus.read(run)
    assert status is not None and status.step == 4 and status.state is None
    assert not RunStatus().present


@pytest.mark.parametrize(
    ("model", "doc", "field"),
    [
        (RunStatus, {"state": "finished"}, "state"),
        (RunStatus, {"step": "many"}, "step"),
        (RunSummary, {"state": "done"}, "state"),
        (LedgerRun, {"state": "exploded"}, "state"),
    ],
)
def test_unknown_state_is_one_line_naming_file_and_field(
    tmp_path: Path, model: type, doc: dict, field: str
) -> None:
    path = tmp_path / "runs" / "r" / "status.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError) as err:
        model.load(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: {field}:"), msg


def test_states_compare_as_their_names() -> None:
    assert RunState.COMPLETED == "completed" and json.dumps([RunState.FAILED]) == '["failed"]'
    assert f"{RunState.DIVERGED}" == "diverged"


# ------------------------------------------------------------------ checks over the source
#: Literals equal to a state name that are not run-state data (a user message, a --fail-on
#: choice, a table header), by file name (the report's modules may move between packages).
NOT_STATES = {
    ("cli.py", "interrupted"),  # Ctrl-C's message to the user
    ("commands.py", "failed"),  # report's --fail-on condition named after the state
    ("document.py", "diverged"),  # the stability table's column header
    ("load.py", "missing"),  # pydantic's error type of a missing field
    ("errors.py", "missing"),  # the same, where one-line validation errors are made
}


def _sources() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        out.append((rel, ast.parse(path.read_text(encoding="utf-8"))))
    return out


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def test_each_run_state_is_spelled_in_one_definition() -> None:
    names = {s.value for s in RunState}
    found: dict[str, list[str]] = {n: [] for n in names}
    for rel, tree in _sources():
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in names
                and id(node) not in docs
                and (rel.rsplit("/", 1)[-1], node.value) not in NOT_STATES
            ):
                found[node.value].append(f"{rel}:{node.lineno}")
    for name, where in found.items():
        assert where and all(w.startswith("plan/names.py:") for w in where), (name, where)
        assert len(where) == 1, (name, where)


#: Receivers of ``.get("<a run file's field>")`` in the stages that are other files: the store's
#: lease (reused.json), metrics columns, a callback's checkpointed state, a metrics row.
NOT_RUN_FILES = {"lease", "cols", "state_dict", "r"}


def test_no_dict_reads_of_run_files_outside_run_files() -> None:
    """``.get("<field>")`` of status/summary/ledger data lives only in olmoablate/run/files.py:
    no stage reads a field of those files by name (every field of the models counts)."""
    from olmoablate.run.files import ExecutionRecord, LedgerJob

    keys: set[str] = set()
    for model in (RunStatus, RunSummary, ExecutionRecord, LedgerRun, LedgerJob, LedgerFile):
        keys |= set(model.model_fields) | {f.alias for f in model.model_fields.values() if f.alias}
    stages = ("run/", "report/", "plan/store.py", "results.py")
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not rel.startswith(stages) or rel == "run/files.py":
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in re.finditer(r"([\w\]\)]+)\.get\(\"([^\"]+)\"", line):
                if m.group(2) in keys and m.group(1) not in NOT_RUN_FILES:
                    bad.append(f"{rel}:{no}: {line.strip()}")
    assert not bad, bad
    ledger = (PACKAGE / "report").rglob("*.py")
    assert not [p for p in ledger if "layout.ledger" in p.read_text(encoding="utf-8")]


def test_a_next_plan_resolves_to_its_spec_and_submits_its_runs(tmp_path: Path) -> None:
    """next_plan.json is a Plan: `status`/`submit` of it find the spec's results folder, and
    `submit` restricts itself to its runs (refusing one re-planned since)."""
    import shutil

    from olmoablate.plan.layout import resolve_results
    from olmoablate.plan.planfile import Plan
    from olmoablate.run.launch import plan_part

    root = tmp_path / "results"
    shutil.copytree(OLD, root / "compat_v1")
    plan = Plan.load(root / "compat_v1")
    keep = [r for r in plan.runs if r.seed == 0]
    ids = {r.run_id for r in keep}
    part = plan.model_copy(
        update={
            "runs": keep,
            "pairs": [p for p in plan.pairs if p.baseline_run in ids],
            "identity": None,
            "aa_runs": [],
        }
    )
    nxt = tmp_path / "next_plan.json"
    part.write(nxt)
    results = resolve_results(nxt, root)
    assert results.root == root / "compat_v1"
    assert plan_part(str(nxt), results) == [r.run_id for r in keep]
    assert plan_part(str(root / "compat_v1"), results) is None
    doc = json.loads(nxt.read_text())
    doc["runs"][0]["certificate"] = "0" * 64
    nxt.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="certificate"):
        plan_part(str(nxt), results)
