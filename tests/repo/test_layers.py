"""The layering is a checked rule, not a convention (issue 13, item 5).

`lint-imports` checks the contracts in pyproject.toml ([tool.importlinter]): cli/results on top,
the stages as independent siblings, models below train only, the contract, then the base modules;
torch/OLMo-core only under train and models; no pandas/matplotlib on the validate/plan/status
paths; no cycles. The cycle test repeats the last rule with grimp (import-linter's own graph
library) so a failure names the modules and lines. The mutation test proves the contracts are
wired to the right modules: a lazy `import torch` inside a function of the spec stage, or a
stage importing another stage, breaks them.
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


def test_contracts_catch_lazy_and_cross_stage_imports(tmp_path: Path) -> None:
    shutil.copytree(
        REPO / "olmoablate",
        tmp_path / "olmoablate",
        ignore=lambda _d, names: [n for n in names if n.endswith((".json", ".txt", ".pyc"))],
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    # package __init__ files: they exist whatever the stages' modules are called
    with (tmp_path / "olmoablate" / "spec" / "__init__.py").open("a") as f:
        f.write("\n\ndef _late() -> None:\n    import torch  # noqa: F401\n")
    with (tmp_path / "olmoablate" / "launch" / "__init__.py").open("a") as f:
        f.write("\n\ndef _peek() -> None:\n    import olmoablate.report  # noqa: F401\n")
    out = _lint(tmp_path, "no-torch", "layers")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "olmoablate.plan -> torch" in text
    assert "olmoablate.run is not allowed to import olmoablate.report" in text
    assert "- olmoablate.run -> olmoablate.report (l." in text


def test_the_product_may_not_import_the_test_support(tmp_path: Path) -> None:
    """olmoablate.testing (synthetic results, tiny plans) is for tests/ and bench/ only: a lazy
    import of it from a stage breaks both the forbidden contract and the top layer."""
    shutil.copytree(
        REPO / "olmoablate",
        tmp_path / "olmoablate",
        ignore=lambda _d, names: [n for n in names if n.endswith((".json", ".txt", ".pyc"))],
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / "olmoablate" / "report" / "__init__.py").open("a") as f:
        f.write("\n\ndef _fake() -> None:\n    import olmoablate.testing.synthetic  # noqa: F401\n")
    out = _lint(tmp_path, "testing-not-in-product", "layers")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "olmoablate.report is not allowed to import olmoablate.testing" in text
    assert "olmoablate.report -> olmoablate.testing.synthetic (l." in text
