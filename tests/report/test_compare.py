"""Certificates, fingerprints and metric conventions of the per-pair comparison
(`report.compare.pairing`, `report.read.fingerprints`, `report.compare.pair`)."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from olmoablate.plan.planfile import Plan, RunEntry
from olmoablate.report.compare import improvement_sign, metric_direction
from olmoablate.report.fingerprints import fingerprint_problems
from olmoablate.report.pairing import certificate_problems
from olmoablate.testing import REPO

SPECS = REPO / "specs"


@functools.cache
def _plan(name: str = "looped_olmo") -> Plan:
    from olmoablate.plan.expand import build_plan
    from olmoablate.plan.load import load_spec

    return build_plan(load_spec(SPECS / f"{name}.yaml"))


def _run(run_id: str) -> RunEntry:
    return _plan().run(run_id)


def _edited(entry: RunEntry, edit: Any) -> RunEntry:
    """``entry`` with its plan.json form edited by ``edit(d)`` (as a hand edit would)."""
    d = copy.deepcopy(entry.as_json())
    edit(d)
    return RunEntry.model_validate(d)


def test_architecture_and_cost_may_differ() -> None:
    base, var = _run("1B-s0-baseline"), _run("1B-s0-looped")
    assert var.params != base.params and var.architecture != base.architecture
    assert certificate_problems(base, var, "tokens") == []


def test_any_other_setting_invalidates() -> None:
    var = _edited(_run("1B-s0-looped"), lambda d: d["training"]["optimizer"].update(lr=0.01))
    probs = certificate_problems(_run("1B-s0-baseline"), var, "tokens")
    assert probs and "training.optimizer.lr" in probs[0]
    assert any("1B-s0-looped: plan entry no longer matches" in p for p in probs)


def test_tokens_may_differ_only_under_flops_budget() -> None:
    base, var = _run("1B-s0-baseline"), _run("1B-s0-looped_flops")
    assert var.tokens != base.tokens
    assert certificate_problems(base, var, "tokens")
    assert certificate_problems(base, var, "flops") == []


def _deeper(d: dict[str, Any]) -> None:
    """A run planned with 4 layers in its size dimensions (its own certificate recomputed)."""
    from olmoablate.plan.identity import certificate_of

    d["size_dims"]["n_layers"] = 4
    d["certificate"] = certificate_of(d)


def test_reference_arm_may_change_depth() -> None:
    base = _run("1B-s0-baseline")
    ref = _edited(_run("1B-s0-olmo3_4layer"), _deeper)  # a `layers:` arm: declared depth change
    assert certificate_problems(base, ref, "tokens") == []
    plain = _edited(_run("1B-s0-looped_tied"), _deeper)  # no `layers:` block: a difference
    probs = certificate_problems(base, plain, "tokens")
    assert probs and "size_dims.n_layers" in probs[0]


def test_stale_stored_certificate_is_reported() -> None:
    var = _edited(_run("1B-s0-looped"), lambda d: d.update(certificate="0" * 64))
    probs = certificate_problems(_run("1B-s0-baseline"), var, "tokens")
    assert probs == [
        "variant 1B-s0-looped: plan entry no longer matches its recorded certificate "
        "(plan.json edited after planning?)"
    ]


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
    for name in ("looped_olmo", "siamese_depth_attention", "demo"):
        plan = _plan(name)
        for p in plan.pairs:
            base, var = plan.run(p.baseline_run), plan.run(p.variant_run)
            assert certificate_problems(base, var, p.budget_match) == [], p.pair_id
    assert any(p.budget_match == "flops" for p in _plan().pairs)
    base = _edited(_run("1B-s0-baseline"), lambda d: d["training"].update(grad_clip=0.5))
    problems = certificate_problems(base, _run("1B-s0-looped_flops"), "flops")
    assert any("training.grad_clip" in x for x in problems)
    assert any("no longer matches its recorded certificate" in x for x in problems)
