"""A data file swapped after `plan` (issue 35, case 3): `submit` and the job's start refuse to train
other bytes under the planned identity, in one line whose commands re-identify the runs.

Was: the job trained the new bytes under the old sha256, and a second spec planned on the original
data then reused that run at 0 GPU-hours. Cheap: `submit` refuses before sending; the job's own
check runs through the job wrapper in-process (the training job's first step, `load_run`)."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from olmoablate.testing import run_cli as cli
from olmoablate.testing.plans import read_status, write_tokens

SPEC = """\
name: swap
sizes: [micro]
custom_sizes:
  micro: {d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, mlp_hidden_size: 64, sliding_window: 16, vocab_size: 512}
seeds: [0]
variants:
  da:
    depth_attention: {stride: 2}
training:
  sequence_length: 32
  tokens: 512
  global_batch_size: 256
  optimizer: {lr: 0.01}
  data: {paths: [data/train.bin], eos_token_id: 510, pad_token_id: 511}
evaluation:
  interval: 2
  lm_sets: {held: [data/held.bin]}
topology: {gpus_per_node: 0}
"""
BASE, VAR = "micro-s0-baseline", "micro-s0-da"
START = "olmoablate.run.runplan:load_run"


def _swap_keeping_size_and_mtime(path: Path) -> None:
    """Other bytes of the same size, mtime set back: what `cp -p` of another shard leaves."""
    st = path.stat()
    data = path.read_bytes()
    with open(path, "r+b") as fh:  # in place (same inode): the tokens rotated by 4 bytes
        fh.write(data[4:] + data[:4])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _commands(line: str) -> list[list[str]]:
    """The backticked `olmoablate ...` commands of a one-line reason, as argument lists."""
    return [c.split()[1:] for c in re.findall(r"`(olmoablate [^`]+)`", line)]


def _identities(root: Path) -> dict[str, str]:
    return json.loads((root / "results" / "swap" / "plan.json").read_text())["identity"]["runs"]


@pytest.fixture
def planned(tmp_path: Path) -> Path:
    write_tokens(tmp_path / "data" / "train.bin", 4_000, seed=1, vocab=512, eos=510)
    write_tokens(tmp_path / "data" / "held.bin", 1_000, seed=2, vocab=512, eos=510)
    (tmp_path / "swap.yaml").write_text(SPEC)
    assert cli("plan", "swap.yaml", cwd=tmp_path).returncode == 0
    return tmp_path


def test_submit_refuses_data_swapped_after_plan_and_the_named_commands_reidentify(
    planned: Path,
) -> None:
    old = _identities(planned)
    _swap_keeping_size_and_mtime(planned / "data" / "train.bin")
    out = cli("submit", "swap.yaml", "--executor", "local", "--no-progress", cwd=planned)
    assert out.returncode == 2, out.stdout
    line = out.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith("error: data/train.bin: data changed since `plan`") and "--retry-failed" not in line
    assert not (planned / "results" / "swap" / "runs").exists()  # nothing sent, nothing trained
    replan, submit = _commands(line)
    assert replan[0] == "plan" and replan[-1] == "--replan"
    assert cli(*replan, cwd=planned).returncode == 0
    new = _identities(planned)
    assert all(new[r] != old[r] for r in (BASE, VAR))  # both arms read it: both re-identified
    dry = cli(*submit, "--dry-run", cwd=planned)  # the submit it names now sends both
    assert dry.returncode == 0 and BASE in dry.stdout and VAR in dry.stdout, dry.stderr


def test_the_job_refuses_at_start_when_the_bytes_changed_after_submit(
    planned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The swap lands after `submit` looked (a queued Slurm job): the job hashes the bytes again
    before training; the run ends failed with the one line and the commands (not --retry-failed,
    which would repeat it), and those commands work."""
    from olmoablate.errors import UserError
    from olmoablate.plan.layout import ResultsDir
    from olmoablate.run.resume import prepare_run_dir
    from olmoablate.run.task import TrainRun

    results = ResultsDir(planned / "results" / "swap")
    prepare_run_dir(results, BASE, fresh=False)  # what submit did before the job started
    _swap_keeping_size_and_mtime(planned / "data" / "train.bin")
    for key, value in (
        ("SUBMITIT_EXECUTOR", "local"),
        ("SUBMITIT_LOCAL_JOB_ID", "1"),
        ("SUBMITIT_LOCAL_GLOBALID", "0"),
        ("SUBMITIT_LOCAL_NTASKS", "1"),
    ):
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("RANK", raising=False)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR2)}
    try:
        # the job's first step (`run_job` starts with `load_run`), without importing torch
        job = TrainRun(str(results.plan_path), BASE, str(results.root), target=START)
        with pytest.raises(UserError, match="data changed since `plan`"):
            job()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    status = read_status(results.root, BASE)
    assert status["state"] == "failed"
    why = status["reason"]
    assert why.startswith("failed before training started: ") and "data changed" in why
    assert "--retry-failed" not in why and f"--redo {BASE}" in why
    assert not (results.own_run(BASE).path / "metrics.jsonl").exists()  # not one step trained
    replan, submit = _commands(why)
    assert cli(*replan, cwd=planned).returncode == 0
    dry = cli(*submit, "--dry-run", cwd=planned)
    assert dry.returncode == 0 and BASE in dry.stdout, dry.stderr
