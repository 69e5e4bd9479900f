"""contract/layout.py: one resolver from SPEC to results/<spec>/, one name per shared file."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmoablate.errors import UserError
from olmoablate.plan.layout import ResultsDir, RunDir, resolve_results
from olmoablate.plan.names import recorded_state
from olmoablate.run import columnar
from olmoablate.run.files import RunStatus, RunSummary


def test_every_form_of_spec_resolves_to_the_same_folder(tmp_path: Path) -> None:
    root = tmp_path / "results"
    (root / "exp").mkdir(parents=True)
    (root / "exp" / "plan.json").write_text("{}")
    spec = tmp_path / "exp.yaml"
    spec.write_text("name: exp\n")
    want = ResultsDir(root / "exp")
    assert resolve_results(str(spec), root) == want  # a spec file: its name
    assert resolve_results("exp", root) == want  # a spec name
    assert resolve_results(str(root / "exp"), root) == want  # the results folder
    assert resolve_results(str(root / "exp" / "plan.json"), root) == want  # its plan.json


def test_resolver_errors_are_one_line(tmp_path: Path) -> None:
    nameless = tmp_path / "nameless.yaml"
    nameless.write_text("sizes: [1B]\n")
    with pytest.raises(UserError, match="nameless.yaml: name: required"):
        resolve_results(str(nameless), tmp_path)
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(UserError, match="broken.yaml: cannot read the spec"):
        resolve_results(str(broken), tmp_path)
    with pytest.raises(UserError, match="no plan.json in this directory"):
        resolve_results(str(tmp_path), tmp_path)
    with pytest.raises(UserError, match="no such spec file or results directory"):
        resolve_results("missing/exp.yaml", tmp_path)


def test_layout_names(tmp_path: Path) -> None:
    rd = ResultsDir(tmp_path)
    run = rd.run("1B-s0-baseline")
    assert isinstance(run, RunDir) and run.path == tmp_path / "runs" / "1B-s0-baseline"
    assert run.status.name == "status.json" and run.metrics.name == "metrics.jsonl"
    assert run.metrics_copy.name == "metrics.arrow"
    assert columnar.copy_path(run.metrics) == run.metrics_copy  # the name, defined twice
    assert run.fingerprints.name == "fingerprints.jsonl" and run.summary.name == "summary.json"
    assert run.cancel_marker.name == ".cancel-requested" and run.checkpoints.name == "checkpoints"
    assert rd.plan_path == tmp_path / "plan.json" and rd.ledger == tmp_path / "ledger.json"
    assert rd.superseded == tmp_path / "runs" / ".superseded"
    assert not tmp_path.joinpath("runs").exists()  # naming a path creates nothing


def test_status_reads_tolerate_absent_and_torn_files(tmp_path: Path) -> None:
    run = ResultsDir(tmp_path).run("r")
    assert RunStatus.load(run.status) is None and RunSummary.load(run.summary) is None
    run.path.mkdir(parents=True)
    run.status.write_text('{"state": "running"')  # torn write
    assert RunStatus.load(run.status) is None and recorded_state(run.status) is None
    run.status.write_text('{"state": "running"}')
    assert recorded_state(run.status) == "running"
    status = RunStatus.load(run.status)
    assert status is not None and status.as_json() == {"state": "running"}
