"""End-to-end tests of the training job with OLMo-core's real Trainer on tiny models (CPU).

What they pin down: both arms of a pair see bitwise the same batches; a run is bitwise
reproducible; a run killed by SIGTERM (and SIGUSR2) mid-way resumes to exactly the losses of an
uninterrupted run with every step recorded once; NaNs mark a run ``diverged`` at the right step;
looped arms follow their curriculum and get per-loop-count evals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from olmoablate.errors import UserError
from olmoablate.run.faults import TooLittleData
from olmoablate.run.job import main, run_job
from olmoablate.testing import REPO
from olmoablate.testing.plans import certify, make_plan, run_entry

pytestmark = pytest.mark.slow



def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _losses(run_dir: Path) -> dict[int, float]:
    return {
        r["step"]: r["train/CE loss"]
        for r in _rows(run_dir / "metrics.jsonl")
        if "train/CE loss" in r
    }


def _run_dir(plan: Path, run_id: str) -> Path:
    return plan.parent / "runs" / run_id


def test_pair_shares_data_order_and_repeat_is_bitwise_identical(tmp_path: Path) -> None:
    base = run_entry("tiny-s0-baseline", "baseline", {}, steps=6)
    variant = run_entry(
        "tiny-s0-da", "da", {"depth_attention": {"stride": 2, "recent_window": 1}}, steps=6
    )
    assert base["certificate"] == variant["certificate"]
    plan = make_plan(tmp_path / "a", [base, variant])
    again = make_plan(tmp_path / "b", [base])

    st_base = run_job(str(plan), "tiny-s0-baseline")
    st_var = run_job(str(plan), "tiny-s0-da")
    st_again = run_job(str(again), "tiny-s0-baseline")
    for st in (st_base, st_var, st_again):
        assert st["state"] == "completed" and st["step"] == 6, st

    fp_base = _rows(_run_dir(plan, "tiny-s0-baseline") / "fingerprints.jsonl")
    fp_var = _rows(_run_dir(plan, "tiny-s0-da") / "fingerprints.jsonl")
    assert [r["step"] for r in fp_base] == list(range(1, 7))
    assert fp_base == fp_var
    assert len({r["sha256"] for r in fp_base}) == 6  # distinct batches, not a constant

    l_base, l_again = (
        _losses(_run_dir(plan, "tiny-s0-baseline")),
        _losses(_run_dir(again, "tiny-s0-baseline")),
    )
    l_var = _losses(_run_dir(plan, "tiny-s0-da"))
    assert sorted(l_base) == list(range(1, 7))
    assert l_base == l_again  # bitwise: exact float equality
    assert l_base != l_var  # the architecture really changed the computation

    # Decode figures at the end of training: Depth-Attention caches the mixed value in the
    # baseline's cache shape, so the KV-cache bytes are identical (2 x layers x tokens x kv x hd x 4).
    s_base = json.loads((_run_dir(plan, "tiny-s0-baseline") / "summary.json").read_text())
    s_var = json.loads((_run_dir(plan, "tiny-s0-da") / "summary.json").read_text())
    tokens = s_base["decode_prompt_tokens"] + s_base["decode_new_tokens"]
    assert s_base["kv_cache_bytes"] == 2 * 4 * tokens * 2 * 16 * 4 == s_var["kv_cache_bytes"]
    assert 0 < s_base["decode_latency_s"] < 5 and 0 < s_var["decode_latency_s"] < 5

    rows = _rows(_run_dir(plan, "tiny-s0-baseline") / "metrics.jsonl")
    last = rows[-1]
    # the job's columnar copy covers the whole file and reads back the report parser's result
    from olmoablate.run.columnar import load_copy
    from olmoablate.run.metricsfile import read_metrics

    metrics_path = _run_dir(plan, "tiny-s0-baseline") / "metrics.jsonl"
    copy = load_copy(metrics_path)
    assert copy is not None and copy[1] == metrics_path.stat().st_size
    parsed = read_metrics(metrics_path)
    assert list(copy[0].steps) == list(parsed.steps) and sorted(copy[0].columns) == sorted(
        parsed.columns
    )
    for key in (
        "tokens",
        "optim/LR (group 0)",
        "optim/total grad norm",
        "throughput/device/TPS",
        "step_time_s",
        "peak_memory_gb",
        "eval/lm/synthetic-heldout/CE loss",
        "eval/lm/synthetic-heldout/PPL",
    ):
        assert key in last, key
    assert last["tokens"] == 6 * 512
    evals = [r["step"] for r in rows if "eval/lm/synthetic-heldout/CE loss" in r]
    evals_var = [
        r["step"]
        for r in _rows(_run_dir(plan, "tiny-s0-da") / "metrics.jsonl")
        if "eval/lm/synthetic-heldout/CE loss" in r
    ]
    assert evals == evals_var == [6]

    summary = json.loads((_run_dir(plan, "tiny-s0-da") / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["mean_step_time_s"] > 0
    assert summary["optimizer_state_bytes"] > 0 and summary["unique_params"] > 0

    # A completed run is final: calling the job again trains nothing.
    assert run_job(str(plan), "tiny-s0-baseline")["updated"] == st_base["updated"]


def _wait_for_step(metrics: Path, step: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metrics.exists() and any(r.get("step", 0) >= step for r in _rows_safe(metrics)):
            return
        if proc.poll() is not None:
            raise AssertionError(f"job exited early: {proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.2)
    raise AssertionError(f"step {step} not reached in {timeout}s")


def _rows_safe(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def _launch(plan: Path, run_id: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "olmoablate.run.job", str(plan), run_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


KILL_STEPS = 16


def _kill_entry() -> dict[str, Any]:
    return run_entry(
        "tiny-s0-baseline",
        "baseline",
        {},
        steps=KILL_STEPS,
        training={"checkpoint_interval": 4},
        evaluation={"interval": 8},
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference: the same run trained in one go."""
    plan = make_plan(tmp_path_factory.mktemp("ref"), [_kill_entry()])
    assert run_job(str(plan), "tiny-s0-baseline")["state"] == "completed"
    return _run_dir(plan, "tiny-s0-baseline")


