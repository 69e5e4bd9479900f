"""Certificates, fingerprints and metric conventions of the per-pair comparison."""

from __future__ import annotations

import copy
import json

from olmoablate.report.compare import (
    certificate_problems,
    fingerprint_problems,
    improvement_sign,
    metric_direction,
)

BASE = {
    "run_id": "1B-s0-baseline",
    "arm": "baseline",
    "architecture": {},
    "params": 10,
    "tokens": 100,
    "steps": 10,
    "training": {"tokens": 100, "steps": 10, "optimizer": {"lr": 0.003}},
    "size_dims": {"n_layers": 16},
}


def _variant(**changes: object) -> dict:
    v = copy.deepcopy(BASE)
    v.update({"run_id": "1B-s0-v", "arm": "v", "architecture": {"siamese_norm": {}}, "params": 11})
    v.update(changes)
    return v


def test_architecture_and_cost_may_differ() -> None:
    assert certificate_problems(BASE, _variant(), "tokens") == []


def test_any_other_setting_invalidates() -> None:
    v = _variant()
    v["training"]["optimizer"]["lr"] = 0.01
    probs = certificate_problems(BASE, v, "tokens")
    assert probs and "training.optimizer.lr" in probs[0]


def test_tokens_may_differ_only_under_flops_budget() -> None:
    v = _variant(tokens=200, steps=20)
    v["training"].update(tokens=200, steps=20)
    assert certificate_problems(BASE, v, "tokens")
    assert certificate_problems(BASE, v, "flops") == []


def test_reference_arm_may_change_depth() -> None:
    v = _variant(architecture={"layers": {"n_layers": 4}}, size_dims={"n_layers": 4})
    assert certificate_problems(BASE, v, "tokens") == []


def test_stale_stored_certificate_is_reported() -> None:
    from olmoablate.contract.certificate import certificate_of

    b = {**BASE, "certificate": certificate_of(BASE, "tokens")}
    v = {**_variant(), "certificate": "0" * 64}
    probs = certificate_problems(b, v, "tokens")
    assert any("no longer matches its recorded certificate" in p for p in probs)


def _fp(steps: range, salt: str = "") -> bytes:
    return "".join(
        json.dumps({"step": s, "tokens": s, "sha256": f"{s}{salt}"}) + "\n" for s in steps
    ).encode()


def test_fingerprints() -> None:
    assert fingerprint_problems(_fp(range(1, 50)), _fp(range(1, 50)))[0] == []
    probs, note = fingerprint_problems(_fp(range(1, 50)), _fp(range(1, 20)))  # partial run
    assert probs == [] and "19 common steps" in note
    probs, _ = fingerprint_problems(_fp(range(1, 50)), _fp(range(1, 50), "x"))
    assert probs and "first at step 1" in probs[0]
    # requeue duplicates in one file, same data: still valid
    dup = _fp(range(1, 30)) + _fp(range(20, 50))
    assert fingerprint_problems(_fp(range(1, 50)), dup)[0] == []
    probs, note = fingerprint_problems(None, _fp(range(1, 5)))
    assert probs == [] and "unverified" in note


def test_metric_direction() -> None:
    assert metric_direction("eval/lm/x/CE loss") == "lower"
    assert metric_direction("eval/lm/x/PPL") == "lower"
    assert metric_direction("eval/downstream/hellaswag/accuracy") == "higher"
    assert metric_direction("optim/LR (group 0)") is None
    assert improvement_sign("lower") == -1.0 and improvement_sign("higher") == 1.0


def test_real_plan_pairs_are_valid_including_flops_matched() -> None:
    """Every pair `plan` makes from the shipped specs passes the report's certificate check,
    including FLOPs-matched pairs whose baseline is shared with token-matched pairs."""
    from pathlib import Path

    from olmoablate.report.compare import certificate_problems
    from olmoablate.spec.expand import build_plan
    from olmoablate.spec.load import load_spec

    plan = build_plan(load_spec(Path(__file__).parent.parent / "specs" / "looped_olmo.yaml")).as_json()
    runs = {r["run_id"]: r for r in plan["runs"]}
    assert any(p["budget_match"] == "flops" for p in plan["pairs"])
    for p in plan["pairs"]:
        assert (
            certificate_problems(runs[p["baseline_run"]], runs[p["variant_run"]], p["budget_match"])
            == []
        )
    base = dict(runs["1B-s0-baseline"])
    base["training"] = {**base["training"], "grad_clip": 0.5}
    problems = certificate_problems(base, runs["1B-s0-looped_flops"], "flops")
    assert any("training.grad_clip" in x for x in problems)
    assert any("no longer matches its recorded certificate" in x for x in problems)
