"""Loading results folders: SPEC resolution, bad plans, the metrics store, the gate lock."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from olmoablate.errors import UserError
from olmoablate.io import sha256_of
from olmoablate.plan.planfile import Plan
from olmoablate.report.collect import collect, resolve_results_dir
from olmoablate.report.prereg import check_gate_unchanged
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results


def test_resolve_by_dir_name_and_spec_file(tmp_path: Path) -> None:
    root = tmp_path / "results" / "synth"
    make_results(root, SynthSpec(), {})
    assert resolve_results_dir(str(root)).root == root
    assert resolve_results_dir(str(root / "plan.json")).root == root
    assert resolve_results_dir("synth", tmp_path / "results").root == root
    spec = tmp_path / "whatever.yaml"
    spec.write_text("name: synth\n")
    assert resolve_results_dir(str(spec), tmp_path / "results").root == root
    with pytest.raises(UserError, match=r"plan\.json: not found .*olmoablate plan nope"):
        resolve_results_dir("nope", tmp_path / "results")
    nameless = tmp_path / "nameless.yaml"  # the contract's one rule: a spec names its folder
    nameless.write_text("sizes: [1B]\n")
    with pytest.raises(UserError, match=r"nameless\.yaml: name: required"):
        resolve_results_dir(str(nameless), tmp_path / "results")


def test_bad_plan_is_a_one_line_user_error(tmp_path: Path) -> None:
    root = tmp_path / "bad"
    plan = make_results(root, SynthSpec(), {})
    (root / "plan.json").write_text("{not json")
    with pytest.raises(UserError, match="unreadable plan"):
        collect(root)
    (root / "plan.json").write_text(json.dumps({"pairs": []}))
    with pytest.raises(UserError, match=r"plan\.json: .*field required"):
        collect(root)
    # a run entry missing a field the report reads: the file, the entry and the field
    del plan["runs"][1]["training"]["global_batch_size"]
    (root / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(UserError) as err:
        collect(root)
    msg = str(err.value)
    assert "\n" not in msg and "plan.json: runs[1].training.global_batch_size" in msg


def test_cache_reused_and_invalidated(tmp_path: Path) -> None:
    root = tmp_path / "synth"
    make_results(root, SynthSpec(), {"sn_da": ArmTruth(offset=-0.05)})
    first = collect(root)
    assert (root / "runs" / "1B-s0-sn_da" / "metrics.arrow").is_file()  # the one cache
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
        (rid, rd.dir.metrics, *_want_spec(rd.entry, rd.summary, "train/CE loss"))
        for rid, rd in serial.runs.items()
    ]
    for use_cache in (False, True):  # the pool's workers also write the copies
        parsed = load_metrics_many(jobs, use_cache, workers=2, min_parallel_bytes=0)
        assert set(parsed) == set(serial.runs)
        for rid, m in parsed.items():
            s = serial.runs[rid].metrics
            assert s is not None
            assert np.array_equal(m.columns["train/CE loss"], s.columns["train/CE loss"])
    assert all((rd.directory / "metrics.arrow").is_file() for rd in serial.runs.values())


def test_gate_change_after_planning_is_flagged(tmp_path: Path) -> None:
    root = tmp_path / "synth"
    plan = make_results(root, SynthSpec(gate={"min_effect": 0.01}), {})
    spec = tmp_path / "spec.yaml"
    raw_gate = {"stage": "1B", "min_effect": 0.01}
    spec.write_text(yaml.safe_dump({"name": "synth", "gate": raw_gate}))
    plan["spec_path"] = str(spec)
    plan["gates"][0]["gate_raw_sha256"] = sha256_of(raw_gate)
    (root / "plan.json").write_text(json.dumps(plan))

    def check(plan: dict) -> list[str]:
        return check_gate_unchanged(Plan.from_json(plan))

    assert check(plan) == []
    spec.write_text(yaml.safe_dump({"name": "synth", "gate": {**raw_gate, "min_effect": 0.001}}))
    warnings = check(plan)
    assert len(warnings) == 1 and "GATE CHANGED AFTER PLANNING" in warnings[0]
    assert collect(root).warnings == warnings
    # without gate_raw_sha256: compare with defaults applied on both sides
    plan["gates"][0]["gate_raw_sha256"] = None
    assert check(plan) != []
    spec.write_text(yaml.safe_dump({"name": "synth", "gate": {"stage": "1B", "min_effect": 0.01}}))
    assert check(plan) == []
    # plan.json edited by hand
    plan["gates"][0]["gate"]["min_effect"] = 0.5
    assert any("plan.json was edited" in w for w in check(plan))


def test_fingerprint_cache_follows_file_changes(tmp_path: Path) -> None:
    from olmoablate.report.assemble import build

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


def _assert_same_metrics(cached, fresh) -> None:  # type: ignore[no-untyped-def]
    for rid, rd in fresh.runs.items():
        a, b = cached.runs[rid].metrics, rd.metrics
        assert a is not None and b is not None, rid
        assert a.steps.tolist() == b.steps.tolist(), rid
        assert set(a.columns) == set(b.columns), rid
        for k in b.columns:
            assert np.array_equal(a.columns[k], b.columns[k], equal_nan=True), (rid, k)
        assert (a.nonfinite, a.rows_read, a.duplicate_rows) == (
            b.nonfinite,
            b.rows_read,
            b.duplicate_rows,
        ), rid
        assert sorted(a.issues) == sorted(b.issues), rid


def _append_rows(path: Path, steps: range, **extra: float) -> None:
    with path.open("a") as fh:
        for s in steps:
            row = {"step": s, "tokens": s * 2048, "train/CE loss": 2.0 + 1.0 / s, **extra}
            row["optim/total grad norm"] = float("nan") if s % 7 == 0 else 0.5
            if s % 20 == 0:
                row["eval/lm/demo-heldout/CE loss"] = 2.5 - s * 1e-4
            fh.write(json.dumps(row) + "\n")


def test_incremental_cache_equals_full_parse(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Reports re-run while runs train: appended rows are parsed on top of the cached body, and
    every answer equals a parse from scratch, through requeue duplicates, NaNs, torn last lines,
    copy refreshes, files replaced atomically and files rewritten in place."""
    import olmoablate.report.collect as mod

    root = tmp_path / "synth"
    truths = {
        "baseline": ArmTruth(duplicate_steps=(50, 51), nonfinite_at=120),
        "sn_da": ArmTruth(offset=-0.05, truncate_last=True, spikes_at=(90,)),
    }
    make_results(root, SynthSpec(steps=200), truths)
    base = root / "runs" / "1B-s0-baseline" / "metrics.jsonl"
    var = root / "runs" / "1B-s0-sn_da" / "metrics.jsonl"
    calls = {"full": 0}
    real = mod._rebuild_job

    def counting(*a: object) -> object:
        calls["full"] += 1
        return real(*a)  # type: ignore[arg-type]

    monkeypatch.setattr(mod, "_rebuild_job", counting)

    def check(expect_full: int) -> None:
        calls["full"] = 0
        _assert_same_metrics(collect(root), collect(root, use_cache=False))
        assert calls["full"] == expect_full

    check(2)  # cold: both parsed from scratch, caches written
    check(0)  # nothing new: cache hits
    _append_rows(base, range(201, 260))
    _append_rows(var, range(201, 260))  # after the torn line: one malformed line
    check(0)  # small appends: parsed on top of the copy (the copy is kept)
    monkeypatch.setattr(mod, "REFRESH_ROWS", 0)
    _append_rows(base, range(260, 300), **{"train/H norm (loop 1)": 1.0})  # a new key
    check(0)  # the copy is brought up to date with the new rows
    check(0)
    with base.open("a") as fh:
        fh.write('{"step": 299, "tokens": 1, "train/CE loss": 99.0}\n')  # a requeued step
    check(1)  # a step repeated across the cached boundary: full parse of that file only
    with base.open("a") as fh:
        fh.write('{"step": 301, "tokens": 301')  # being written right now
    check(0)
    # the job resumed from a checkpoint: the file is replaced atomically (a new inode)
    lines = base.read_text().splitlines()[:150]
    tmp = base.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(base)
    check(1)
    # rewritten in place (same inode), longer than before but with other content
    lines = var.read_text().splitlines()
    lines[3] = lines[3].replace('"train/CE loss": ', '"train/CE loss": 1', 1)
    with var.open("r+") as fh:
        fh.write("\n".join(lines) + "\n" + "\n".join(lines[-20:]) + "\n")
    check(1)


