"""Loading results folders: SPEC resolution, bad plans, the parse cache, the gate lock."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from olmoablate.errors import UserError
from olmoablate.io import sha256_of
from olmoablate.report.collect import check_gate_unchanged, collect, resolve_results_dir
from olmoablate.report.synthetic import ArmTruth, SynthSpec, make_results


def test_resolve_by_dir_name_and_spec_file(tmp_path: Path) -> None:
    root = tmp_path / "results" / "synth"
    make_results(root, SynthSpec(), {})
    assert resolve_results_dir(str(root)) == root
    assert resolve_results_dir("synth", tmp_path / "results") == root
    spec = tmp_path / "whatever.yaml"
    spec.write_text("name: synth\n")
    assert resolve_results_dir(str(spec), tmp_path / "results") == root
    with pytest.raises(UserError, match=r"plan\.json: not found .*olmoablate plan nope"):
        resolve_results_dir("nope", tmp_path / "results")


def test_bad_plan_is_a_user_error(tmp_path: Path) -> None:
    root = tmp_path / "bad"
    root.mkdir()
    (root / "plan.json").write_text("{not json")
    with pytest.raises(UserError, match="unreadable plan"):
        collect(root)
    (root / "plan.json").write_text(json.dumps({"pairs": []}))
    with pytest.raises(UserError, match="field `runs` missing"):
        collect(root)


def test_cache_reused_and_invalidated(tmp_path: Path) -> None:
    root = tmp_path / "synth"
    make_results(root, SynthSpec(), {"sn_da": ArmTruth(offset=-0.05)})
    first = collect(root)
    assert (root / ".report-cache" / "1B-s0-sn_da.npz").is_file()
    second = collect(root)
    a, b = first.runs["1B-s0-sn_da"].metrics, second.runs["1B-s0-sn_da"].metrics
    assert a is not None and b is not None
    assert np.array_equal(a.columns["train/CE loss"], b.columns["train/CE loss"])
    # the run continues: the cache must not hide the new rows
    path = root / "runs" / "1B-s0-sn_da" / "metrics.jsonl"
    with path.open("a") as fh:
        fh.write(json.dumps({"step": 201, "tokens": 201 * 2048, "train/CE loss": 1.0}) + "\n")
    third = collect(root)
    m = third.runs["1B-s0-sn_da"].metrics
    assert m is not None and m.steps[-1] == 201


def test_parallel_parse_matches_serial(tmp_path: Path) -> None:
    root = tmp_path / "synth"
    make_results(root, SynthSpec(seeds=(0, 1), steps=300), {})
    serial = collect(root, use_cache=False, workers=1)
    from olmoablate.report.collect import _want_spec, load_metrics_many

    jobs = [
        (rid, rd.directory / "metrics.jsonl", *_want_spec(rd.entry, rd.summary, "train/CE loss"))
        for rid, rd in serial.runs.items()
    ]
    parsed = load_metrics_many(jobs, None, workers=2, min_parallel_bytes=0)
    assert set(parsed) == set(serial.runs)
    for rid, m in parsed.items():
        s = serial.runs[rid].metrics
        assert s is not None
        assert np.array_equal(m.columns["train/CE loss"], s.columns["train/CE loss"])


def test_gate_change_after_planning_is_flagged(tmp_path: Path) -> None:
    root = tmp_path / "synth"
    plan = make_results(root, SynthSpec(gate={"min_effect": 0.01}), {})
    spec = tmp_path / "spec.yaml"
    raw_gate = {"stage": "1B", "min_effect": 0.01}
    spec.write_text(yaml.safe_dump({"name": "synth", "gate": raw_gate}))
    plan["spec_path"] = str(spec)
    plan["gate_raw_sha256"] = sha256_of(raw_gate)
    (root / "plan.json").write_text(json.dumps(plan))
    assert check_gate_unchanged(plan, root) == []
    spec.write_text(yaml.safe_dump({"name": "synth", "gate": {**raw_gate, "min_effect": 0.001}}))
    warnings = check_gate_unchanged(plan, root)
    assert len(warnings) == 1 and "GATE CHANGED AFTER PLANNING" in warnings[0]
    assert collect(root).warnings == warnings
    # without gate_raw_sha256: compare with defaults applied on both sides
    del plan["gate_raw_sha256"]
    assert check_gate_unchanged(plan, root) != []
    spec.write_text(yaml.safe_dump({"name": "synth", "gate": plan["gate"]}))
    assert check_gate_unchanged(plan, root) == []
    # plan.json edited by hand
    plan["gate"]["min_effect"] = 0.5
    assert any("plan.json was edited" in w for w in check_gate_unchanged(plan, root))


def test_fingerprint_cache_follows_file_changes(tmp_path: Path) -> None:
    from olmoablate.report.build import build

    root = tmp_path / "synth"
    make_results(root, SynthSpec(), {"sn_da": ArmTruth(offset=-0.05)})
    assert build(collect(root)).pairs[0].valid
    assert (root / ".report-cache" / "fingerprints.json").is_file()
    assert build(collect(root)).pairs[0].valid  # from the cache
    fp = root / "runs" / "1B-s0-sn_da" / "fingerprints.jsonl"
    lines = fp.read_text().splitlines()
    row = json.loads(lines[7])
    row["sha256"] = "f" * 64
    lines[7] = json.dumps(row)
    fp.write_text("\n".join(lines) + "\n")
    pair = build(collect(root)).pairs[0]
    assert not pair.valid and "first at step 8" in pair.invalid_reasons[0]
