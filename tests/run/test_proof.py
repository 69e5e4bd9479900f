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
    assert "plan --replan" in msg and f"submit {plan.parent} --redo tiny-s0-mine" in msg
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


# ------------------------------------------------------------- refusals at job start: the way out
FORMULA_SRC = '''
from olmoablate.errors import Strict
from olmoablate.models.block_model import BlockModel
from olmoablate.plan.blocks import Block


class Opts(Strict):
    pass


class Lies(Block):
    name = "lies"
    Options = Opts
    model = "blk_formula:MODEL"

    def extra_params(self, opts, dims, n_layers):
        return {extra}


BLOCK = Lies()
MODEL = BlockModel()
'''

FORMULA_SPEC = """\
name: formula
sizes: [micro]
custom_sizes:
  micro: {d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, mlp_hidden_size: 64, sliding_window: 16, vocab_size: 512}
seeds: [0]
variants:
  lies:
    "blk_formula:BLOCK": {}
training:
  sequence_length: 32
  tokens: 512
  global_batch_size: 256
  optimizer: {lr: 0.01}
  schedule: {warmup_steps: 1}
  data: {paths: [train.bin], eos_token_id: 510, pad_token_id: 511}
  checkpoint_interval: 2
  wandb: {mode: disabled}
topology: {gpus_per_node: 0}
"""


def test_a_wrong_param_formula_names_the_block_and_the_way_out_that_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35 case 11: the refusal blames the block's formula (not "bad run entry"), writes
    error.log, and suggests `plan --replan` + `submit --redo`; the test runs exactly the
    suggested commands (real CLI, local executor) after fixing the formula, and the run
    completes. (`--retry-failed`, the old advice, would refuse the fixed block's new code.)"""
    import os
    import re
    import subprocess

    from olmoablate.testing.plans import write_tokens

    plugin = tmp_path / "plugin" / "blk_formula.py"
    plugin.parent.mkdir()
    plugin.write_text(FORMULA_SRC.format(extra=1))
    monkeypatch.syspath_prepend(str(plugin.parent))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{plugin.parent}:{Path.cwd()}"}
    write_tokens(tmp_path / "train.bin", 4_000, seed=1, vocab=512, eos=510)
    (tmp_path / "formula.yaml").write_text(FORMULA_SPEC)
    rid = "micro-s0-lies"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "olmoablate", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
        )

    assert cli("plan", "formula.yaml").returncode == 0
    results = tmp_path / "results" / "formula"
    try:
        with pytest.raises(UserError):  # the job itself, in this process (torch is loaded)
            run_job(str(results / "plan.json"), rid)
    finally:
        sys.modules.pop("blk_formula", None)
    rd = results / "runs" / rid
    st = json.loads((rd / "status.json").read_text())
    why = st["reason"]
    assert st["state"] == "failed" and "\n" not in why, why
    assert not why.startswith("bad run entry") and "--retry-failed" not in why, why
    assert "parameter formula" in why and "block blk_formula:BLOCK" in why, why
    assert "(+1 in the formula)" in why, why
    assert (rd / "error.log").is_file() and "UserError" in (rd / "error.log").read_text()
    commands = re.findall(r"`(olmoablate [^`]+)`", why)
    assert [c.split()[1] for c in commands] == ["plan", "submit"], why

    plugin.write_text(FORMULA_SRC.format(extra=0))  # the fix
    for command in commands:
        done = cli(*command.split()[1:], *(["--no-progress"] if "submit" in command else []))
        assert done.returncode == 0, command + "\n" + done.stdout + done.stderr
    assert json.loads((rd / "status.json").read_text())["state"] == "completed"


