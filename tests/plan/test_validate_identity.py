"""`plan` over a results folder whose runs started as other identities than a plain re-plan would
record (issue 35, case 4), and `explain` of a plan.json kept aside against the current one.

Fast: the runs are marked completed by the files `submit` writes (status.json, identity.json), no
training; the block is a user module in the test's folder (`module:attr`), edited after its runs
completed as a proposal's author would."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from olmoablate.testing import run_cli as cli
from olmoablate.testing.plans import write_tokens

MODULE = "blk_i35_code"
BLOCK_SRC = f'''
from olmoablate.errors import Strict
from olmoablate.plan.blocks import Block
from olmoablate.models.block_model import BlockModel


class Opts(Strict):
    pass


class Mine(Block):
    name = "mine"
    Options = Opts
    model = "{MODULE}:MODEL"


BLOCK = Mine()
MODEL = BlockModel()
'''
SPEC = f"""\
name: prop
sizes: [micro]
custom_sizes:
  micro: {{d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, mlp_hidden_size: 64, sliding_window: 16, vocab_size: 512}}
seeds: [0]
variants:
  mine:
    "{MODULE}:BLOCK": {{}}
training:
  sequence_length: 32
  tokens: 512
  global_batch_size: 256
  optimizer: {{lr: 0.01}}
  data: {{paths: [data/train.bin], eos_token_id: 510, pad_token_id: 511}}
evaluation:
  interval: 2
  lm_sets: {{held: [data/held.bin]}}
topology: {{gpus_per_node: 0}}
"""
BASE, MINE = "micro-s0-baseline", "micro-s0-mine"


@pytest.fixture
def planned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Planned, both runs completed (the files submit and the job leave), plan.json kept aside."""
    from olmoablate.plan.layout import ResultsDir
    from olmoablate.run.resume import write_identity

    write_tokens(tmp_path / "data" / "train.bin", 4_000, seed=1, vocab=512, eos=510)
    write_tokens(tmp_path / "data" / "held.bin", 1_000, seed=2, vocab=512, eos=510)
    (tmp_path / f"{MODULE}.py").write_text(BLOCK_SRC)
    (tmp_path / "prop.yaml").write_text(SPEC)
    monkeypatch.syspath_prepend(str(tmp_path))  # Plan.load imports the block here too
    assert cli("plan", "prop.yaml", cwd=tmp_path).returncode == 0
    results = ResultsDir(tmp_path / "results" / "prop")
    for rid in (BASE, MINE):
        results.own_run(rid).path.mkdir(parents=True)
        results.own_run(rid).status.write_text(json.dumps({"run_id": rid, "state": "completed"}))
        write_identity(results, rid)
    shutil.copy(results.plan_path, tmp_path / "old.json")
    yield tmp_path
    sys.modules.pop(MODULE, None)


def test_plain_plan_refuses_a_block_edited_after_its_runs_completed(planned: Path) -> None:
    """Was: a plain `plan` silently re-recorded the new code and identity (exit 0) while the run
    folder kept the old; `submit` then said "skipped: completed". Now: one line naming the run,
    the changed field and the commands, nothing written; the commands it names work."""
    src = planned / f"{MODULE}.py"
    src.write_text(src.read_text() + "# a later tweak of the proposal\n")
    before = (planned / "results" / "prop" / "plan.json").read_bytes()
    out = cli("plan", "prop.yaml", cwd=planned)
    assert out.returncode == 2, out.stdout
    line = out.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"run {MINE} was started as identity" in line
    assert f"code.{MODULE}:BLOCK.sha256" in line  # what changed
    assert BASE not in line  # the baseline's identity did not change
    assert "`olmoablate plan prop.yaml --replan`" in line
    assert f"`olmoablate submit prop.yaml --redo {MINE}`" in line
    assert (planned / "results" / "prop" / "plan.json").read_bytes() == before  # old plan kept

    # the way out it names: --replan records the new code ...
    assert cli("plan", "prop.yaml", "--replan", cwd=planned).returncode == 0
    # ... and submit no longer says a bare "completed" for the run of the old code
    skip = cli("submit", "prop.yaml", cwd=planned)  # nothing to train: both skipped
    assert skip.returncode == 0, skip.stderr
    assert f"skipped {BASE}: completed\n" in skip.stdout  # its identity did not change
    assert f"skipped {MINE}: completed as identity" in skip.stdout
    assert f"--redo {MINE} trains the plan's" in skip.stdout
    redo = cli("submit", "prop.yaml", "--redo", MINE, "--dry-run", cwd=planned)
    assert redo.returncode == 0 and MINE in redo.stdout, redo.stderr


def test_explain_compares_a_kept_plan_file_with_the_current_one(planned: Path) -> None:
    """Was: `explain old.json results/prop/plan.json` read the spec's current plan.json for
    old.json too and said "same identity" after the block's code changed."""
    src = planned / f"{MODULE}.py"
    src.write_text(src.read_text() + "# a later tweak of the proposal\n")
    assert cli("plan", "prop.yaml", "--replan", cwd=planned).returncode == 0
    out = cli("explain", "old.json", "results/prop/plan.json", cwd=planned)
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(ln.startswith(f"old.json:{BASE}") and "same identity" in ln for ln in lines)
    mine = next(i for i, ln in enumerate(lines) if ln.startswith(f"old.json:{MINE}"))
    assert "1 field(s) differ" in lines[mine]
    assert lines[mine + 1].strip().startswith(f"code.{MODULE}:BLOCK.sha256:")
    one = cli("explain", f"old.json:{MINE}", f"prop:{MINE}", cwd=planned)
    assert one.returncode == 1 and f"code.{MODULE}:BLOCK.sha256" in one.stdout
