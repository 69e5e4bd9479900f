"""Each cross-stage file name and each metric name is spelled once in the product (issue 22).

The scan reads the package's source (docstrings and comments aside): a file name such as
``status.json`` appears only in :mod:`olmoablate.plan.names`, a metric name such as
``step_time_s`` only in :mod:`olmoablate.plan.metrics`; every other module imports them.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import olmoablate
from olmoablate.plan import metrics
from olmoablate.plan import names as filenames

PACKAGE = Path(olmoablate.__file__).parent


def _constants(module: object) -> dict[str, str]:
    return {
        k: v for k, v in vars(module).items() if k.isupper() and isinstance(v, str) and v.strip()
    }


def _literals(values: set[str]) -> dict[str, list[str]]:
    """Where each of ``values`` is a string literal in the product (not test support)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("testing/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in values and id(node) not in docs:
                found[node.value].append(f"{rel}:{node.lineno}")
    return found


def test_each_file_name_is_spelled_once() -> None:
    verdicts = {filenames.PROCEED, filenames.STOP, filenames.INCONCLUSIVE}  # words, not files
    names = {k: v for k, v in _constants(filenames).items() if v not in verdicts}
    assert len(set(names.values())) == len(names), "two constants name the same file"
    found = _literals(set(names.values()))
    for value in names.values():
        assert found[value] == [f for f in found[value] if f.startswith("plan/names.py")]
        assert len(found[value]) == 1, (value, found[value])


def test_each_metric_name_is_spelled_once() -> None:
    """The logged metric keys (``train/CE loss``, ``system/peak memory ...``) and the job's own
    timing columns. Names that are also ordinary words or model fields (``tokens``,
    ``peak_memory_gb`` of summary.json and the plan's estimate) are not scanned: a literal there
    may name the field, not the metric."""
    names = {
        k: v
        for k, v in _constants(metrics).items()
        if not k.endswith("_PREFIX") and ("/" in v or v.startswith("step_"))
    }
    assert {"step_time_s", "step_cpu_time_s", "step_in_attempt", "train/CE loss"} <= set(
        names.values()
    )
    found = _literals(set(names.values()))
    odd = {
        v: w for v, w in found.items() if any(not f.startswith("plan/metrics.py") for f in w)
    }
    assert not odd, odd
