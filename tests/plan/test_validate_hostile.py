"""`validate` and `plan` on hostile input (issue 35, cases 5, 7, 8 and 10): each value is one line
naming the field and what is allowed, exit 2, in under 1 s, with nothing written. Also covers the
loader's reading of the spec (:mod:`olmoablate.plan.load`: pipes, the size limit), the path
checks (:mod:`olmoablate.plan.checks`) and the memory refusal (:mod:`olmoablate.plan.feasibility`).
The same hostile specs are in the bad-spec corpus (``tests/specs/bad``, tests/plan/test_load.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from olmoablate.plan.expand import build_plan
from olmoablate.plan.feasibility import check
from olmoablate.plan.load import SpecError, load_spec
from olmoablate.testing import MINIMAL_SPEC, REPO, run_cli

BASE = MINIMAL_SPEC.read_text()
TINY = "{d_model: 64, n_layers: 8, n_heads: 4, n_kv_heads: 2, mlp_hidden_size: 192, sliding_window: 32}"
HUGE = (
    "{d_model: 65536, n_layers: 1024, n_heads: 512, n_kv_heads: 8, mlp_hidden_size: 262144, "
    "sliding_window: 32, vocab_size: 100352}"
)

#: case: (edit of the minimal spec, the field the one line names, words it must hold)
CASES: dict[str, tuple[tuple[str, str], str, str]] = {
    # case 7: a 300-character variant name or spec name (File name too long at submit/status)
    "variant_300": (("  v:\n", "  " + "v" * 300 + ":\n"), "variants." + "v" * 37 + "...",
                    "allowed: a variant name of at most 224 characters"),
    "spec_name_300": (("name: minimal", "name: " + "n" * 300), "name", "allowed: at most 232"),
    # case 10: a newline in a variant name (was two lines naming runs[1].run_id)
    "variant_newline": (("  v:\n", '  "shallow\\n":\n'), "variants.shallow\\n (key)",
                        "invalid name 'shallow\\n'"),
    # case 8: values whose accounting or allocation never ends
    "n_layers_1e12": (("n_layers: 8", "n_layers: 1000000000000"), "custom_sizes.tiny.n_layers",
                      "allowed: at most 1024"),
    "n_layers_1e7": (("n_layers: 8", "n_layers: 10000000"), "custom_sizes.tiny.n_layers",
                     "allowed: at most 1024"),
    "d_model_2e30": (("d_model: 64", "d_model: 1073741824"), "custom_sizes.tiny.d_model",
                     "allowed: at most 65536"),
    "tokens_1e30": (("tokens: 4096", "tokens: 1e30"), "training.tokens",
                    "allowed: at most 1000000000000000"),
    # case 8: within the bounds, but 4.3e7 GB per process on a 64 GB CPU node
    "memory_on_cpu": ((TINY, HUGE), "topology.gpus_per_node", "> 64 GB per node (slurm.mem_gb)"),
    # case 5: a train file of 100 tokens, one batch is 256 (empty epochs for ever)
    "data_under_a_batch": (("tokens: 4096", "tokens: 4096"), "training.data.paths[0]",
                           "x.bin (100 tokens) gives 1 sequences of 64 tokens, fewer than one "
                           "global batch of 4"),
}  # fmt: skip


def _tokens(path: Path, n: int) -> None:
    """``n`` uint32 token ids of the minimal spec's vocabulary (dolma2's 100,352)."""
    np.random.default_rng(0).integers(1, 100_000, n).astype(np.uint32).tofile(path)


def _spec(folder: Path, case: str) -> Path:
    (old, new), _, _ = CASES[case]
    assert old in BASE
    text = BASE.replace(old, new, 1)
    if case == "memory_on_cpu":
        text += "slurm: {mem_gb: 64}\n"
    folder.mkdir(parents=True, exist_ok=True)
    # 100 uint32 ids (vocab 100352): one whole sequence of 64, where one batch needs 4
    _tokens(folder / "x.bin", 100 if case == "data_under_a_batch" else 4096)
    path = folder / f"{case}.yaml"
    path.write_text(text)
    return path


def _refusal(path: Path) -> list[str]:
    """What `validate` and `plan` run on ``path``: the loader, the plan, the feasibility checks,
    stopped after 5 s (``n_layers: 10^12`` never returned before the bounds)."""

    def slow(signum: int, frame: Any) -> None:
        raise TimeoutError(f"{path.name}: no answer within 5 s")

    before = signal.signal(signal.SIGALRM, slow)
    signal.alarm(5)
    try:
        ls = load_spec(path)
        found = check(ls, build_plan(ls))
    except SpecError as err:
        return [str(p) for p in err.problems]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    return [str(p) for p in found.errors]


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_value_is_one_line_in_under_a_second(tmp_path: Path, case: str) -> None:
    path = _spec(tmp_path, case)
    started = time.perf_counter()
    lines = _refusal(path)
    took = time.perf_counter() - started
    _, field, words = CASES[case]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{path}:") and f": {field}: " in lines[0], lines[0]
    assert words in lines[0], lines[0]
    assert took < 1.0, f"{case}: {took:.2f} s"


def test_validate_and_plan_refuse_each_in_one_line_writing_nothing(tmp_path: Path) -> None:
    """Through the CLI: `validate` of every case at once prints exactly one line per file and
    exits 2; `plan` of each refuses in one line and writes no results folder."""
    # (not the layer counts: before the bounds one never returned, the other took 45 s and 2.3 GB)
    paths = [_spec(tmp_path / case, case) for case in CASES if not case.startswith("n_layers")]
    proc = run_cli("validate", *map(str, paths), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert sorted(ln.split(":", 1)[0] for ln in lines) == sorted(map(str, paths)), lines
    for case in ("memory_on_cpu", "data_under_a_batch"):  # refused after the loader
        proc = run_cli("plan", str(tmp_path / case / f"{case}.yaml"), cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout
        (line,) = proc.stderr.strip().splitlines()
        assert f": {CASES[case][1]}: " in line, line
    assert not (tmp_path / "results").exists()


def test_spec_over_the_size_limit_says_its_real_size(tmp_path: Path) -> None:
    """Case 10: a 2 MB spec was reported as "1048577 bytes" (what was read, not its size)."""
    path = tmp_path / "big.yaml"
    path.write_text(BASE + "#" + "x" * 2_000_000 + "\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    (problem,) = info.value.problems
    assert f"the spec is {path.stat().st_size} bytes, over the limit of 1048576" in str(problem)


def test_data_path_that_is_a_folder_or_a_device_says_what_it_is(tmp_path: Path) -> None:
    """Case 10: a folder or /dev/zero as a data path warned "not found"."""
    (tmp_path / "adir").mkdir()
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("paths: [x.bin]", "paths: [adir, /dev/zero]"))
    proc = run_cli("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert f"paths[0]: warning: file {tmp_path / 'adir'} is a directory, not a regular file" in err
    assert "paths[1]: warning: file /dev/zero is a character device, not a regular file" in err
    assert "not found" not in err


def test_spec_from_a_pipe_validates_and_plans(tmp_path: Path) -> None:
    """Case 10: `plan <(cat spec)` said the pipe does not exist, and `validate` resolved the
    spec's relative paths against /proc/<pid>/fd. A pipe has no folder: they resolve against the
    working directory, as the shell user means."""
    _tokens(tmp_path / "x.bin", 4096)
    for command in ("validate", "plan"):
        read, write = os.pipe()
        os.write(write, BASE.encode())
        os.close(write)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "olmoablate", command, f"/dev/fd/{read}"],
                pass_fds=(read,), cwd=tmp_path, capture_output=True, text=True,
                env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
            )  # fmt: skip
        finally:
            os.close(read)
        assert proc.returncode == 0, proc.stderr
        assert "warning" not in proc.stderr, proc.stderr
    plan = (tmp_path / "results" / "minimal" / "plan.json").read_text()
    assert str(tmp_path / "x.bin") in plan
