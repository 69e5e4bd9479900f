"""A store shared by specs, through the real CLI and the real local executor (issue 24).

Two proposals with the same tiny recipe and different variants share one baseline run: planned
as reused (0 GPU-hours) when it exists, or shared by the store's lease when both `submit`s start
at once; the report of either reads it as its own, with valid pair certificates. A path that
does not change the numbers (a symlink, a copy under another name) still reuses; a different
data-order seed does not, and `explain` names that field.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from olmoablate.testing import run_cli as _cli
from olmoablate.testing.plans import write_tokens

pytestmark = pytest.mark.slow

SPEC = """\
name: {name}
sizes: [micro]
custom_sizes:
  micro: {{d_model: 32, n_layers: 4, n_heads: 4, n_kv_heads: 2, mlp_hidden_size: 64, sliding_window: 16, vocab_size: 512}}
seeds: [0]
variants:
  {variant}:
    depth_attention: {{stride: {stride}}}
training:
  sequence_length: 32
  tokens: 1024
  global_batch_size: 256
  optimizer: {{lr: 0.01}}
  schedule: {{warmup_steps: 1}}
  data: {{paths: [{train}], eos_token_id: 510, pad_token_id: 511{data_extra}}}
  wandb: {{mode: disabled}}
evaluation:
  interval: 2
  lm_sets: {{held: [{held}]}}
  max_eval_tokens: 256
topology: {{gpus_per_node: 0}}
gate:
  stage: micro
  variant: {variant}
  metric: eval/lm/held/CE loss
  last_n: 1
  noise: {{floor: {{sd: 0.01, known: true}}}}
  max_step_time_overhead: null
  max_peak_memory_overhead: null
