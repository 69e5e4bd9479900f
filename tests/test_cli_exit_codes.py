"""Exit codes scripts can trust, and no traceback from any CLI path.

Every command is driven with bad paths and bad arguments (a file where a folder belongs, a
folder where a file belongs, a missing spec, a garbage or hostile plan.json, unknown option
values): each exits non-zero with no Python traceback, and our own errors are one line. The
opt-in ``--fail-on`` of `status` turns a failed run into exit 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from olmoablate.testing import MINIMAL_SPEC, REPO
from olmoablate.testing.plans import PAIR, make_pair_plan

CLI = [sys.executable, "-m", "olmoablate"]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", "OLMOABLATE_TRACEBACK": ""},
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli")
    results = make_pair_plan(root)
    afile = root / "afile.txt"
    afile.write_text("not a folder\n")
    garbage = root / "garbage" / "results" / "g"
    garbage.mkdir(parents=True)
    (garbage / "plan.json").write_text("{not json")
    notplan = root / "notplan"
    notplan.mkdir()
    (notplan / "plan.json").write_text(json.dumps([1, 2, 3]))
    binary = root / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    minimal = (MINIMAL_SPEC).read_text()
    # A hostile plan.json whose run ids climb out of runs/ (consistent everywhere they occur)
    escape = root / "escape" / "results" / "fixture"
    escape.mkdir(parents=True)
    text = (results / "plan.json").read_text()
    for rid in PAIR:
        text = text.replace(f'"{rid}', f'"../../{rid}')
    (escape / "plan.json").write_text(text)
    # YAML that parses but whose values cannot be built: an impossible date, a 5000-digit int
    (root / "date.yaml").write_text(minimal + "description: 2024-02-30\n")
    (root / "bigint.yaml").write_text(minimal.replace("tokens: 4096", "tokens: " + "9" * 5000))
    return {
        "root": root,
        "results": results,
        "afile": afile,
        "garbage": garbage,
        "notplan": notplan,
        "binary": binary,
        "escape": escape,
        "minimal": MINIMAL_SPEC,
    }


CASES = [
    # (id, argv with {placeholders}, our own one-line error expected)
    ("validate-missing", ["validate", "{root}/nope.yaml"], True),
    ("validate-binary", ["validate", "{binary}"], True),
    ("validate-empty-dir", ["validate", "{notplan}"], True),
    ("validate-impossible-date", ["validate", "{root}/date.yaml"], True),
    ("validate-huge-int", ["validate", "{root}/bigint.yaml"], True),
    ("validate-set-missing-value", ["validate", "{minimal}", "--set"], False),
    ("validate-set-empty", ["validate", "{minimal}", "--set", "="], True),
    ("validate-set-empty-part", ["validate", "{minimal}", "--set", "a..b=1"], True),
    ("validate-set-not-yaml", ["validate", "{minimal}", "--set", "sizes=["], True),
    (
        "validate-set-impossible-date",
        ["validate", "{minimal}", "--set", "description=2024-02-30"],
        True,
    ),
    ("plan-missing", ["plan", "{root}/nope.yaml"], True),
    ("plan-impossible-date", ["plan", "--results-root", "{root}/r", "{root}/date.yaml"], True),
    (
        "plan-set-not-yaml",
        ["plan", "--results-root", "{root}/r", "{minimal}", "--set", "sizes=["],
        True,
    ),
    ("plan-results-root-is-file", ["plan", "{spec}", "--results-root", "{afile}"], True),
    ("plan-spec-is-dir", ["plan", "{root}"], True),
    ("plan-results-root-under-file", ["plan", "{spec}", "--results-root", "{afile}/sub"], True),
    ("submit-nosuch", ["submit", "nosuch"], True),
    ("submit-garbage-plan", ["submit", "{garbage}"], True),
    ("submit-not-a-plan", ["submit", "{notplan}"], True),
    ("submit-plan-is-file", ["submit", "{afile}"], True),
    ("submit-bad-executor", ["submit", "{results}", "--executor", "pbs"], True),
    ("submit-parallel-0", ["submit", "{results}", "--parallel", "0"], True),
    ("submit-bad-run", ["submit", "{results}", "--run", "nope"], True),
    ("submit-bad-size", ["submit", "{results}", "--size", "70B", "--dry-run"], True),
    ("submit-parallel-nan", ["submit", "{results}", "--parallel", "x"], False),
    ("submit-run-id-escapes", ["submit", "{escape}", "--dry-run"], True),
    ("status-run-id-escapes", ["status", "{escape}"], True),
    ("cancel-run-id-escapes", ["cancel", "{escape}"], True),
    ("report-run-id-escapes", ["report", "{escape}"], True),
    ("explain-run-id-escapes", ["explain", "{escape}", "{escape}"], True),
    ("watch-run-id-escapes", ["watch", "{escape}", "--once"], True),
    ("status-nosuch", ["status", "{root}/nosuch/"], True),
    ("status-garbage", ["status", "{garbage}"], True),
    ("status-impossible-date", ["status", "{root}/date.yaml"], True),
    ("status-bad-fail-on", ["status", "{results}", "--fail-on", "broken"], True),
    ("status-bad-max-age", ["status", "{results}", "--max-age", "soon"], False),
    ("cancel-nosuch", ["cancel", "nosuch"], True),
    ("cancel-bad-run", ["cancel", "{results}", "--run", "nope"], True),
    ("report-nosuch", ["report", "nosuch"], True),
    ("report-out-is-file", ["report", "{results}", "--out", "{afile}"], True),
    ("report-out-under-file", ["report", "{results}", "--out", "{afile}/sub"], True),
    ("report-bad-format", ["report", "{results}", "--format", "pdf"], True),
    ("report-bad-fail-on", ["report", "{results}", "--fail-on", "maybe"], True),
    ("report-garbage", ["report", "{garbage}"], True),
    ("explain-one-arg", ["explain", "{results}"], False),
    ("explain-nosuch", ["explain", "{root}/nosuch/", "{results}"], True),
    ("explain-nosuch-spec-run", ["explain", "nosuch:run1", "fixture:run2"], True),
    ("explain-nosuch-run", ["explain", "{results}/runs/nope", "{results}/runs/nope2"], True),
    ("explain-spec-run-nosuch", ["explain", "fixture:nope", "fixture:nope2"], True),
    ("explain-garbage", ["explain", "{garbage}", "{results}"], True),
    ("explain-not-a-plan", ["explain", "{results}", "{notplan}"], True),
    ("explain-file", ["explain", "{afile}", "{afile}"], True),
    ("explain-binary", ["explain", "{binary}", "{results}"], True),
    ("explain-impossible-date", ["explain", "{root}/date.yaml", "{results}"], True),
    ("explain-run-vs-plan", ["explain", "{results}/runs/x", "{results}"], True),
    ("explain-store-is-file", ["explain", "fixture:a", "fixture:b", "--store", "{afile}"], True),
    ("blocks-extra-arg", ["blocks", "extra"], False),
    ("blocks-bad-option", ["blocks", "--yaml"], False),
    ("report-empty-format", ["report", "{results}", "--format", ","], True),
    ("status-fail-on-mixed", ["status", "{results}", "--fail-on", "failed,bogus"], True),
    ("watch-nosuch", ["watch", "{root}/nosuch/", "--once"], True),
    ("watch-garbage", ["watch", "{garbage}", "--once"], True),
    ("watch-no-sequential-design", ["watch", "{results}", "--once"], True),
    ("watch-interval-nan", ["watch", "{results}", "--interval", "nan"], True),
    ("watch-interval-negative", ["watch", "{results}", "--interval", "-1"], True),
    ("watch-interval-zero", ["watch", "{results}", "--interval", "0"], True),
    ("board-nosuch", ["board", "{root}/nosuch"], True),
    ("board-on-a-file", ["board", "{afile}"], True),
    ("board-on-one-spec-folder", ["board", "{results}"], True),
    ("board-no-specs", ["board", "{notplan}"], True),
    ("board-bad-format", ["board", "{root}", "--format", "pdf"], True),
    ("board-empty-format", ["board", "{root}", "--format", ","], True),
    ("board-out-is-file", ["board", "{root}", "--format", "md", "--out", "{afile}"], True),
    ("board-out-under-file", ["board", "{root}", "--format", "md", "--out", "{afile}/x"], True),
    ("data-check-missing", ["data", "check", "--dir", "{root}/nodata"], True),
    ("data-check-file", ["data", "check", "--dir", "{afile}"], True),
    ("data-prepare-out-is-file", ["data", "prepare", "--out", "{afile}", "--source", "x"], True),
    ("unknown-command", ["frobnicate"], False),
]


def _main(args: list[str], cwd: Path, capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The console script's own entry point (``olmoablate.cli.main``), in this process: the
    same code path as ``python -m olmoablate`` without a second of interpreter start-up per case
    (``test_the_real_entry_point`` runs a few through a subprocess)."""
    from olmoablate.cli import main

    old_argv, old_cwd = sys.argv, os.getcwd()
    sys.argv, code = ["olmoablate", *args], 0
    os.chdir(cwd)
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)
    out, err = capfd.readouterr()
    return code, out, err


