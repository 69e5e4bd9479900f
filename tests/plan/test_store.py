"""`plan` against a store (`olmoablate.plan.store`): which runs of other specs it reuses, and
`explain` naming why one is not reused. Fast: the other spec's run is marked as existing by its
status.json (the real training is in tests/e2e/test_store.py)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from olmoablate.testing import run_cli as _cli
from olmoablate.testing.plans import write_tokens

SPEC = """\
name: {name}
sizes: [micro]
custom_sizes:
  micro: {{d_model: 32, n_layers: 4, n_heads: 4, n_kv_heads: 2, mlp_hidden_size: 64, sliding_window: 16, vocab_size: 512}}
seeds: [0]
variants:
  da:
    depth_attention: {{stride: 2}}
training:
  sequence_length: 32
  tokens: 1024
  global_batch_size: 256
  optimizer: {{lr: {lr}}}
  data: {{paths: [{train}], eos_token_id: 510, pad_token_id: 511{extra}}}
  checkpoint_interval: {ckpt}
  wandb: {{mode: {wandb}}}
evaluation:
  interval: 2
  lm_sets: {{held: [data/held.bin]}}
topology: {{gpus_per_node: 0}}
"""
BASE = "micro-s0-baseline"


def _spec(root: Path, name: str, **kw: Any) -> str:
    fields = {"lr": 0.01, "train": "data/train.bin", "extra": "", "ckpt": 1000, "wandb": "disabled"}
    (root / f"{name}.yaml").write_text(SPEC.format(name=name, **{**fields, **kw}))
    return f"{name}.yaml"


def _mark(root: Path, spec: str, rid: str, state: str) -> None:
    d = root / "results" / spec / "runs" / rid
    d.mkdir(parents=True, exist_ok=True)
    (d / "status.json").write_text(json.dumps({"run_id": rid, "state": state}))


def _reused(root: Path, spec: str) -> dict[str, str]:
    doc = json.loads((root / "results" / spec / "plan.json").read_text())
    return doc["identity"]["reused"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_tokens(tmp_path / "data" / "train.bin", 20_000, seed=1, vocab=512, eos=510)
    write_tokens(tmp_path / "data" / "held.bin", 2_000, seed=2, vocab=512, eos=510)
    assert _cli("plan", _spec(tmp_path, "a"), cwd=tmp_path).returncode == 0
    _mark(tmp_path, "a", BASE, "completed")
    return tmp_path


def test_what_does_not_change_the_numbers_still_reuses(root: Path) -> None:
    (root / "mnt").mkdir()
    shutil.copy(root / "data" / "train.bin", root / "mnt" / "copy.bin")
    os.symlink(root / "data" / "train.bin", root / "mnt" / "link.bin")
    absolute = str(root / "data" / "train.bin")
    for name, kw in {
        "copy": {"train": "mnt/copy.bin"},
        "link": {"train": "mnt/link.bin"},
        "absolute": {"train": absolute},
        "ckpt": {"ckpt": 3},
        "wandb": {"wandb": "offline"},
    }.items():
        out = _cli("plan", _spec(root, name, **kw), cwd=root)
        assert out.returncode == 0, out.stderr
        assert _reused(root, name) == {BASE: f"a/runs/{BASE}"}, name
        assert f"{BASE}: reused from results/a/runs/{BASE} (0 GPU-hours" in out.stdout


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"extra": ", seed: 5"}, "training.data.seed: 34521 -> 5"),
        ({"lr": 0.02}, "training.optimizer.lr: 0.01 -> 0.02"),
        ({"train": "data/held.bin"}, "training.data.files[0]: sha256:"),
    ],
)
def test_what_changes_the_numbers_is_not_reused_and_explain_names_it(
    root: Path, kw: dict[str, Any], field: str
) -> None:
    assert _cli("plan", _spec(root, "other", **kw), cwd=root).returncode == 0
    assert _reused(root, "other") == {}
    ex = _cli("explain", f"a:{BASE}", f"other:{BASE}", cwd=root)
    assert ex.returncode == 1, ex.stderr
    assert "1 field(s) differ" in ex.stdout and field in ex.stdout


@pytest.mark.parametrize(
    ("state", "reused"), [("running", True), ("pending", True), ("failed", False)]
)
def test_only_runs_that_exist_are_reused(root: Path, state: str, reused: bool) -> None:
    _mark(root, "a", BASE, state)
    assert _cli("plan", _spec(root, "b"), cwd=root).returncode == 0
    assert bool(_reused(root, "b")) is reused


def test_a_store_elsewhere_by_option_or_environment(root: Path) -> None:
    shutil.move(root / "results", root / "store")
    out = _cli("plan", _spec(root, "b"), "--store", "store", cwd=root)
    assert out.returncode == 0 and "reused from store/a/runs" in out.stdout
    assert (root / "store" / "b" / "plan.json").is_file()
    env_run = _cli_env(root, {"OLMOABLATE_RESULTS_ROOT": "store"}, "plan", _spec(root, "c"))
    assert env_run.returncode == 0 and "reused from store/a/runs" in env_run.stdout
    board = _cli_env(root, {"OLMOABLATE_RESULTS_ROOT": "store"}, "board", "--format", "json")
    assert {s["spec"] for s in json.loads(board.stdout)["specs"]} == {"a", "b", "c"}


def _cli_env(root: Path, env: dict[str, str], *args: str) -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "olmoablate", *args],
        cwd=root,
        env={**os.environ, "COLUMNS": "200", **env},
        capture_output=True,
        text=True,
    )


def test_explain_bad_input_is_one_line(root: Path) -> None:
    out = _cli("explain", f"a:{BASE}", "results/a", cwd=root)
    assert out.returncode == 2 and "give two runs, or two plans" in out.stderr
    out = _cli("explain", "a:nope", f"a:{BASE}", cwd=root)
    assert out.returncode == 2 and "no run 'nope'" in out.stderr
    assert "Traceback" not in out.stderr


def _trained(root: Path, spec: str, rid: str) -> None:
    """Mark ``rid`` of ``spec`` completed with the identity.json `submit` writes before training."""
    from olmoablate.plan.layout import ResultsDir
    from olmoablate.run.resume import write_identity

    _mark(root, spec, rid, "completed")
    write_identity(ResultsDir(root / "results" / spec), rid)


@pytest.mark.parametrize("change", ["replan", "data-in-place"])
def test_a_run_trained_as_another_identity_is_not_reused(root: Path, change: str) -> None:
    """a's run folder trained identity X (identity.json); a's plan.json now says Y for that run
    id (re-planned with another lr, or its token file rewritten in place: a plain `plan` refuses
    that since issue 35, `--replan` records it): a spec planning Y must not take a's X-trained
    run as Y."""
    _trained(root, "a", BASE)
    if change == "replan":
        out = _cli("plan", _spec(root, "a", lr=0.02), "--replan", cwd=root)
        kw: dict[str, Any] = {"lr": 0.02}
    else:
        write_tokens(root / "data" / "train.bin", 20_000, seed=7, vocab=512, eos=510)
        plain = _cli("plan", _spec(root, "a"), cwd=root)
        assert plain.returncode == 2 and "training.data.files[0]" in plain.stderr
        out = _cli("plan", _spec(root, "a"), "--replan", cwd=root)
        kw = {}
    assert out.returncode == 0, out.stderr
    assert _cli("plan", _spec(root, "c", **kw), cwd=root).returncode == 0
    assert _reused(root, "c") == {}


def test_a_path_without_content_is_named_where_the_job_reads_it(root: Path) -> None:
    """A token file made later (not there at plan time) is named by path: the same relative
    path planned from another folder is another file for the job (relative to the plan's
    workdir), so it must not reuse."""
    assert _cli("plan", _spec(root, "late", train="data/late.bin"), cwd=root).returncode == 0
    _mark(root, "late", BASE, "completed")
    w2 = root / "w2"
    (w2 / "data").mkdir(parents=True)
    shutil.copy(root / "data" / "held.bin", w2 / "data" / "held.bin")  # same eval content
    store = str(root / "results")
    out = _cli("plan", _spec(w2, "late2", train="data/late.bin"), "--store", store, cwd=w2)
    assert out.returncode == 0, out.stderr
    assert _reused(root, "late2") == {}
    # from the same folder it is the same path, the same file for the job: reused
    out = _cli("plan", _spec(root, "late3", train="data/late.bin"), cwd=root)
    assert _reused(root, "late3") == {BASE: f"late/runs/{BASE}"}


def test_an_environment_variable_in_a_path_is_named_by_the_file_it_names(root: Path) -> None:
    """``${DATA}/train.bin`` is another file for another $DATA (the job expands it): content
    decides, as for any other path."""
    (root / "other").mkdir()
    write_tokens(root / "other" / "train.bin", 20_000, seed=9, vocab=512, eos=510)
    (root / "same").mkdir()
    shutil.copy(root / "data" / "train.bin", root / "same" / "train.bin")
    train = "\"${DATA}/train.bin\""
    env = {"DATA": str(root / "other")}
    assert _cli_env(root, env, "plan", _spec(root, "v1", train=train)).returncode == 0
    _mark(root, "v1", BASE, "completed")
    out = _cli_env(root, {"DATA": str(root / "same")}, "plan", _spec(root, "v2", train=train))
    assert out.returncode == 0, out.stderr
    assert _reused(root, "v2") == {BASE: f"a/runs/{BASE}"}  # same content as a's data/train.bin
    out = _cli_env(root, {"DATA": str(root / "data")}, "plan", _spec(root, "v3", train=train))
    assert _reused(root, "v3") == {BASE: f"a/runs/{BASE}"}
    (root / "nope").mkdir()
    out = _cli_env(root, {"DATA": str(root / "nope")}, "plan", _spec(root, "v4", train=train))
    assert out.returncode == 0, out.stderr
    assert _reused(root, "v4") == {}  # not there yet: named by where, not by "${DATA}"
