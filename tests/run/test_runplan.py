"""Tests of olmoablate.run.runplan: loading a run entry (through the contract's Plan.load) and
refusing bad ones in one line, before torch loads."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from olmoablate.errors import UserError
from olmoablate.plan.identity import certificate_of
from olmoablate.run.runplan import load_run
from olmoablate.testing.plans import make_plan, run_entry


def _plan(tmp_path: Path, **kw: Any) -> Path:
    return make_plan(
        tmp_path,
        [
            run_entry("tiny-s0-baseline", "baseline", {}, **kw),
            run_entry("tiny-s0-sn", "sn", {"siamese_norm": {"output_norms": False}}, **kw),
        ],
        train_tokens=2000,
        heldout_tokens=500,
    )


def _edit(plan: Path, run_id: str, fn: Any, *, recertify: bool = True) -> None:
    data = json.loads(plan.read_text())
    for run in data["runs"]:
        if run["run_id"] == run_id:
            fn(run)
            if recertify:
                run["certificate"] = certificate_of(run, "tokens")
    plan.write_text(json.dumps(data))


def test_load_run_resolves_paths_against_workdir(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    ctx = load_run(plan, "tiny-s0-sn")
    assert ctx.run_id == "tiny-s0-sn" and ctx.spec_name == "fixture"
    assert ctx.run_dir.path == plan.parent / "runs" / "tiny-s0-sn"
    assert ctx.run_dir.status == plan.parent / "runs" / "tiny-s0-sn" / "status.json"
    assert ctx.run.training.optimizer.lr == 0.01 and ctx.plan.run("tiny-s0-sn") is ctx.run
    assert load_run(plan.parent, "tiny-s0-sn").run == ctx.run  # the results folder works too
    assert ctx.resolve("data/train.bin") == str(tmp_path / "data" / "train.bin")
    assert ctx.resolve("/abs/x.bin") == "/abs/x.bin"
    assert ctx.resolve("s3://bucket/x.npy") == "s3://bucket/x.npy"


def test_unknown_run_and_missing_plan(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    with pytest.raises(UserError, match=r"no run 'nope'.*allowed: tiny-s0-baseline, tiny-s0-sn"):
        load_run(plan, "nope")
    with pytest.raises(UserError, match="missing.json not found"):
        load_run(tmp_path / "missing.json", "x")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="bad.json: unreadable plan"):
        load_run(bad, "x")


def test_certificate_mismatch_is_refused(tmp_path: Path) -> None:
    plan = _plan(tmp_path)

    def change_lr(run: dict[str, Any]) -> None:
        run["training"]["optimizer"]["lr"] = 0.5

    _edit(plan, "tiny-s0-sn", change_lr, recertify=False)
    with pytest.raises(UserError, match=r"runs\[tiny-s0-sn\]\.certificate does not match"):
        load_run(plan, "tiny-s0-sn")
    load_run(plan, "tiny-s0-baseline")  # the untouched arm still loads


def test_pair_certificate_must_agree(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    # A re-certified edit passes the run check but no longer matches its pair.
    _edit(plan, "tiny-s0-sn", lambda run: run["training"]["data"].update(seed=1))
    with pytest.raises(UserError, match=r"pairs\[tiny-s0-variant\]\.certificate differs"):
        load_run(plan, "tiny-s0-sn")


def test_architecture_is_not_part_of_the_certificate() -> None:
    a = run_entry("a", "baseline", {})
    b = run_entry("b", "da", {"depth_attention": {"stride": 2, "recent_window": 0}})
    assert a["certificate"] == b["certificate"]
    c = copy.deepcopy(a)
    c["training"]["init_seed"] = 7
    assert certificate_of(c, "tokens") != a["certificate"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # field types and allowed values: the contract's Plan.load
        (
            lambda r: r["training"]["optimizer"].update(name="sgd"),
            r"runs\[1\]\.training\.optimizer\.name: Input should be 'adamw' or 'skip_step_adamw'",
        ),
        (
            lambda r: r["training"]["schedule"].update(name="step"),
            r"schedule\.name: Input should be 'cosine', 'linear', 'constant' or 'wsd'",
        ),
        (
            lambda r: r["training"].update(steps=0),
            r"training\.steps: Input should be greater than 0",
        ),
        (
            lambda r: r["training"].update(precision="fp8"),
            r"training\.precision: Input should be 'auto', 'fp32' or 'bf16'",
        ),
        (
            lambda r: r["training"].pop("optimizer"),
            r"runs\[1\]\.training\.optimizer: field required",
        ),
        (
            lambda r: r["training"]["optimizer"].update(lr=-1.0),
            r"optimizer\.lr: Input should be greater than 0",
        ),
        (lambda r: r["architecture"].update(wormholes={}), r"architecture\.wormholes: unknown"),
        (lambda r: r["training"].update(compile="yes"), r"runs\[1\]\.training\.compile"),
        # rules across fields: train.plan.check_run
        (
            lambda r: r["training"].update(global_batch_size=100),
            r"global_batch_size = 100 \(tokens\) must be a multiple of sequence_length = 64",
        ),
        (
            lambda r: r["training"].update(microbatch_size=65),
            r"microbatch_size = 65 \(tokens\) must be a multiple",
        ),
        (
            lambda r: r["training"]["data"].update(eos_token_id=5000),
            r"eos_token_id = 5000 is outside the model vocabulary .*allowed: 0 to 1023",
        ),
        (
            lambda r: r["training"]["data"].update(paths=None),
            r"runs\[tiny-s0-sn\]\.training\.data needs 'paths' or 'mix'",
        ),
    ],
)
def test_bad_entries_are_one_line_user_errors(tmp_path: Path, edit: Any, message: str) -> None:
    plan = _plan(tmp_path)
    _edit(plan, "tiny-s0-sn", edit)
    with pytest.raises(UserError, match=message) as info:
        load_run(plan, "tiny-s0-sn")
    assert "\n" not in str(info.value) and str(plan) in str(info.value)


def _with_identity(plan: Path, **versions: Any) -> None:
    from olmoablate.plan.identity import installed_versions
    from olmoablate.plan.planfile import Plan
    from olmoablate.plan.store import identify

    p = Plan.load(plan)
    ident = identify(p, p.workdir, {**installed_versions(), **versions})
    p.model_copy(update={"identity": ident}).write(plan)


def test_a_job_in_another_software_environment_than_its_identity_says_is_refused(
    tmp_path: Path,
) -> None:
    """The identity names the torch/OLMo-core/olmoablate versions `plan` saw; a job that would
    train with others (another venv on the compute nodes) would file its numbers under an
    identity another spec then reuses. It stops in one line, before torch loads."""
    plan = _plan(tmp_path)
    _with_identity(plan)
    assert load_run(plan, "tiny-s0-sn").run_id == "tiny-s0-sn"  # same environment: fine
    _with_identity(plan, torch="0.0.1")
    # the way out names --replan and --redo: submit wrote the run folder's identity.json before
    # the job started, so a plain `plan` refuses the new identity (issue 35) and only --redo
    # sends a folder started as another identity again
    with pytest.raises(UserError, match=r"torch 0\.0\.1.*re-plan.*--replan.*--redo tiny-s0-sn`"):
        load_run(plan, "tiny-s0-sn")
