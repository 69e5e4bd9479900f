"""The layering is a checked rule, not a convention (issue 13, item 5).

`lint-imports` checks the contracts in pyproject.toml ([tool.importlinter]): the pipeline
(report -> run -> models -> plan -> base), the login-node commands free of torch, pandas and
matplotlib, torch only in the training job, the report's own stack, and no cycles. The cycle test
repeats the last rule with grimp (import-linter's own graph library) so a failure names the
modules and lines. The mutation tests prove each contract is wired to the right modules: a lazy
import that breaks it, in a copy of the package, makes lint-imports fail naming the import.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

from olmoablate.testing import REPO


def _lint(cwd: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    args = [str(exe) if exe.exists() else "lint-imports", "--no-cache"]
    for c in contracts:
        args += ["--contract", c]
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    out.stdout = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout)  # its colours, for readable failures
    return out


def test_lint_imports_passes() -> None:
    out = _lint(REPO)
    assert out.returncode == 0, out.stdout + out.stderr


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle() -> None:
    """No cycle among olmoablate's modules, nor among its top-level packages."""
    graph = grimp.build_graph("olmoablate", cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    problems = []
    for comp in _cycles(edges):
        for a in comp:
            for b in sorted(edges[a] & set(comp)):
                for d in graph.get_import_details(importer=a, imported=b):
                    problems.append(f"{a}:{d['line_number']} -> {b}")
    tops = sorted(graph.find_children("olmoablate"))
    squashed = {
        a: {
            b
            for b in tops
            if b != a and graph.direct_import_exists(importer=a, imported=b, as_packages=True)
        }
        for a in tops
    }
    for comp in _cycles(squashed):
        problems.append("packages " + " <-> ".join(comp) + ":")
        for a in comp:
            for m in sorted(graph.find_descendants(a) | {a}):
                for b in sorted(edges[m]):
                    if b.split(".")[:2] != a.split(".")[:2] and ".".join(b.split(".")[:2]) in comp:
                        for d in graph.get_import_details(importer=m, imported=b):
                            problems.append(f"  {m}:{d['line_number']} -> {b}")
    assert not problems, "import cycles:\n" + "\n".join(problems)


def _copy(tmp_path: Path, edits: dict[str, str]) -> Path:
    """A copy of the package with ``edits`` (module path -> code appended to it)."""
    shutil.copytree(
        REPO / "olmoablate",
        tmp_path / "olmoablate",
        ignore=lambda _d, names: [n for n in names if n.endswith((".json", ".txt", ".pyc"))],
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    for rel, code in edits.items():
        with (tmp_path / "olmoablate" / rel).open("a") as f:
            f.write("\n\n" + code)
    return tmp_path


def test_pipeline_order_is_enforced(tmp_path: Path) -> None:
    """A stage importing a later stage (lazily, inside a function) breaks the pipeline layers."""
    copy = _copy(
        tmp_path,
        {"plan/store.py": "def _peek() -> None:\n    import olmoablate.run.state  # noqa: F401\n"},
    )
    text = (out := _lint(copy, "pipeline")).stdout + out.stderr
    assert out.returncode == 1, text
    assert "olmoablate.plan is not allowed to import olmoablate.run" in text
    assert "olmoablate.plan.store -> olmoablate.run.state (l." in text


def test_login_node_commands_stay_light(tmp_path: Path) -> None:
    """pandas reached from `validate`'s module, or torch from `status`'s, breaks the login-node
    contract; torch reached from the launcher side of run/ breaks torch-only-in-the-job."""
    copy = _copy(
        tmp_path,
        {
            "plan/validate.py": "def _frame() -> None:\n    import pandas  # noqa: F401\n",
            "run/state.py": "def _late() -> None:\n    import torch  # noqa: F401\n",
        },
    )
    text = (out := _lint(copy, "login-node", "torch-only-in-the-job")).stdout + out.stderr
    assert out.returncode == 1, text
    assert "olmoablate.plan.validate -> pandas" in text
    assert "olmoablate.run.state -> torch" in text  # status (run.launch) reaches run.state
    assert text.count("BROKEN") == 2, text


def test_report_stack_is_enforced(tmp_path: Path) -> None:
    """Reading a results folder never depends on the gate's decision."""
    copy = _copy(
        tmp_path,
        {
            "report/collect.py": "def _peek() -> None:\n    import olmoablate.report.verdict  # noqa: F401\n"
        },
    )
    text = (out := _lint(copy, "report-stack")).stdout + out.stderr
    assert out.returncode == 1, text
    assert "olmoablate.report.collect -> olmoablate.report.verdict (l." in text


def test_the_product_may_not_import_the_test_support(tmp_path: Path) -> None:
    """olmoablate.testing (synthetic results, tiny plans) is for tests/ and bench/ only: a lazy
    import of it from a stage breaks both the forbidden contract and the top layer."""
    copy = _copy(
        tmp_path,
        {
            "report/__init__.py": "def _fake() -> None:\n    import olmoablate.testing.synthetic  # noqa: F401\n"
        },
    )
    out = _lint(copy, "testing-not-in-product", "pipeline")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "olmoablate.report is not allowed to import olmoablate.testing" in text
    assert "olmoablate.report -> olmoablate.testing.synthetic (l." in text
