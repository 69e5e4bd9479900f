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
    assert "olmoablate.plan.load" in modules  # the measurement really covered validate
    heavy = {
        m for m in modules if m.split(".")[0] in {"torch", "olmo_core", "pandas", "matplotlib"}
    }
    assert not heavy, sorted(heavy)[:10]


def test_help_lists_commands() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "--help"], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0
    for cmd in ("validate", "plan", "submit", "status", "cancel", "report", "data", "explain",
                "board", "watch", "blocks"):  # fmt: skip
        assert cmd in proc.stdout


def test_help_imports_no_pydantic_model() -> None:
    """`--help` loads the command modules only: a command module that imports the contract's
    pydantic models (plans, identities, the board) at import time costs every start ~0.2-0.5 s."""
    out = _importtime("--help")
    modules = {
        line.rsplit("|", 1)[-1].strip() for line in out.splitlines() if line.startswith("import time:")
    }
    assert "olmoablate.cli" in modules
    heavy = {m for m in modules if m.split(".")[0] in {"pydantic", "torch", "pandas", "numpy"}}
    assert not heavy, sorted(heavy)[:10]


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


def test_cli_start_imports_no_command_implementation() -> None:
    """Every command pays for the CLI's start-up (`validate` in CI, `status` on a login node), so
    importing the CLI loads only the command signatures: no spec loading, no plan model, no data
    preparation, no numeric library."""
    code = (
        "import sys, olmoablate.cli; "
        "heavy = ('torch', 'pandas', 'matplotlib', 'numpy', 'olmo_core', 'yaml', "
        "'olmoablate.data.prepare', 'olmoablate.plan.expand', 'olmoablate.plan.planfile'); "
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_command_line_loads_only_its_command() -> None:
    """`olmoablate validate` imports the spec stage's code only (not launch, report, data or
    watch), `--help` and an unknown word get every command, and so does shell completion."""
    from olmoablate import cli

    assert cli.invoked(["validate", "specs/"]) == "validate"
    assert cli.invoked(["--version"]) is None and cli.invoked([]) is None
    assert cli.invoked(["-h"]) is None and cli.invoked(["valdate"]) is None
    assert cli.invoked(["data", "check"]) == "data"
    code = (
        "import sys; from olmoablate.cli import main; sys.argv = ['olmoablate', 'validate', "
        "'--skip-paths', 'specs/demo.yaml'];\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print([m for m in sys.modules if m.startswith(('olmoablate.run', 'olmoablate.report', "
        "'olmoablate.data.prepare', 'olmoablate.report.commands'))])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
    full = {c.name for c in __import__("typer").main.get_command(cli.app).commands.values()}
    assert full == set(cli.COMMANDS) | set(cli.GROUPS)


def test_main_collector_settings_are_for_the_process_not_an_in_process_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`main` runs a command under mypy's GC thresholds and registers gc.freeze for the
    interpreter's exit (bench/cli.py: ~0.1 s of `validate specs/`); called in-process (twice),
    it hands the caller's thresholds back and registers the freeze once."""
    import gc
    from types import SimpleNamespace

    from olmoablate import cli

    during: list[tuple[int, ...]] = []
    at_exit: list[object] = []  # the interpreter's atexit list, as main() sees it
    monkeypatch.setattr(
        cli,
        "atexit",
        SimpleNamespace(
            register=at_exit.append,
            unregister=lambda f: at_exit.__setitem__(slice(None), [g for g in at_exit if g != f]),
        ),
    )

    def app() -> None:
        during.append(gc.get_threshold())
        raise SystemExit(0)

    monkeypatch.setattr(cli, "build_app", lambda only=None: app)
    before = gc.get_threshold()
    for _ in range(2):
        with pytest.raises(SystemExit):
            cli.main()
    assert during == [cli.GC_THRESHOLDS] * 2
    assert gc.get_threshold() == before != cli.GC_THRESHOLDS
    assert at_exit == [gc.freeze]
