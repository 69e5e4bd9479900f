"""CLI contract: fast start without torch, help texts, and no tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parent.parent


def _importtime(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "olmoablate", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    return proc.stderr


def test_validate_does_not_import_torch() -> None:
    out = _importtime("validate", "specs/")
    modules = {
        line.rsplit("|", 1)[-1].strip()
        for line in out.splitlines()
        if line.startswith("import time:")
    }
    assert "olmoablate.spec.load" in modules  # the measurement really covered validate
    heavy = {
        m for m in modules if m.split(".")[0] in {"torch", "olmo_core", "pandas", "matplotlib"}
    }
    assert not heavy, sorted(heavy)[:10]


def test_help_lists_commands() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "--help"], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0
    for cmd in ("validate", "plan", "submit", "status", "cancel", "report", "data"):
        assert cmd in proc.stdout


def test_validate_shipped_specs_exit_0() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "validate", "specs/"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("ok ") == len(list((REPO / "specs").glob("*.yaml")))
