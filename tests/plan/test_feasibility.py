"""spec/feasibility.py through `olmoablate validate`: each check warns with its fix and fails
under --strict; the same spec with the fix applied (via --set) passes, so no check is vacuous."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from olmoablate.testing import REPO

#: A 190M run on one H100: fits in memory, ~8 minutes of training at 989 TFLOPS x 0.4, 3814 steps.
GPU_SPEC = """\
name: feas
sizes: [190M]
seeds: [0, 1]
variants:
  v: {depth_attention: {stride: 4}}
training:
  sequence_length: 8192
  tokens: 124977152          # 3814 steps x 32768
  global_batch_size: 32768
  optimizer: {lr: 3e-4}
  data: {mix: OLMo-mix-0625, root: "s3://ai2-llm/preprocessed/"}
evaluation:
  interval: 1000
  lm_sets: {c4: ["s3://ai2-llm/eval-data/c4/val/part-0-00000.npy"]}
topology: {nodes: 1, gpus_per_node: 1}
slurm: {constraint: h100, time: 60, max_num_timeout: 0}
gate:
  stage: 190M
  metric: eval/lm/c4/CE loss
  last_n: 3
  noise: {floor: {sd: 0.01, pairs: 5}}
"""


def _validate(spec: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "validate", str(spec), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    p = tmp_path / "feas.yaml"
    p.write_text(GPU_SPEC)
    return p


def _warns_then_fails(spec: Path, breaking: list[str], field: str, *fix: str) -> str:
    """Warning (rc 0) naming ``fix`` without --strict; an error (rc 2) with it."""
    sets = [a for s in breaking for a in ("--set", s)]
    rc, out, err = _validate(spec, *sets)
    lines = [ln for ln in err.splitlines() if f": {field}: warning: " in ln]
    assert rc == 0 and out.startswith("ok "), err
    assert len(lines) >= 1, err
    for f in fix:
        assert f in lines[0], lines[0]
    rc, out, err = _validate(spec, *sets, "--strict")
    assert rc == 2 and f": {field}: error (--strict): " in err and "FAILED" in out
    return lines[0]


def test_the_base_spec_is_clean(spec: Path) -> None:
    rc, out, err = _validate(spec, "--strict")
    assert rc == 0, err
    assert "not checked here: " in out and "(remote: not checked here)" in out


def test_203_gb_per_device_names_the_fixes(spec: Path) -> None:
    breaking = ["sizes=[7B]", "gate.stage=7B", "training.global_batch_size=4194304",
                "training.tokens=12582912", "evaluation.interval=1"]  # fmt: skip
    line = _warns_then_fails(
        spec, breaking, "topology.gpus_per_node",
        "estimated 203 GB per device", "> 80 GB per GPU (slurm.constraint h100)",
        "topology.activation_checkpointing: full", "training.microbatch_size:", "more GPUs",
        "together: ",
    )  # fmt: skip
    assert "arm baseline" in line
    # the memory comes from gpu_memory_gb when stated: 256 GB would fit
    rc, _, err = _validate(spec, *[a for s in breaking for a in ("--set", s)], "--set",
                           "topology.gpu_memory_gb=256", "--strict")  # fmt: skip
    assert rc == 0, err


def test_five_minute_limit_without_requeue(spec: Path) -> None:
    _warns_then_fails(
        spec, ["slurm.time=5"], "slurm.time",
        "but gets 5 min x 1 attempt(s)", "fix: slurm.time >= ", "slurm.max_num_timeout >= ",
    )  # fmt: skip
    rc, _, err = _validate(spec, "--set", "slurm.time=5", "--set", "slurm.max_num_timeout=3",
                           "--strict")  # fmt: skip
    assert rc == 0, err  # 4 attempts of 5 minutes cover the ~8 minutes


def test_single_eval_point_under_last_n(spec: Path) -> None:
    line = _warns_then_fails(
        spec, ["evaluation.interval=5000"], "evaluation.interval",
        "averages the last 3 eval points", "has 1 (3814 steps, evaluation.interval 5000)",
        "fix: evaluation.interval <= 1271",
    )  # fmt: skip
    assert "gate.last_n <= 1" in line


def test_unset_and_set_var(spec: Path, tmp_path: Path) -> None:
    path = "${I25_TEST_DATA}/eval/c4.npy"
    breaking = [f"evaluation.lm_sets.c4=[\"{path}\"]"]
    env_clear = {k: v for k, v in os.environ.items() if k != "I25_TEST_DATA"}
    sets = [a for s in breaking for a in ("--set", s)]
    proc = subprocess.run([sys.executable, "-m", "olmoablate", "validate", str(spec), *sets],
                          capture_output=True, text=True, cwd=REPO, env=env_clear)  # fmt: skip
    assert proc.returncode == 0
    assert "${I25_TEST_DATA} is not set here (fix: export I25_TEST_DATA=" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "validate", str(spec), *sets, "--strict"],
        capture_output=True, text=True, cwd=REPO, env=env_clear,
    )  # fmt: skip
    assert proc.returncode == 2 and "error (--strict)" in proc.stderr
    # set, file missing: checked and reported with the expanded path
    env = {"I25_TEST_DATA": str(tmp_path)}
    rc, _, err = _validate(spec, *sets, env=env)
    assert rc == 0 and f"(= {tmp_path}/eval/c4.npy) not found" in err, err
    rc, _, err = _validate(spec, *sets, "--strict", env=env)
    assert rc == 2 and "error (--strict)" in err
    # set, file present: no warning
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "c4.npy").write_bytes(b"\0" * 4096)
    rc, _, err = _validate(spec, *sets, "--strict", env=env)
    assert rc == 0, err
    # --skip-paths says the paths were not checked
    rc, out, err = _validate(spec, *sets, "--strict", "--skip-paths", env=env_clear)
    assert rc == 0 and "paths not checked (--skip-paths)" in out


def test_bad_remote_form_and_missing_local_file(spec: Path) -> None:
    _warns_then_fails(spec, ["evaluation.lm_sets.c4=[s3://]"], "evaluation.lm_sets.c4[0]",
                      "not a s3:// URL of the form s3://<bucket>/<path>")  # fmt: skip
    _warns_then_fails(spec, ["evaluation.lm_sets.c4=[no/such/file.npy]"],
                      "evaluation.lm_sets.c4[0]", "not found", "spec's folder")  # fmt: skip


def test_bad_downstream_suffix(spec: Path) -> None:
    task = "arc_easy_test_rc_5shot"
    breaking = [f"evaluation.downstream=[{task}]", f"gate.metric=eval/downstream/{task} (foo)"]
    _warns_then_fails(
        spec, breaking, "gate.metric",
        f"task {task} records no metric '(foo)'", f"'eval/downstream/{task} (BPB)'",
    )  # fmt: skip
    ok = [breaking[0], f"gate.metric=eval/downstream/{task} (length-normalized accuracy)"]
    rc, _, err = _validate(spec, *[a for s in ok for a in ("--set", s)], "--strict")
    assert rc == 0, err


def test_interim_looks_the_eval_schedule_cannot_serve(spec: Path) -> None:
    """A sequential design's futility look at 25% of tokens needs last_n eval points at or just
    before 25% (953 of 3814 steps): every 1000 steps gives none."""
    design = ["gate.sequential={interim: [0.25, 0.5]}"]
    line = _warns_then_fails(
        spec, design, "evaluation.interval",
        "interim looks at 25%, 50% of tokens need 3 eval points", "evaluates every 1000 of 3814",
        "fix: evaluation.interval <= ",
    )  # fmt: skip
    fix = int(line.rsplit("<= ", 1)[1].split()[0].rstrip(";"))
    rc, _, err = _validate(spec, "--set", design[0], "--set", f"evaluation.interval={fix}", "--strict")
    assert rc == 0, err  # the interval it names serves both looks
    rc, _, err = _validate(spec, "--set", design[0], "--set", f"evaluation.interval={fix + 1}")
    assert "interim looks" in err  # and it is the largest that does
