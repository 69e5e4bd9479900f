"""W&B in offline mode, read back from the run's own .wandb file: tokens as every metric's step
metric, group/job_type/tags/config as the plan says, and one W&B run id across a requeue."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from olmoablate.plan.layout import ResultsDir
from olmoablate.run.callbacks import TOKENS, TRAIN_FLOPS, FlopsAxis, tags_of, wandb_id
from olmoablate.testing import REPO
from olmoablate.testing.plans import make_plan, run_entry, typed

pytestmark = pytest.mark.slow
STEPS = 16


def _records(path: Path) -> list[Any]:
    """Protobuf records of a .wandb transaction log (W&B's leveldb-style log: 7-byte header
    ``:W&B`` + magic + version, then 32 KiB blocks of [crc u32, length u16, type u8, data])."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf, out = 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        if kind == 0 and length == 0:
            break
        buf += data[pos : pos + length]
        pos += length
        if kind in (1, 4):  # FULL or LAST
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def _history(recs: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for r in recs:
        if r.WhichOneof("record_type") == "history":
            rows.append(
                {
                    (i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                    for i in r.history.item
                }
            )
    return rows


def _wait_for_step(metrics: Path, step: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metrics.exists():
            for line in metrics.read_text().splitlines():
                try:
                    if json.loads(line).get("step", 0) >= step:
                        return
                except ValueError:
                    pass
        assert proc.poll() is None, "job exited before it could be interrupted"
        time.sleep(0.2)
    raise AssertionError(f"step {step} not reached in {timeout}s")


def test_wandb_offline_tokens_axis_grouping_and_resume(tmp_path: Path) -> None:
    entry = run_entry(
        "tiny-s0-looped",
        "looped",
        {"looped": {"body_layers": 4, "loops": 2, "tail": 1, "input_injection": True}},
        steps=STEPS,
        pair_id="tiny-s0-looped",
        training={"checkpoint_interval": 4, "wandb": {"mode": "offline", "project": "p-test"}},
        evaluation={"interval": 8},
    )
    plan = make_plan(tmp_path, [entry])
    rd = ResultsDir(plan.parent).run("tiny-s0-looped")
    run_dir = rd.path
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "olmoablate.run.job", str(plan), "tiny-s0-looped"]

    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _wait_for_step(run_dir / "metrics.jsonl", 5, first, timeout=180)
    first.terminate()  # SIGTERM: checkpoint, then exit (the requeue case)
    out, _ = first.communicate(timeout=180)
    assert first.returncode == 0, out[-2000:]
    stopped = json.loads((run_dir / "status.json").read_text())
    assert stopped["state"] == "interrupted"
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert json.loads((run_dir / "status.json").read_text())["state"] == "completed"

    files = sorted((run_dir / "wandb").glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 2, files  # one offline log per attempt ...
    expected_id = wandb_id("fixture", "tiny-s0-looped")
    histories = []
    for f in files:
        recs = _records(f)
        runs = [r.run for r in recs if r.WhichOneof("record_type") == "run"]
        assert runs and {r.run_id for r in runs} == {expected_id}  # ... of the same W&B run
        run = runs[0]
        assert run.project == "p-test"
        assert run.run_group == "fixture/tiny-s0" and run.job_type == "looped"
        assert list(run.tags) == tags_of("fixture", typed(entry))
        assert set(run.tags) == {"spec:fixture", "size:tiny", "seed:0", "arm:looped"}
        config = {i.key: json.loads(i.value_json) for i in run.config.update}
        assert config["certificate"] == entry["certificate"] and config["run_id"] == entry["run_id"]
        metrics = [r.metric for r in recs if r.WhichOneof("record_type") == "metric"]
        globs = {m.glob_name: m.step_metric for m in metrics if m.glob_name}
        named = {m.name: m.step_metric for m in metrics if m.name}
        assert globs == {"*": TOKENS}  # every metric is charted against tokens
        assert named.get(TRAIN_FLOPS) == TOKENS and TOKENS in named
        histories.append(_history(recs))

    flops = FlopsAxis(typed(entry))
    gbs = entry["training"]["global_batch_size"]
    for rows in histories:
        trained = [r for r in rows if "train/CE loss" in r]
        assert trained
        for r in trained:
            step = int(r["_step"])
            assert r[TOKENS] == step * gbs
            assert r[TRAIN_FLOPS] == pytest.approx(flops(step))
    last_first = max(int(r["_step"]) for r in histories[0] if "train/CE loss" in r)
    resumed = [int(r["_step"]) for r in histories[1] if "train/CE loss" in r]
    assert last_first >= 5 and max(resumed) == STEPS
    assert min(resumed) > stopped["step"] - 4  # continues from the checkpoint, not from 0

    link = json.loads(rd.wandb.read_text())
    assert link["id"] == expected_id and link["mode"] == "offline" and link["url"] is None
