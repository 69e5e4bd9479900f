"""A scaling ladder through the real CLI and the real local executor (issue 32): three tiny rungs
x two arms x two seeds, each rung to its own `{per_param: N}` budget, a multiplier gate projected
to a larger size that is priced, not trained. A second proposal with the same recipe reuses the
whole baseline ladder from the store (trained once) and fits the same law from it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from olmoablate.testing import run_cli as _cli
from olmoablate.testing.plans import write_tokens

pytestmark = pytest.mark.slow

SPEC = """\
name: {name}
sizes: [r1, r2, r3]
custom_sizes:
  r1: {{d_model: 16, n_layers: 2, n_heads: 2, mlp_hidden_size: 32, sliding_window: 16, vocab_size: 512}}
  r2: {{d_model: 32, n_layers: 2, n_heads: 2, mlp_hidden_size: 64, sliding_window: 16, vocab_size: 512}}
  r3: {{d_model: 48, n_layers: 2, n_heads: 2, mlp_hidden_size: 96, sliding_window: 16, vocab_size: 512}}
  big: {{d_model: 256, n_layers: 4, n_heads: 4, mlp_hidden_size: 512, sliding_window: 16, vocab_size: 512}}
seeds: [0, 1]
variants:
  {variant}:
    depth_attention: {{stride: {stride}}}
training:
  sequence_length: 32
  tokens: {{per_param: 0.1}}
  global_batch_size: 256
  optimizer: {{lr: 0.01}}
  schedule: {{warmup_steps: 1}}
  data: {{paths: [data/train.bin], eos_token_id: 510, pad_token_id: 511}}
  wandb: {{mode: disabled}}
evaluation:
  interval: 4
  lm_sets: {{held: [data/held.bin]}}
  max_eval_tokens: 512
topology: {{gpus_per_node: 0}}
gate:
  rule: multiplier
  stage: r3
  variant: {variant}
  min_multiplier: 1.05
  at: [big]
  metric: eval/lm/held/CE loss
  last_n: 1
"""


def _spec(root: Path, name: str, variant: str, stride: int) -> str:
    (root / f"{name}.yaml").write_text(SPEC.format(name=name, variant=variant, stride=stride))
    return f"{name}.yaml"


def _ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _json(root: Path, spec: str, name: str) -> dict[str, Any]:
    return json.loads((root / "results" / spec / name).read_text())


def test_a_ladder_ends_in_a_multiplier_verdict_and_its_baseline_is_shared(tmp_path: Path) -> None:
    write_tokens(tmp_path / "data" / "train.bin", 60_000, seed=1, vocab=512, eos=510)
    write_tokens(tmp_path / "data" / "held.bin", 2_000, seed=2, vocab=512, eos=510)
    a = _spec(tmp_path, "a", "da1", 1)
    out = _ok(_cli("plan", a, cwd=tmp_path))
    assert "ladder: 3 rungs" in out and "share of one" in out
    plan = _json(tmp_path, "a", "plan.json")
    tokens = {r["size"]: r["tokens"] for r in plan["runs"] if r["arm"] == "baseline"}
    assert tokens["r1"] < tokens["r2"] < tokens["r3"]  # each rung to its own budget
    assert "big" not in {r["size"] for r in plan["runs"]}  # the target is priced, not trained
    (target,) = plan["gates"][0]["ladder"]["targets"]
    assert target["size"] == "big" and target["flops_v"] > 10 * max(
        r["total_train_flops"] for r in plan["runs"]
    )
    _ok(_cli("submit", a, "--executor", "local", "--no-progress", cwd=tmp_path))
    rep = _ok(_cli("report", a, cwd=tmp_path))
    gate = _json(tmp_path, "a", "gate.json")
    (record,) = gate["ladder"].values()
    assert record["decision"] in ("proceed", "stop", "inconclusive")
    assert [r["size"] for r in record["rungs"]] == ["r1", "r2", "r3"]
    assert all(len(r["loss_b"]) == 2 and len(r["loss_v"]) == 2 for r in record["rungs"])
    law_a = record["fits"]["flops"]["law"]
    assert law_a is not None
    assert record["reason"].split(":")[0] in rep or record["decision"] in rep

    # A second proposal of the same recipe: the baseline ladder is reused, trained zero times.
    b = _spec(tmp_path, "b", "da2", 2)
    _ok(_cli("plan", b, cwd=tmp_path))
    reused = _json(tmp_path, "b", "plan.json")["identity"]["reused"]
    assert sorted(reused) == sorted(f"{s}-s{k}-baseline" for s in ("r1", "r2", "r3") for k in (0, 1))
    sub = _ok(_cli("submit", b, "--executor", "local", "--no-progress", cwd=tmp_path))
    assert "submitted r1-s0-baseline" not in sub
    assert not any((tmp_path / "results/b/runs" / rid / "metrics.jsonl").exists() for rid in reused)
    _ok(_cli("report", b, cwd=tmp_path))
    (rec_b,) = _json(tmp_path, "b", "gate.json")["ladder"].values()
    law_b = rec_b["fits"]["flops"]["law"]
    assert law_b == pytest.approx(law_a, rel=1e-6)  # one law per recipe, from the same runs
    board = json.loads(_ok(_cli("board", "results", "--format", "json", cwd=tmp_path)))
    assert {p["spec"] for p in board["proposals"]} >= {"a", "b"}
