"""The job proves the plan's accounting and the blocks' code before the first step.

A block whose parameter formula is off by one, or whose FLOPs formula is off by more than the
tolerance, fails at job start with one line naming the block and both numbers; a block whose
source changed after `plan` is refused by `submit` and by a requeued job.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from olmoablate.errors import UserError
from olmoablate.plan import accounting as acc
from olmoablate.plan.blocks import code_of
from olmoablate.plan.layout import ResultsDir
from olmoablate.plan.sizes import SizeDims
from olmoablate.run import proof
from olmoablate.run.job import run_job
from olmoablate.run.submit import submit
from olmoablate.testing.plans import certify, make_plan, run_entry

OFF_BY_ONE = "olmoablate.testing.bad_blocks:OFF_BY_ONE"
FLOPS_OFF = "olmoablate.testing.bad_blocks:FLOPS_OFF"


def _status(plan: Path, run_id: str) -> dict:
    return json.loads((plan.parent / "runs" / run_id / "status.json").read_text())


def test_param_count_off_by_one_fails_at_job_start(tmp_path: Path) -> None:
    run = run_entry("tiny-s0-obo", "obo", {OFF_BY_ONE: {}}, steps=2)
    plan = make_plan(tmp_path, [run])
    built = run["unique_params"] - 1
    with pytest.raises(UserError) as err:
        run_job(str(plan), "tiny-s0-obo")
    msg = str(err.value)
    assert "\n" not in msg
    assert f"block {OFF_BY_ONE}" in msg
    assert f"{built:,} unique parameters" in msg and f"says {run['unique_params']:,}" in msg
    st = _status(plan, "tiny-s0-obo")
    assert st["state"] == "failed" and st["step"] == 0 and "unique parameters" in st["reason"]
    assert not (plan.parent / "runs" / "tiny-s0-obo" / "metrics.jsonl").exists()  # no step ran


def test_flops_formula_off_beyond_tolerance_fails_at_job_start(tmp_path: Path) -> None:
    run = run_entry("tiny-s0-fo", "fo", {FLOPS_OFF: {}}, steps=2)
    plan = make_plan(tmp_path, [run])
    with pytest.raises(UserError) as err:
        run_job(str(plan), "tiny-s0-fo")
    msg = str(err.value)
    dims = SizeDims(**run["size_dims"])
    seq = min(proof.PROOF_SEQ_LEN, run["training"]["sequence_length"])
    split = acc.flops_breakdown(dims, {FLOPS_OFF: {}}, seq)
    base = acc.flops_breakdown(dims, {}, seq)
    claimed, real = split.total - split.unseen, base.total - base.unseen
    assert (claimed - real) / real > proof.FLOPS_TOLERANCE  # the lie is beyond the tolerance
    assert f"block {FLOPS_OFF}" in msg and "\n" not in msg
    assert f"counted {real:,} " in msg and f"formula says {claimed:,}" in msg
    assert _status(plan, "tiny-s0-fo")["state"] == "failed"


@pytest.mark.parametrize(
    "arch",
    [
        {},
        {"siamese_norm": {"output_norms": True}, "depth_attention": {"stride": 2}},
        {
            "looped": {"body_layers": 4, "loops": 3, "tail": 2, "state_norm": True},
            "depth_attention": {"stride": 3, "recent_window": 1},
        },
        {"layers": {"n_layers": 4}},
    ],
)
def test_bundled_blocks_pass_the_proof(arch: dict) -> None:
    """The bundled formulas match the built models: params exactly, counted FLOPs exactly."""
    from olmoablate.models.build import build_model_config

    entry = run_entry("tiny-s0-x", "x", arch, steps=2)
    run = proof.RunEntry.model_validate(entry)
    cfg = build_model_config(run.size_dims, run.architecture)
    proved = proof.prove(run, cfg.build(init_device="meta"), cfg)
    assert proved["counted_flops_per_token"] == proved["formula_flops_per_token"]


# ---------------------------------------------------------------------------- code identity
BLOCK_SRC = '''
from olmoablate.errors import Strict
from olmoablate.plan.blocks import Block
from olmoablate.models.block_model import BlockModel


class Opts(Strict):
    pass


class Mine(Block):
    name = "mine"
    Options = Opts
    model = "{mod}:MODEL"


BLOCK = Mine()
MODEL = BlockModel()
'''


def _user_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mod: str) -> tuple[str, Path]:
    src = tmp_path / "userrepo" / f"{mod}.py"
    src.parent.mkdir(parents=True)
    src.write_text(BLOCK_SRC.format(mod=mod))
    monkeypatch.syspath_prepend(str(src.parent))
    return f"{mod}:BLOCK", src


def _planned(tmp_path: Path, key: str) -> Path:
    run = run_entry("tiny-s0-mine", "mine", {key: {}}, steps=2)
    run["code"] = code_of({key: {}})
    return make_plan(tmp_path, [certify(run)])


def test_submit_refuses_a_block_edited_after_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, src = _user_block(tmp_path, monkeypatch, "blk_submit")
    plan = _planned(tmp_path, key)
    assert json.loads(plan.read_text())["runs"][0]["code"][key]["files"] == 1
    src.write_text(src.read_text() + "\n# a later tweak of the proposal\n")
    with pytest.raises(UserError) as err:
        submit(ResultsDir(plan.parent), "local", progress=False)
    msg = str(err.value)
    assert f"block {key!r}" in msg and "changed since plan" in msg
    assert "plan --replan" in msg and "submit --redo tiny-s0-mine" in msg
    assert not (plan.parent / "runs" / "tiny-s0-mine" / "status.json").exists()  # nothing sent


def test_requeued_job_refuses_to_resume_with_changed_block_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, src = _user_block(tmp_path, monkeypatch, "blk_requeue")
    plan = _planned(tmp_path, key)
    rd = plan.parent / "runs" / "tiny-s0-mine"
    (rd / "checkpoints" / "step1").mkdir(parents=True)  # what a preempted attempt left
    (rd / "status.json").write_text(json.dumps({"state": "interrupted", "step": 1, "attempt": 1}))
    src.write_text(src.read_text().replace('name = "mine"', 'name = "mine"  # edited'))
    with pytest.raises(UserError) as err:
        run_job(str(plan), "tiny-s0-mine")
    msg = str(err.value)
    assert "refusing to resume" in msg and "changed since plan" in msg and "--replan" in msg
    assert _status(plan, "tiny-s0-mine")["state"] == "failed"
    sys.modules.pop("blk_requeue", None)


def test_report_refuses_a_pair_whose_arm_trained_other_code() -> None:
    from olmoablate.report.pairing import proof_problems
    from olmoablate.run.files import ProofRecord

    run = run_entry("tiny-s0-da", "da", {"depth_attention": {"stride": 2}}, steps=2)
    run["code"] = code_of(run["architecture"])
    entry = proof.RunEntry.model_validate(certify(run))
    good = ProofRecord(
        run_id=entry.run_id,
        code={"depth_attention": run["code"]["depth_attention"]["sha256"]},
        unique_params=entry.unique_params,
        counted_flops_per_token=1.0,
        formula_flops_per_token=1,
        flops_tolerance=proof.FLOPS_TOLERANCE,
        seq_len=16,
        attempt=1,
        checked="2026-01-01T00:00:00+00:00",
    )
    assert proof_problems(entry, good) == ([], [])
    other = good.model_copy(update={"code": {"depth_attention": "0" * 64}})
    assert proof_problems(entry, other)[0] == [
        "tiny-s0-da: trained block code other than the plan recorded"
    ]
    assert "not verified" in proof_problems(entry, None)[1][0]
