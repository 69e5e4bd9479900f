"""CLI contract: fast start without torch, help texts, and no tracebacks."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from olmoablate.testing import REPO

#: What the login-node commands must run without (pyproject's `login-node` contract says it for
#: static imports; this runs them, so an import made at run time — a block or a command named
#: by a "module:attr" string — counts too).
HEAVY = {"torch", "olmo_core", "pandas", "matplotlib"}


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["validate", "specs/"],
        ["plan", "minimal.yaml"],
        ["explain", "results/minimal", "minimal.yaml"],
        ["status", "minimal"],
        ["board", "results"],
        ["blocks"],
    ],
    ids=lambda a: a[0].strip("-"),
)
def test_login_node_commands_run_without_the_training_or_plotting_stack(
    args: list[str], tmp_path: Path
) -> None:
    from olmoablate.testing import MINIMAL_SPEC

    shutil.copytree(REPO / "specs", tmp_path / "specs")
    (tmp_path / "minimal.yaml").write_text(MINIMAL_SPEC.read_text())
    for setup in (["plan", "minimal.yaml"],) if args[0] in ("explain", "status", "board") else ():
        subprocess.run([sys.executable, "-m", "olmoablate", *setup], cwd=tmp_path, check=True,
                       capture_output=True)  # fmt: skip
    code = (
        "import sys, runpy; sys.argv = ['olmoablate', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('olmoablate', run_name='__main__')\n"
        "except SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
        f"print('HEAVY', sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(HEAVY)!r})), code)"
    )
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=tmp_path)  # fmt: skip
    last = proc.stdout.strip().splitlines()[-1]
    assert last in ("HEAVY [] 0", "HEAVY [] None"), (args, proc.stdout[-2000:], proc.stderr[-2000:])


def test_help_lists_commands() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "--help"], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0
    for cmd in ("validate", "plan", "submit", "status", "cancel", "report", "data", "explain",
                "board", "watch", "blocks"):  # fmt: skip
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


def test_validate_specs_from_outside_the_checkout(tmp_path: Path) -> None:
    """Relative paths resolve against the spec's folder and the demo names its packaged
    tokenizer, so the shipped specs validate the same from any working directory."""
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "validate", str(REPO / "specs")],
        capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("ok ") == len(list((REPO / "specs").glob("*.yaml")))
    assert "tokenizer" not in proc.stderr  # found by name, not by a cwd-relative path
    assert not (tmp_path / "results").exists()  # validate writes nothing


def test_old_cwd_relative_paths_still_work_with_a_warning(tmp_path: Path) -> None:
    from olmoablate.plan.load import load_spec

    (tmp_path / "specs").mkdir()
    (tmp_path / "tok").mkdir()
    shutil.copy(REPO / "olmoablate" / "data" / "python_docs_bpe4096.json", tmp_path / "tok" / "t.json")
    text = (REPO / "specs" / "demo.yaml").read_text().replace(
        "tokenizer: bpe4096-python-docs", "tokenizer: tok/t.json"
    )
    spec = tmp_path / "specs" / "old.yaml"
    spec.write_text(text)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        ls = load_spec("specs/old.yaml")
    finally:
        os.chdir(cwd)
    assert ls.per_size["tiny"].training.data.tokenizer == str(tmp_path / "tok" / "t.json")
    (w,) = [w for w in ls.warnings if w.field == "training.data.tokenizer"]
    assert "resolved against the working directory (the old rule)" in w.message
    assert "write ../tok/t.json" in w.message
    # from the spec's folder the same spelling means specs/tok/t.json: not found, a clear error
    from olmoablate.plan.load import SpecError

    with pytest.raises(SpecError, match="tokenizer file .*specs/tok/t.json not found"):
        load_spec(spec)


def test_version_short_help_and_completion(tmp_path: Path) -> None:
    run = functools.partial(subprocess.run, capture_output=True, text=True, cwd=REPO)
    from olmoablate import __version__

    v = run([sys.executable, "-m", "olmoablate", "--version"])
    assert v.returncode == 0 and v.stdout.strip() == f"olmoablate {__version__}"
    h = run([sys.executable, "-m", "olmoablate", "plan", "-h"])
    assert h.returncode == 0 and "--set FIELD.PATH=VALUE" in h.stdout and "<list[str]>" not in h.stdout
    assert "OLMOABLATE_RESULTS_ROOT" in h.stdout
    code = (
        "import os, sys, typer.main; from olmoablate.cli import app;"
        "os.environ.update(_OLMOABLATE_COMPLETE='complete_bash', COMP_WORDS=sys.argv[1],"
        " COMP_CWORD=sys.argv[2]);"
        "typer.main.get_command(app).main(prog_name='olmoablate', complete_var='_OLMOABLATE_COMPLETE')"
    )
    comp = run([sys.executable, "-c", code, "olmoablate pl", "1"])
    assert comp.stdout.split() == ["plan"]
    comp = run([sys.executable, "-c", code, "olmoablate validate specs/de", "2"])
    assert comp.stdout.split() == ["specs/demo.yaml"]
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "plan.json").write_text(
        '{"runs": [{"run_id": "tiny-s0-baseline"}, {"run_id": "tiny-s1-looped"}]}'
    )
    env = {**os.environ, "OLMOABLATE_RESULTS_ROOT": str(tmp_path)}
    comp = run([sys.executable, "-c", code, "olmoablate cancel demo --run tiny-s0", "4"], env=env)
    assert comp.stdout.split() == ["tiny-s0-baseline"]
    comp = run([sys.executable, "-c", code, "olmoablate status de", "2"], env=env)
    assert "demo" in comp.stdout.split()


def test_a_command_line_builds_only_its_command() -> None:
    """A command line builds the one command it names; `--help`, an unknown word and shell
    completion get every command (click then lists them)."""
    from olmoablate import cli

    assert cli.invoked(["validate", "specs/"]) == "validate"
    assert cli.invoked(["--version"]) is None and cli.invoked([]) is None
    assert cli.invoked(["-h"]) is None and cli.invoked(["valdate"]) is None
    assert cli.invoked(["data", "check"]) == "data"
    full = {c.name for c in __import__("typer").main.get_command(cli.app).commands.values()}
    assert full == set(cli.COMMANDS) | set(cli.GROUPS)