def _evals(run_dir: Path) -> dict[int, float]:
    key = "eval/lm/synthetic-heldout/CE loss"
    return {r["step"]: r[key] for r in _rows(run_dir / "metrics.jsonl") if key in r}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR2])
def test_interrupted_run_resumes_bitwise(
    tmp_path: Path, sig: signal.Signals, uninterrupted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OLMOABLATE_ATTEMPT", raising=False)
    plan = make_plan(tmp_path, [_kill_entry()])
    run_dir = _run_dir(plan, "tiny-s0-baseline")

    proc = _launch(plan, "tiny-s0-baseline")
    _wait_for_step(run_dir / "metrics.jsonl", 5, proc, timeout=120)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "interrupted", status
    assert signal.Signals(sig).name in status["reason"]
    stopped = status["step"]
    assert 5 <= stopped < KILL_STEPS
    assert (run_dir / "checkpoints" / f"step{stopped}").is_dir()  # saved on the way out
    assert max(r["step"] for r in _rows(run_dir / "metrics.jsonl")) == stopped

    final = run_job(str(plan), "tiny-s0-baseline")
    assert final["state"] == "completed" and final["attempt"] == 2

    steps_seen = [r["step"] for r in _rows(run_dir / "metrics.jsonl")]
    assert steps_seen == sorted(set(steps_seen)), "a step appears twice"
    assert steps_seen == list(range(0, KILL_STEPS + 1))
    assert _losses(run_dir) == _losses(uninterrupted)  # bitwise across the restart
    fps = _rows(run_dir / "fingerprints.jsonl")
    assert fps == _rows(uninterrupted / "fingerprints.jsonl")
    assert [r["step"] for r in fps] == list(range(1, KILL_STEPS + 1))
    assert _evals(run_dir) == _evals(uninterrupted)
    assert sorted(_evals(run_dir)) == [8, 16]


def test_nan_marks_run_diverged_and_final(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLMOABLATE_DEBUG_NAN_AT_STEP", "4")
    plan = make_plan(tmp_path, [run_entry("tiny-s0-baseline", "baseline", {}, steps=10)])
    status = run_job(str(plan), "tiny-s0-baseline")
    assert status["state"] == "diverged", status
    assert status["diverged_at_step"] == 4
    assert "non-finite" in status["reason"] and "grad norm" in status["reason"]
    assert status["step"] < 10
    on_disk = json.loads((_run_dir(plan, "tiny-s0-baseline") / "status.json").read_text())
    assert on_disk["state"] == "diverged" and on_disk["diverged_at_step"] == 4
    # Final: a second call does not train again.
    assert run_job(str(plan), "tiny-s0-baseline")["updated"] == status["updated"]


def test_exploding_lr_diverges(tmp_path: Path) -> None:
    entry = run_entry(
        "tiny-s0-baseline",
        "baseline",
        {},
        steps=30,
        training={
            "optimizer": {"lr": 1e6, "name": "adamw"},
            "schedule": {"name": "constant", "warmup_steps": 0},
            "grad_clip": None,
            "z_loss": None,
        },
        evaluation={"interval": 100},
    )
    plan = make_plan(tmp_path, [entry])
    status = run_job(str(plan), "tiny-s0-baseline")
    assert status["state"] == "diverged", status
    assert 1 <= status["diverged_at_step"] < 30


def test_looped_arm_curriculum_and_loop_evals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from olmo_core.train.train_module import TransformerTrainModule

    eval_batches = []
    real_eval_batch = TransformerTrainModule.eval_batch

    def counting_eval_batch(self: Any, *args: Any, **kwargs: Any) -> Any:
        eval_batches.append(1)
        return real_eval_batch(self, *args, **kwargs)

    monkeypatch.setattr(TransformerTrainModule, "eval_batch", counting_eval_batch)
    arch = {
        "looped": {
            "body_layers": 4,
            "loops": 3,
            "tail": 1,
            "curriculum": {"start": 1, "increment": 1, "interval_steps": 3},
        }
    }
    entry = run_entry(
        "tiny-s0-loop",
        "loop",
        arch,
        steps=7,
        evaluation={"interval": 3, "loop_counts": [1, 2, 4]},
    )
    entry["loop_counts"] = [1, 2, 3, 4]  # what `plan` resolves [1, 2, 4] to (b = 3 included)
    plan = make_plan(tmp_path, [entry])
    assert run_job(str(plan), "tiny-s0-loop")["state"] == "completed"
    rows = {r["step"]: r for r in _rows(_run_dir(plan, "tiny-s0-loop") / "metrics.jsonl")}
    # b(step) = min(loops, start + increment * floor((step - 1) / interval)), 1-based steps:
    # the same schedule the plan's FLOPs accounting integrates over.
    from olmoablate.plan.arch import Looped

    lp = Looped.model_validate(entry["architecture"]["looped"])
    expected = [lp.loops_at_step(s) for s in range(1, 8)]
    assert expected == [1, 1, 1, 2, 2, 2, 3]
    assert [rows[s]["train/loops"] for s in range(1, 8)] == expected
    assert "train/H norm (loop 3)" in rows[7] and "train/H norm (loop 3)" not in rows[6]
    assert "train/H norm (loop 2)" in rows[4] and "train/H norm (loop 2)" not in rows[3]
    for n in (1, 2, 4):
        assert f"eval/lm/synthetic-heldout/CE loss (loops={n})" in rows[6]
    ce = [rows[6][f"eval/lm/synthetic-heldout/CE loss (loops={n})"] for n in (1, 2, 4)]
    assert len(set(ce)) == 3  # the loop count really changes the evaluated model
    # At the count the model trains with, (loops=b) is the standard pass's number, not a second
    # pass: 3 eval points (steps 3, 6, 7) x (standard + the 3 other counts) whole-set passes.
    for step in (3, 6, 7):
        b = expected[step - 1]
        assert rows[step][f"eval/lm/synthetic-heldout/CE loss (loops={b})"] == (
            rows[step]["eval/lm/synthetic-heldout/CE loss"]
        )
    per_pass = int(rows[6]["throughput/in-loop eval batches"])
    assert per_pass >= 1 and len(eval_batches) == 3 * 4 * per_pass


def test_cli_entry_point_reports_bad_run_id(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    plan = make_plan(tmp_path, [run_entry("tiny-s0-baseline", "baseline", {})])
    assert main([str(plan), "nope"]) == UserError.exit_code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0] and "tiny-s0-baseline" in err[0]


def test_ddp_two_ranks_see_the_same_global_batches(tmp_path: Path) -> None:
    """torchrun with 2 gloo ranks (DDP): same fingerprints as one process, losses ~equal."""
    entry = run_entry("tiny-s0-baseline", "baseline", {}, steps=4, evaluation={"interval": 4})
    single = make_plan(tmp_path / "single", [entry])
    two = dict(entry, topology={**entry["topology"], "cpu_processes": 2})  # the job checks it
    ddp = make_plan(tmp_path / "ddp", [certify(two)])
    assert run_job(str(single), "tiny-s0-baseline")["state"] == "completed"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node=2", "-m", "olmoablate.run.job"]
        + [str(ddp), "tiny-s0-baseline"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    a, b = _run_dir(single, "tiny-s0-baseline"), _run_dir(ddp, "tiny-s0-baseline")
    assert json.loads((b / "status.json").read_text())["state"] == "completed"
    assert _rows(a / "fingerprints.jsonl") == _rows(b / "fingerprints.jsonl")
    la, lb = _losses(a), _losses(b)
    assert sorted(la) == sorted(lb) == [1, 2, 3, 4]
    assert all(abs(la[s] - lb[s]) < 1e-4 for s in la)  # reduction order differs, not the data


def test_train_data_shorter_than_one_batch_fails_at_start(tmp_path: Path) -> None:
    """Issue 35, case 5: train files that give fewer sequences than one global batch (300 tokens:
    4 sequences of 64, the batch is 8) made OLMo-core's trainer loop over empty epochs for ever
    (before the fix this test hits its 60 s alarm). Now the job refuses before step 1: state
    ``failed`` at step 0 with a one-line reason naming the counts and the way out."""
    plan = make_plan(
        tmp_path, [run_entry("tiny-s0-baseline", "baseline", {}, steps=4)], train_tokens=300
    )

    def hung(signum: int, frame: Any) -> None:
        raise TimeoutError("the job did not end within 60 s (empty epochs)")

    before = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        with pytest.raises(TooLittleData):
            run_job(str(plan), "tiny-s0-baseline")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    status = json.loads((_run_dir(plan, "tiny-s0-baseline") / "status.json").read_text())
    assert status["state"] == "failed" and status["step"] == 0, status
    reason = status["reason"]
    assert "\n" not in reason, reason
    assert "training data too short: 4 sequences of 64 tokens" in reason, reason
    assert "one global batch of 8" in reason and "--redo tiny-s0-baseline" in reason, reason
    assert not (_run_dir(plan, "tiny-s0-baseline") / "metrics.jsonl").exists()
