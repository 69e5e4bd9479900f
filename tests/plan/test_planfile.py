"""contract/plan.py: plan.json round-trips exactly, and every malformed plan is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmoablate.errors import UserError
from olmoablate.plan.expand import build_plan
from olmoablate.plan.load import load_spec
from olmoablate.plan.planfile import PLAN_SCHEMA, Plan, RunEntry
from olmoablate.testing import REPO, as_format_1

SPECS = REPO / "specs"


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """plan.json of the shipped looped spec (1B/3B/7B, curriculum, FLOPs-matched variant)."""
    out = tmp_path_factory.mktemp("results") / "plan.json"
    build_plan(load_spec(SPECS / "looped_olmo.yaml")).write(out)
    return out


def test_plan_json_round_trips_byte_for_byte(plan_file: Path) -> None:
    doc = json.loads(plan_file.read_text())
    plan = Plan.load(plan_file)
    assert plan.as_json() == doc
    assert json.dumps(plan.as_json()) == json.dumps(doc)  # same key order too
    assert plan.schema_version == PLAN_SCHEMA
    for run in plan.runs:  # the recorded certificate is what the typed entry hashes to
        assert run.certificate_now() == run.certificate


def test_typed_reads(plan_file: Path) -> None:
    plan = Plan.load(plan_file.parent)  # a results folder works as well
    looped = next(r for r in plan.runs if r.architecture.looped is not None)
    assert (
        looped.slurm.max_num_timeout
        == json.loads(plan_file.read_text())["runs"][plan.runs.index(looped)]["slurm"][
            "max_num_timeout"
        ]
    )
    assert looped.loop_counts and looped.architecture.looped.loops in looped.loop_counts
    assert plan.run(looped.run_id) is looped
    assert [p.pair_id for p in plan.pairs_of(looped.run_id)] == [looped.pair_id]
    base = plan.run(plan.pairs_of(looped.run_id)[0].baseline_run)
    assert base.is_baseline and not base.is_aa and base.architecture.is_baseline
    with pytest.raises(UserError, match="no run 'nope' in this plan \\(allowed: 1B-s0-baseline"):
        plan.run("nope")
    with pytest.raises(UserError, match="--run x: not a run of this plan"):
        plan.check_run_ids(["x"], "--run")


def test_plan_is_frozen(plan_file: Path) -> None:
    plan = Plan.load(plan_file)
    with pytest.raises(Exception, match="frozen"):
        plan.runs[0].steps = 1  # type: ignore[misc]


def _broken(plan_file: Path, tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    doc = json.loads(plan_file.read_text())
    edit(doc)
    out = tmp_path / "plan.json"
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["runs"][3]["training"].pop("steps"),
            r"runs\[3\]\.training\.steps: field required",
        ),
        (
            lambda d: d["runs"][0]["slurm"].update(max_num_timeout=-1),
            r"runs\[0\]\.slurm\.max_num_timeout: ",
        ),
        (lambda d: d["runs"][1].update(extra_key=1), r"runs\[1\]\.extra_key: unknown key"),
        (lambda d: d["pairs"][0].update(seed="0"), r"pairs\[0\]\.seed: "),
        (
            lambda d: d["runs"][0]["size_dims"].pop("d_model"),
            r"runs\[0\]\.size_dims: .*missing: d_model",
        ),
        (lambda d: d.update(schema=PLAN_SCHEMA + 1), "written by a newer olmoablate"),
        (
            lambda d: d["runs"][0]["architecture"].update(looped={"loops": 2}),
            r"runs\[0\]\.architecture\.looped\.body_layers",
        ),
    ],
)
def test_malformed_plan_is_one_line(plan_file: Path, tmp_path: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    bad = _broken(plan_file, tmp_path, edit)
    with pytest.raises(UserError, match=message) as err:
        Plan.load(bad)
    assert "\n" not in str(err.value) and str(bad) in str(err.value)


def test_missing_and_unreadable_plan(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found: run `olmoablate plan SPEC` first"):
        Plan.load(tmp_path)
    (tmp_path / "plan.json").write_text("{not json")
    with pytest.raises(UserError, match="unreadable plan"):
        Plan.load(tmp_path)


def test_older_format_1_plan_without_gates_list(plan_file: Path, tmp_path: Path) -> None:
    """A format-1 plan from before `gates`/`aa_runs`/`eval_sets` existed still loads."""
    doc = as_format_1(json.loads(plan_file.read_text()))
    for k in ("gates", "aa_runs", "eval_sets"):
        doc.pop(k)
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    plan = Plan.load(tmp_path)
    assert [g.name for g in plan.gates] == [doc["gate"].get("variant") or "gate"]
    assert plan.gates[0].gate == plan.gate and plan.aa_runs == []
    assert plan.gate_sha256 == doc["gate_sha256"] and plan.schema_version == PLAN_SCHEMA


def test_gate_views_put_each_gate_in_place(plan_file: Path) -> None:
    plan = Plan.load(plan_file)
    views = plan.gate_views()
    assert [n for n, _ in views] == [g.name for g in plan.gates]
    for (name, view), entry in zip(views, plan.gates, strict=True):
        assert view.gate == entry.gate and view.gate_sha256 == entry.gate_sha256
        assert view.gate_name == name and view.path == plan.path
        assert "gate_name" not in view.as_json()


def test_entry_edits_go_through_validation(plan_file: Path) -> None:
    run = Plan.load(plan_file).runs[0]
    d = run.as_json()
    d["training"]["steps"] = 7
    edited = RunEntry.model_validate(d)
    assert edited.training.steps == 7 and edited.certificate_now() != edited.certificate