"""
BASE = "micro-s0-baseline"


def _spec(
    root: Path,
    name: str,
    variant: str,
    stride: int,
    *,
    train: str = "data/train.bin",
    held: str = "data/held.bin",
    data_extra: str = "",
) -> str:
    text = SPEC.format(
        name=name, variant=variant, stride=stride, train=train, held=held, data_extra=data_extra
    )
    (root / f"{name}.yaml").write_text(text)
    return f"{name}.yaml"


def _data(root: Path) -> None:
    write_tokens(root / "data" / "train.bin", 20_000, seed=1, vocab=512, eos=510)
    write_tokens(root / "data" / "held.bin", 2_000, seed=2, vocab=512, eos=510)


def _ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _plan(root: Path, spec: str) -> dict[str, Any]:
    return json.loads((root / "results" / spec / "plan.json").read_text())


def _trained_here(root: Path, spec: str, rid: str) -> bool:
    return (root / "results" / spec / "runs" / rid / "metrics.jsonl").is_file()


def _gate(root: Path, spec: str) -> dict[str, Any]:
    return json.loads((root / "results" / spec / "gate.json").read_text())


def _submit(root: Path, spec: str) -> str:
    return _ok(_cli("submit", spec, "--executor", "local", "--no-progress", cwd=root))


def test_second_spec_reuses_the_baseline_and_reports_with_it(tmp_path: Path) -> None:
    _data(tmp_path)
    a = _spec(tmp_path, "a", "da2", 2)
    b = _spec(tmp_path, "b", "da1", 1)
    _ok(_cli("plan", a, cwd=tmp_path))
    _submit(tmp_path, a)
    assert _trained_here(tmp_path, "a", BASE)

    out = _ok(_cli("plan", b, cwd=tmp_path))
    assert f"{BASE}: reused from results/a/runs/{BASE} (0 GPU-hours" in out
    assert "0 (reused)" in out
    pb = _plan(tmp_path, "b")
    assert pb["identity"]["reused"] == {BASE: f"a/runs/{BASE}"}
    assert pb["identity"]["runs"][BASE] == _plan(tmp_path, "a")["identity"]["runs"][BASE]

    sub = _submit(tmp_path, b)
    assert "submitted micro-s0-da1" in sub and f"submitted {BASE}" not in sub
    assert f"skipped {BASE}: completed, reused from results/a/runs/{BASE}" in sub
    assert not _trained_here(tmp_path, "b", BASE)  # trained zero times by b
    status_a = json.loads((tmp_path / "results/a/runs" / BASE / "status.json").read_text())
    assert status_a["state"] == "completed"
    ledger_a = json.loads((tmp_path / "results/a/ledger.json").read_text())
    assert ledger_a["runs"][BASE]["attempts"] == 1

    rows = json.loads(_ok(_cli("status", b, "--json", cwd=tmp_path)))
    base_row = next(r for r in rows if r["run_id"] == BASE)
    assert base_row["state"] == "completed" and "reused from" in base_row["reason"]

    _ok(_cli("report", b, cwd=tmp_path))
    gate = _gate(tmp_path, "b")
    assert gate["invalid_pairs"] == [] and all(p["valid"] for p in gate["pairs"])
    assert gate["variants"][0]["checks"][0]["estimate"] is not None

    # The same recipe, its token file behind a symlink and its eval file copied under another
    # name: every run is reused (nothing to train), and its report pairs valid.
    (tmp_path / "mnt").mkdir()
    os.symlink(tmp_path / "data" / "train.bin", tmp_path / "mnt" / "train.bin")
    (tmp_path / "mnt" / "held-copy.bin").write_bytes((tmp_path / "data/held.bin").read_bytes())
    c = _spec(tmp_path, "c", "da2", 2, train="mnt/train.bin", held="mnt/held-copy.bin")
    out = _ok(_cli("plan", c, cwd=tmp_path))
    assert _plan(tmp_path, "c")["identity"]["reused"] == {
        BASE: f"a/runs/{BASE}",
        "micro-s0-da2": "a/runs/micro-s0-da2",
    }
    assert "submitted 0 job(s)" in _submit(tmp_path, c)
    _ok(_cli("report", c, cwd=tmp_path))
    assert _gate(tmp_path, "c")["invalid_pairs"] == []
    _ok(_cli("report", a, cwd=tmp_path))
    est = [_gate(tmp_path, s)["variants"][0]["checks"][0]["estimate"]["mean"] for s in "ac"]
    assert est[0] == est[1]  # the same two runs, read from a's folder

    # Another data-order seed: not the same run; explain names the field.
    d = _spec(tmp_path, "d", "da2", 2, data_extra=", seed: 5")
    _ok(_cli("plan", d, cwd=tmp_path))
    assert _plan(tmp_path, "d")["identity"]["reused"] == {}
    ex = _cli("explain", f"results/a/runs/{BASE}", f"d:{BASE}", cwd=tmp_path)
    assert ex.returncode == 1, ex.stdout + ex.stderr
    assert "1 field(s) differ" in ex.stdout and "training.data.seed: 34521 -> 5" in ex.stdout
    same = _cli("explain", f"a:{BASE}", f"results/c/runs/{BASE}", cwd=tmp_path)
    assert same.returncode == 0 and "same identity" in same.stdout
    got = json.loads(_ok(_cli("explain", c, "results/c", "--json", cwd=tmp_path)))
    assert all(x["same_identity"] for x in got)  # the spec now is the plan recorded

    # One board of every spec of the store; a, b and c share a baseline run, d shares none.
    board = json.loads(_ok(_cli("board", "results", "--format", "json", cwd=tmp_path)))
    specs = {s["spec"]: s for s in board["specs"]}
    assert set(specs) == {"a", "b", "c", "d"}
    assert specs["b"]["reused_runs"] == [BASE] and specs["b"]["shares_baseline_with"] == ["a", "c"]
    assert specs["c"]["gpu_hours_spent"] == 0 and specs["d"]["state"] == "planned"
    props = {p["spec"]: p for p in board["proposals"]}
    assert props["b"]["verdict"] in ("proceed", "stop", "inconclusive")
    assert props["b"]["effect"] is not None and props["b"]["noise"]
    assert props["d"]["verdict"] == "not reported"
    table = _ok(_cli("board", "results", cwd=tmp_path))
    assert "not independent: a, b, c share baseline runs" in table
    from olmoablate.results import Campaign, load_all

    camp = load_all(tmp_path / "results")
    assert sorted(camp.specs["spec"]) == ["a", "b", "c", "d"]
    again = Campaign.from_json(json.loads(json.dumps(camp.to_json())))
    assert again.proposals.equals(camp.proposals) and again.specs.equals(camp.specs)


def test_two_concurrent_submits_train_the_shared_baseline_once(tmp_path: Path) -> None:
    _data(tmp_path)
    specs = [_spec(tmp_path, "a", "da2", 2), _spec(tmp_path, "b", "da1", 1)]
    for s in specs:
        _ok(_cli("plan", s, cwd=tmp_path))
    assert _plan(tmp_path, "b")["identity"]["reused"] == {}  # nothing existed to reuse yet
    env = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "olmoablate", "submit", "--executor", "local", "--no-progress"]
    procs = [
        subprocess.Popen(
            [*cmd, s], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )
        for s in specs
    ]  # fmt: skip
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    trained = [s for s in ("a", "b") if _trained_here(tmp_path, s, BASE)]
    assert len(trained) == 1, outs  # the shared baseline was trained once
    other = "b" if trained == ["a"] else "a"
    marker = json.loads((tmp_path / "results" / other / "runs" / BASE / "reused.json").read_text())
    assert marker["from"] == f"{trained[0]}/runs/{BASE}"
    assert sum(f"submitted {BASE}" in o for o in outs) == 1
    leases = list((tmp_path / "results" / ".store" / "leases").glob("*.json"))
    assert len(leases) == 3  # one identity each: the baseline and the two variants
    for s in ("a", "b"):
        _ok(_cli("report", s, cwd=tmp_path))
        gate = _gate(tmp_path, s)
        assert gate["invalid_pairs"] == [] and all(p["valid"] for p in gate["pairs"])