NAN_GUARD_SRC = '''
import dataclasses

import torch
from olmo_core.nn.transformer import TransformerBlock
from olmo_core.nn.transformer.config import TransformerBlockConfig

from olmoablate.errors import Strict
from olmoablate.models.block_model import BlockModel, in_cost_proof
from olmoablate.plan.blocks import Block


class Opts(Strict):
    escape: bool = False
    boom: bool = False


class Guarded(Block):
    name = "guarded"
    Options = Opts
    model = "blk_nan:MODEL"


class GuardedBlock(TransformerBlock):
    """OLMo-core's block behind a NaN guard (``escape``: the guard skips itself in the proof)."""

    escape = False
    boom = False

    def forward(self, x, **kwargs):
        if self.boom:
            raise RuntimeError("boom: a bug in the block's forward")
        if (not self.escape or not in_cost_proof()) and not torch.isfinite(x).all():
            raise FloatingPointError("non-finite input")
        return super().forward(x, **kwargs)


@dataclasses.dataclass
class GuardedConfig(TransformerBlockConfig):
    escape: bool = False
    boom: bool = False

    def build(self, **kwargs):
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(TransformerBlockConfig)}
        block = TransformerBlockConfig(**fields).build(**kwargs)
        block.__class__ = GuardedBlock
        block.escape = self.escape
        block.boom = self.boom
        return block


class Model(BlockModel):
    def configure(self, config, opts, dims, arch):
        block = config.block
        fields = {f.name: getattr(block, f.name) for f in dataclasses.fields(block)}
        config.block = GuardedConfig(**fields, escape=opts.escape, boom=opts.boom)
        return config


BLOCK = Guarded()
MODEL = Model()
'''


def test_a_nan_guard_in_forward_gets_the_fake_tensor_line_and_an_escape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35 case 12: `if not torch.isfinite(x).all():` in forward cannot run on the proof's
    fake tensors; the refusal says so in one line (the FLOP/param proof, fake tensors, the
    exception, the way to write it), and the documented escape `in_cost_proof()` passes while
    the guard still guards real tensors. Case 11: through the job, that refusal and a forward
    that raises suggest re-plan + redo, not --retry-failed."""
    import torch

    from olmoablate.models.build import build_model_config

    src = tmp_path / "userrepo" / "blk_nan.py"
    src.parent.mkdir(parents=True)
    src.write_text(NAN_GUARD_SRC)
    monkeypatch.syspath_prepend(str(src.parent))
    try:
        for escape in (False, True):
            arch = {"blk_nan:BLOCK": {"escape": escape}}
            run = proof.RunEntry.model_validate(run_entry("tiny-s0-nan", "nan", arch, steps=2))
            cfg = build_model_config(run.size_dims, run.architecture)
            model = cfg.build(init_device="cpu")
            if not escape:
                with pytest.raises(UserError) as err:
                    proof.prove(run, model, cfg)
                msg = str(err.value)
                assert "\n" not in msg and "block blk_nan:BLOCK" in msg, msg
                for said in ("FLOP/param proof", "fake (meta) tensors",
                             "DataDependentOutputException", "torch.where", "in_cost_proof()"):
                    assert said in msg, (said, msg)
                continue
            proved = proof.prove(run, model, cfg)
            assert proved["counted_flops_per_token"] == proved["formula_flops_per_token"]
            with pytest.raises(FloatingPointError):  # outside the proof it still guards
                model.blocks["0"](torch.full((1, 4, run.size_dims.d_model), float("nan")))
        # through the job (case 11 too): the NaN guard's refusal and a forward that raises both
        # end in one status line with error.log and the re-plan + redo commands
        for name, opts, said in (
            ("guard", {"escape": False}, "refused at job start: run tiny-s0-nan: block blk_nan"),
            ("boom", {"boom": True}, "RuntimeError: boom"),
        ):
            entry = run_entry("tiny-s0-nan", "nan", {"blk_nan:BLOCK": opts}, steps=2)
            plan = make_plan(tmp_path / name, [entry], train_tokens=5_000, heldout_tokens=500)
            with pytest.raises(Exception):  # noqa: B017 - the job re-raises what ended it
                run_job(str(plan), "tiny-s0-nan")
            why = _status(plan, "tiny-s0-nan")["reason"]
            assert said in why and "\n" not in why and "--retry-failed" not in why, why
            assert "in_cost_proof()" in why or name == "boom", why
            redo = f"`olmoablate submit {plan.parent} --redo tiny-s0-nan`"
            assert "--replan` then " + redo in why and why.endswith(redo), why
            assert (plan.parent / "runs" / "tiny-s0-nan" / "error.log").is_file()
    finally:
        sys.modules.pop("blk_nan", None)
