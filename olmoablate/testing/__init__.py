"""Test support for olmoablate: what the test suite and the benchmarks build their inputs with.

Here: the tiny spec and the checkout (``MINIMAL_SPEC``, ``REPO``, ``TESTS``), ``run_cli`` and
plan.json as earlier releases wrote it (``as_format_1``); synthetic plans and the tiny training pair
in :mod:`.plans`, synthetic results folders in :mod:`.synthetic`, the launcher and Slurm tests'
helpers in :mod:`.cluster`, deliberately wrong blocks in :mod:`.bad_blocks`.

Who may import it: ``tests/``, ``bench/`` and ``scripts/`` (and a block package's own tests),
never the product (import-linter's ``testing-not-in-product`` contract).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# ``REPO`` and ``TESTS`` are only meaningful in a source checkout (the test suite, ``bench/``),
# never in an install; ``MINIMAL_SPEC`` is package data, so a block package's tests can plan it.
HERE = Path(__file__).resolve().parent
#: The tiny valid spec (one 64-wide size, one depth-attention variant, CPU topology) that the
#: launcher, Slurm and CLI tests plan through the real `plan` command and edit per test.
MINIMAL_SPEC = HERE / "specs" / "minimal.yaml"
#: The checkout root (the folder holding ``olmoablate/``, ``tests/``, ``specs/``).
REPO = HERE.parents[1]
#: The test suite's own data (``tests/fixtures/results_v*``, ``tests/specs/bad``).
TESTS = REPO / "tests"


# Wide terminal (``COLUMNS=200``: rich tables unwrapped in the assertions' text), one intra-op
# thread (the tests share 2 cores); the caller checks the return code.
def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "olmoablate", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )


def as_format_1(doc: dict[str, Any]) -> dict[str, Any]:
    """A current (format 2) plan document as format 1 held it: the first gate also at the top
    level (``gate``/``gate_sha256``/``gate_raw_sha256``, between ``budget`` and ``eval_sets``)."""
    first = doc["gates"][0] if doc["gates"] else {}
    out: dict[str, Any] = {}
    for key, value in doc.items():
        out[key] = copy.deepcopy(value)
        if key == "budget":
            out["gate"] = copy.deepcopy(first.get("gate"))
            out["gate_sha256"] = first.get("gate_sha256")
            out["gate_raw_sha256"] = first.get("gate_raw_sha256")
    out["schema"] = 1
    return out