def test_fingerprint_check_of_appended_lines(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """While runs train, only the appended fingerprint lines are compared; the answers equal a
    check from scratch (no cache), including the step of a first mismatch."""
    import olmoablate.report.fingerprints as fingerprints_mod
    from olmoablate.report.assemble import build

    full_checks = {"n": 0}
    real = fingerprints_mod._full_check

    def counting(a: bytes | None, b: bytes | None, count=None):  # type: ignore[no-untyped-def]
        full_checks["n"] += 1
        return real(a, b, count)

    monkeypatch.setattr(fingerprints_mod, "_full_check", counting)

    root = tmp_path / "synth"
    make_results(root, SynthSpec(steps=100), {"sn_da": ArmTruth(offset=-0.05)})
    fb = root / "runs" / "1B-s0-baseline" / "fingerprints.jsonl"
    fv = root / "runs" / "1B-s0-sn_da" / "fingerprints.jsonl"

    def add(path: Path, steps: range, salt: str = "") -> None:
        with path.open("a") as fh:
            for s in steps:
                fh.write(json.dumps({"step": s, "tokens": s, "sha256": f"h{s}{salt}"}) + "\n")

    def both() -> tuple[list[str], list[str]]:
        full_checks["n"] = 0
        cached = build(collect(root)).pairs[0]
        checks["cached_full"] = full_checks["n"]
        fresh = build(collect(root, use_cache=False)).pairs[0]
        assert (cached.valid, cached.invalid_reasons, cached.notes) == (
            fresh.valid,
            fresh.invalid_reasons,
            fresh.notes,
        )
        return cached.invalid_reasons, cached.notes

    checks = {"cached_full": 0}
    assert both() == ([], ["data fingerprints match on 100 common steps"])
    assert checks["cached_full"] == 1
    add(fb, range(101, 131))
    add(fv, range(101, 121))  # the variant is behind: 120 common steps
    assert both() == ([], ["data fingerprints match on 120 common steps"])
    assert checks["cached_full"] == 0  # only the appended lines were compared
    with fv.open("a") as fh:
        fh.write('{"step": 121, "tok')  # a torn line is not compared yet
    assert both() == ([], ["data fingerprints match on 120 common steps"])
    with fv.open("a") as fh:
        fh.write('ens": 121, "sha256": "h121"}\n')
    add(fv, range(122, 126), salt="other data")
    reasons, _ = both()
    assert checks["cached_full"] == 1  # the appended lines differ: the full check says where
    assert len(reasons) == 1 and "first at step 122" in reasons[0]
    assert "differ at 4 of 125 common steps" in reasons[0]


def test_plan_without_a_gate_is_reported_with_the_schema_defaults(tmp_path: Path) -> None:
    """A spec may leave `gate:` out; the report then decides at 1B with the schema's gate
    defaults (`collect.UNGATED`), never with a second copy of them."""
    from olmoablate.plan.gate import Gate
    from olmoablate.report.assemble import build
    from olmoablate.report.collect import UNGATED

    root = tmp_path / "synth"
    plan = make_results(root, SynthSpec(), {"sn_da": ArmTruth(offset=-0.05)})
    plan.update(gates=[])
    (root / "plan.json").write_text(json.dumps(plan))
    res = collect(root)
    assert res.gate is UNGATED and res.gate == Gate(stage="1B")
    assert res.warnings == [] and res.prereg_broken is None
    rep = build(res)
    assert rep.stage == "1B" and [p.pair_id for p in rep.pairs] == ["1B-s0-sn_da"]


def test_background_fingerprint_checks_equal_in_process_ones(tmp_path: Path) -> None:
    """The pairs' checks done in a worker while metrics load fill the cache with exactly the
    answers of in-process checks, a mismatch included; a file changed afterwards is checked
    again, not answered from the worker."""
    from olmoablate.report import fingerprints as fpm

    root = tmp_path / "synth"
    spec = SynthSpec(steps=60, variants={"a": {"siamese_norm": {}}, "b": {"siamese_norm": {}}})
    make_results(root, spec, {"b": ArmTruth(data_salt="other")})
    runs = root / "runs"
    pairs = [
        (runs / "1B-s0-baseline" / "fingerprints.jsonl", runs / f"1B-s0-{v}" / "fingerprints.jsonl")
        for v in "ab"
    ]
    inline: dict = {}
    want = [fpm.check_cached(inline, pb, pv) for pb, pv in pairs]
    assert want[0][0] == [] and "first at step 1" in want[1][0][0]
    cache: dict = {}
    bg = fpm.Background(cache, pairs, min_bytes=0)
    assert bg._future is not None  # a worker really ran (two cores here)
    bg.merge_into(cache)
    assert cache == inline
    with pairs[0][1].open("a") as fh:
        fh.write('{"step": 61, "tokens": 61, "sha256": "x"}\n')
    assert fpm.check_cached(cache, *pairs[0]) == fpm.check_cached({}, *pairs[0])


def test_each_fingerprints_file_is_read_once_per_report(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A baseline serves every variant of its (size, seed): its fingerprints are read once per
    report, yet a file that changes between two pairs' checks is read again."""
    from olmoablate.report import fingerprints as fpm
    from olmoablate.report.assemble import build

    root = tmp_path / "synth"
    spec = SynthSpec(steps=60, variants={v: {"siamese_norm": {}} for v in ("a", "b", "c")})
    make_results(root, spec)
    reads: dict[str, int] = {}
    real = fpm.complete_lines

    def counting(path: Path) -> bytes | None:
        reads[path.parent.name] = reads.get(path.parent.name, 0) + 1
        return real(path)

    monkeypatch.setattr(fpm, "complete_lines", counting)
    rep = build(collect(root, use_cache=False))
    assert reads == {"1B-s0-baseline": 1, "1B-s0-a": 1, "1B-s0-b": 1, "1B-s0-c": 1}
    assert all(p.notes == ["data fingerprints match on 60 common steps"] for p in rep.pairs)
    memo = fpm.Reads()
    base = root / "runs" / "1B-s0-baseline" / "fingerprints.jsonl"
    assert memo.lines(base) == memo.lines(base) and reads["1B-s0-baseline"] == 2
    with base.open("a") as fh:
        fh.write('{"step": 61, "tokens": 61, "sha256": "x"}\n')
    assert memo.lines(base) == real(base) and reads["1B-s0-baseline"] == 3
