"""An architecture proposal as an installed package: examples/olmoablate-layerscale.

scripts/setup.sh (the test command's first step) pip-installs it; these tests then take it from
spec to report through the real CLI and job, and check it is a faithful, exactly accounted
block — with no line of olmoablate mentioning it.
"""

from __future__ import annotations

import csv
import json
import subprocess
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from olmoablate.plan import accounting as acc
from olmoablate.plan.sizes import resolve
from olmoablate.testing import REPO
from olmoablate.testing import run_cli as _cli
from olmoablate.testing.plans import write_tokens

ARCH = {"layerscale": {"init": 0.1}}
DIMS = {"d_model": 32, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "mlp_hidden_size": 64,
        "sliding_window": 16, "vocab_size": 512}

SPEC = """\
name: ls
sizes: [micro]
custom_sizes:
  micro: {d_model: 32, n_layers: 4, n_heads: 4, n_kv_heads: 2, mlp_hidden_size: 64, sliding_window: 16, vocab_size: 512}
seeds: [0]
variants:
  layerscale:
    layerscale: {init: 0.1}
training:
  sequence_length: 32
  tokens: 2048
  global_batch_size: 256
  optimizer: {lr: 0.01}
  schedule: {warmup_steps: 1}
  data: {paths: [data/train.bin], eos_token_id: 510, pad_token_id: 511}
  checkpoint_interval: 4
  wandb: {mode: disabled}
evaluation:
  interval: 4
  lm_sets: {held: [data/held.bin]}
  max_eval_tokens: 512
topology: {gpus_per_node: 0}
gate:
  stage: micro
  variant: layerscale
  metric: eval/lm/held/CE loss
  last_n: 2
  max_step_time_overhead: null
  max_peak_memory_overhead: null
"""


def test_example_is_installed_through_the_entry_point_group() -> None:
    names = {ep.name: ep.value for ep in entry_points(group="olmoablate.blocks")}
    assert names.get("layerscale") == "olmoablate_layerscale:BLOCK", (
        "examples/olmoablate-layerscale is not installed: run scripts/setup.sh"
    )


def test_the_shipped_example_spec_validates_from_anywhere(tmp_path: Path) -> None:
    # its paths resolve against its own folder (it used the old cwd rule: an error elsewhere)
    spec = REPO / "examples/olmoablate-layerscale/spec.yaml"
    out = _cli("validate", "--skip-paths", str(spec), cwd=tmp_path)
    assert out.returncode == 0 and "(2 runs, 1 pairs" in out.stdout, out.stdout + out.stderr
    assert "old rule" not in out.stdout + out.stderr


def test_no_line_of_olmoablate_names_the_example() -> None:
    hits = subprocess.run(
        ["grep", "-ril", "layerscale", str(REPO / "olmoablate")], capture_output=True, text=True
    )
    assert hits.stdout == "", hits.stdout


def test_layerscale_model_is_the_equation_and_costs_its_formula() -> None:
    import torch

    from olmoablate.models.build import build_model, param_counts
    from olmoablate.models.generate import greedy_decode

    d = resolve(DIMS)
    model = build_model(d, ARCH, init_seed=3)
    base = build_model(d, {}, init_seed=3)
    assert param_counts(model)["unique"] == acc.param_count(d, ARCH)
    assert acc.param_count(d, ARCH) - acc.param_count(d, {}) == 2 * d.d_model * d.n_layers
    assert acc.train_flops_per_token(d, ARCH, 32) == acc.train_flops_per_token(d, {}, 32)
    # explicit init: λ = ε, every shared weight equal to the baseline's for the same seed
    blk = model.blocks["1"]
    assert torch.all(blk.attention_scale == 0.1) and torch.all(blk.feed_forward_scale == 0.1)
    shared = dict(base.named_parameters())
    for name, p in model.named_parameters():
        if not name.endswith("_scale"):
            assert torch.equal(p, shared[name]), name
    # the block is the equation: h = x + λ_a ⊙ N_a(Attn(x)); out = h + λ_m ⊙ N_m(MLP(h))
    x = torch.randn(2, 8, d.d_model)
    with torch.no_grad():
        h = x + blk.attention_scale * blk.attention_norm(blk.attention(x))
        want = h + blk.feed_forward_scale * blk.feed_forward_norm(blk.feed_forward(h))
        assert torch.allclose(blk(x), want, atol=1e-6)
    # decode == forward (the block declares decode support)
    ids = torch.randint(0, 500, (1, 6))
    tokens, logits = greedy_decode(model, ids, 4)
    with torch.no_grad():
        full = model(tokens[:, :-1])
    assert torch.allclose(logits, full[:, 5:], atol=1e-4)


@pytest.mark.slow
def test_example_package_spec_to_report(tmp_path: Path) -> None:
    write_tokens(tmp_path / "data" / "train.bin", 20_000, seed=1, vocab=512, eos=510)
    write_tokens(tmp_path / "data" / "held.bin", 2_000, seed=2, vocab=512, eos=510)
    (tmp_path / "ls.yaml").write_text(SPEC)

    assert _cli("validate", "ls.yaml", cwd=tmp_path).returncode == 0
    planned = _cli("plan", "ls.yaml", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    res = tmp_path / "results" / "ls"
    runs = {r["run_id"]: r for r in json.loads((res / "plan.json").read_text())["runs"]}
    var = runs["micro-s0-layerscale"]
    code = var["code"]["layerscale"]
    assert (code["distribution"], code["version"]) == ("olmoablate-layerscale", "0.1.0")
    assert code["module"] == "olmoablate_layerscale:LayerScale" and len(code["sha256"]) == 64
    assert "code" not in runs["micro-s0-baseline"]
    assert var["unique_params"] - runs["micro-s0-baseline"]["unique_params"] == 2 * 32 * 4

    sub = _cli("submit", "ls.yaml", "--executor", "local", "--no-progress", cwd=tmp_path)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    for rid in runs:
        st = json.loads((res / "runs" / rid / "status.json").read_text())
        assert st["state"] == "completed" and st["step"] == 8, st

        proved = json.loads((res / "runs" / rid / "proof.json").read_text())
        assert proved["unique_params"] == runs[rid]["unique_params"]
        assert proved["counted_flops_per_token"] == proved["formula_flops_per_token"]
    assert json.loads((res / "runs" / "micro-s0-layerscale" / "proof.json").read_text())[
        "code"
    ] == {"layerscale": code["sha256"]}

    rep = _cli("report", "ls.yaml", cwd=tmp_path)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    rows = list(csv.DictReader((res / "comparison.csv").open()))
    assert rows and {r["variant_name"] for r in rows} == {"layerscale"}
    assert {r["valid"] for r in rows} == {"True"}  # the certificate held: a matched pair
    gate = json.loads((res / "gate.json").read_text())
    assert gate["verdict"] in {"proceed", "stop", "inconclusive"}