@pytest.mark.parametrize(("argv", "ours"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_never_shows_a_traceback(
    world: dict[str, Path], argv: list[str], ours: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    names = {k: str(v) for k, v in world.items()} | {"spec": str(REPO / "specs" / "demo.yaml")}
    args = [a.format(**names) for a in argv]
    code, out, err = _main(args, world["root"], capfd)
    assert code != 0, (args, out, err)
    assert "Traceback" not in out + err, err
    assert "internal error" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if ours:
        assert code == 2 and lines, (args, err)
        if argv[0] != "validate":  # validate prints one line per problem, each file:line
            assert len(lines) == 1, lines
    assert world["afile"].read_text() == "not a folder\n"  # nothing half-written
    if ours and argv[-2] in ("--out", "--interval", "--results-root"):
        assert argv[-2] in err, err  # the message names the option that was wrong (the last)
    if argv[0] == "plan" and "--results-root" in argv:
        assert not (world["root"] / "r").exists()


@pytest.mark.parametrize("case", ["plan-results-root-is-file", "report-out-is-file"])
def test_the_real_entry_point(world: dict[str, Path], case: str) -> None:
    (argv,) = [c[1] for c in CASES if c[0] == case]
    names = {k: str(v) for k, v in world.items()} | {"spec": str(REPO / "specs" / "demo.yaml")}
    proc = _run(*[a.format(**names) for a in argv], cwd=world["root"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1, proc.stderr


def test_status_fail_on_failed(world: dict[str, Path]) -> None:
    results = world["results"]
    assert _run("status", str(results), "--fail-on", "failed", cwd=world["root"]).returncode == 0
    run = results / "runs" / PAIR[0]
    run.mkdir(parents=True, exist_ok=True)
    (run / "status.json").write_text(
        json.dumps({"state": "failed", "step": 3, "reason": "disk full (x); free space"})
    )
    try:
        plain = _run("status", str(results), cwd=world["root"])
        assert plain.returncode == 0  # opt-in only
        proc = _run("status", str(results), "--json", "--fail-on", "failed", cwd=world["root"])
        assert proc.returncode == 1 and json.loads(proc.stdout)[0]["state"] == "failed"
    finally:
        (run / "status.json").unlink()


#: A variant's ``module:attr`` block reference that cannot give a block: (id, module source,
#: attr). The module is the user's own code, so its import may raise anything.
BAD_BLOCKS = [
    ("no-module", None, "X"),
    ("no-attr", "X = 1\n", "Nope"),
    ("not-a-block", "def X():\n    pass\n", "X"),
    ("import-raises", "raise RuntimeError('boom at import')\n", "X"),
    ("import-exits", "import sys\nsys.exit(3)\n", "X"),
    ("syntax-error", "x = (\n", "X"),
    (
        "block-without-options",
        "from olmoablate.plan.blocks import Block\nclass X(Block):\n    pass\n",
        "X",
    ),
]


@pytest.mark.parametrize(
    ("source", "attr"), [c[1:] for c in BAD_BLOCKS], ids=[c[0] for c in BAD_BLOCKS]
)
@pytest.mark.parametrize("command", ["validate", "plan"])
def test_a_block_reference_that_does_not_load_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    source: str | None,
    attr: str,
    command: str,
) -> None:
    module = f"userblock_{abs(hash((source, attr, command)))}"
    if source is not None:
        (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = tmp_path / "spec.yaml"
    minimal = (MINIMAL_SPEC).read_text()
    spec.write_text(minimal.replace("depth_attention: {stride: 2}", f'"{module}:{attr}": {{}}'))
    code, out, err = _main([command, str(spec), "--skip-paths"], tmp_path, capfd)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, (code, out, err)
    assert f"variants.v.{module}:{attr}" in lines[0] and "internal error" not in err, lines
    assert not (tmp_path / "results").exists()


def test_watch_accepts_a_plan_with_a_sequential_design(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The check that refuses a plan without a design lets a designed one through (one round)."""
    from olmoablate.plan.planfile import Plan
    from olmoablate.testing import plans as sp

    results = make_pair_plan(tmp_path)
    plan = Plan.load(results)
    gate = {"stage": "tiny", "noise": {"floor": {"sd": 0.01, "known": True}}}
    sp.build_plan(
        [r.as_json() for r in plan.runs],
        spec_name=plan.spec_name,
        workdir=str(tmp_path),
        gate={**gate, "sequential": {"interim": [0.5]}},
    ).write(results / "plan.json")
    code, out, err = _main(["watch", str(results), "--once"], tmp_path, capfd)
    assert code == 0, (out, err)


#: Values of a field that is a union (noise.floor: a table or, in old plans, a number;
#: max_gpu_hours: a number or one per size) that fit no member: (field, value, what is said).
BAD_UNION_VALUES = [
    ("gate.noise.floor", "{sd: 0.01}", "gate.noise.floor: noise.floor needs `pairs`"),
    ("gate.noise.floor", "{sd: 0.01, pairs: 1}", "gate.noise.floor.pairs: Input should be greater"),
    (
        "gate.noise.floor",
        "{sd: .nan, known: true}",
        "gate.noise.floor.sd: Input should be a finite",
    ),
    ("gate.noise.floor", "abc", "gate.noise.floor: Input should be a valid dictionary"),
    ("gate.noise.floor", "0.01", "gate.noise.floor: a bare number (0.01) is no longer accepted"),
    ("budget.max_gpu_hours", "0", "budget.max_gpu_hours: Input should be greater than 0"),
    ("budget.max_gpu_hours", "abc", "budget.max_gpu_hours: Input should be a valid number"),
    ("budget.max_gpu_hours", "{tiny: 0}", "budget.max_gpu_hours.tiny: Input should be greater"),
    ("budget.max_gpu_hours", "{huge: 5}", "budget.max_gpu_hours.huge: unknown size key huge"),
]


@pytest.mark.parametrize(("field", "value", "said"), BAD_UNION_VALUES)
def test_a_value_that_fits_no_member_of_a_union_is_one_problem(
    world: dict[str, Path], field: str, value: str, said: str, capfd: pytest.CaptureFixture[str]
) -> None:
    gate = ["--set", "gate={stage: tiny, variant: v}"] if field.startswith("gate.") else []
    argv = ["validate", str(world["minimal"]), "--skip-paths", *gate, "--set", f"{field}={value}"]
    code, out, err = _main(argv, world["root"], capfd)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert said in lines[0] and f"(from --set {field}={value})" in lines[0], lines[0]


def test_report_before_any_metrics_prints_no_warnings(tmp_path: Path) -> None:
    """A report of a plan whose runs have not logged yet is clean on stderr (matplotlib said
    "No artists with labels found to put in legend", two lines each, naming our source)."""
    results = make_pair_plan(tmp_path)
    proc = _run("report", str(results), "--out", str(tmp_path / "rep"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr


#: A corrupt ledger.json (launch's record of jobs): (content, what the one line says).
BAD_LEDGERS = [
    ("", "unreadable ledger"),
    ('{"runs": {', "unreadable ledger"),
    ("[1, 2]", "not a JSON object"),
    ('{"schema": 1}', "field `runs` is missing"),
    ('{"runs": 5}', "field `runs` is not an object"),
]


@pytest.mark.parametrize(("content", "said"), BAD_LEDGERS)
@pytest.mark.parametrize("argv", [["status"], ["cancel"], ["submit", "--dry-run"]])
def test_a_corrupt_ledger_is_one_line_and_left_alone(
    world: dict[str, Path],
    tmp_path: Path,
    content: str,
    said: str,
    argv: list[str],
    capfd: pytest.CaptureFixture[str],
) -> None:
    results = tmp_path / "results" / "fixture"
    results.mkdir(parents=True)
    (results / "plan.json").write_bytes((world["results"] / "plan.json").read_bytes())
    (results / "ledger.json").write_text(content)
    code, out, err = _main([argv[0], str(results), *argv[1:]], tmp_path, capfd)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, (out, err)
    assert f"{results / 'ledger.json'}: {said}" in lines[0], lines[0]
    assert (results / "ledger.json").read_text() == content


_ALIAS_BOMB = (
    "[&a [1,1,1,1,1,1,1,1,1,1], "
    + ", ".join(f"&{b} [{', '.join([f'*{a}'] * 10)}]" for a, b in zip("abcd", "bcde", strict=True))
    + f", [{', '.join(['*e'] * 10)}]]"
)


@pytest.mark.parametrize(
    "value",
    [_ALIAS_BOMB, "[" * 3000 + "]" * 3000, "[" + "1," * 50_000 + "1]"],
    ids=["alias-bomb", "deep", "long"],
)
def test_a_hostile_set_value_is_bounded_and_one_short_line(
    world: dict[str, Path], value: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """--set values are parsed within the limits of a spec file (an alias bomb expanded to 10^5
    values and was echoed back: a 3.5 MB error line) and messages cut what they quote."""
    argv = ["validate", str(world["minimal"]), "--skip-paths", "--set", f"description={value}"]
    code, out, err = _main(argv, world["root"], capfd)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, err[:2000]
    assert len(lines[0]) < 600, lines[0][:2000]
