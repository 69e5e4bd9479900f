"""Downstream-task availability, checked at `validate` time without importing olmo_eval or torch.

Why: a spec that asks for `hellaswag` must fail in CI when the task name is misspelled or the
tokenizer is missing — not after hours of training. Importing `olmo_eval` would import torch,
which `validate` must not do, so the task list is read from the installed package's source with
`ast` (its `LABEL_TO_TASK_MAP_*` dict literals); where the `eval` extra is not installed (a light
CI install: .github/workflows/validate-specs.yml) the names are checked against the list shipped
for the pinned ai2-olmo-eval (`olmo_eval_tasks.json`, refreshed by scripts/refresh-eval-tasks.py;
tests/spec/test_downstream.py checks it against the real package). The shipped list also holds
each task's metric type, which names the metric suffixes a gate may use.
"""

from __future__ import annotations

import ast
import importlib.util
import json
from functools import lru_cache
from pathlib import Path

from olmoablate.contract.sizes import dolma2_tokenizer_file
from olmoablate.io import user_cache_get, user_cache_put

_REPO = Path(__file__).resolve().parent.parent.parent


def fix_extra_command() -> str:
    """The one command that installs the eval extra (source checkout or installed package)."""
    if (_REPO / "pyproject.toml").is_file() and (_REPO / "olmoablate").is_dir():
        return f"cd {_REPO} && .venv/bin/pip install -e '.[eval]'"
    return "pip install 'olmoablate[eval]'"


FIX_TOKENIZER = "bash scripts/prepare-data.sh"


def eval_extra_location() -> Path | None:
    """Folder of the installed `olmo_eval` package, or None when the extra is not installed."""
    try:
        spec = importlib.util.find_spec("olmo_eval")
    except (ImportError, ValueError):  # ValueError: blocked via sys.modules["olmo_eval"] = None
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


#: User cache folder of the parsed task lists (olmoablate.io.user_cache_path), keyed by tasks.py.
_TASKS_CACHE = "olmo-eval-tasks-v3"


@lru_cache(maxsize=4)
def _tasks_in(tasks_py: Path) -> frozenset[str]:
    """The task labels of ``tasks_py``, parsed once per version of the file.

    Parsing olmo_eval's 100 kB tasks.py takes ~40 ms, a seventh of `validate`'s budget, so the
    result is kept in the user cache keyed by the file's path, size and mtime (a best-effort
    cache: unreadable or stale means parse again; a read-only home just never caches). Keyed per
    file, so two checkouts with their own virtualenvs do not evict each other.
    """
    st = tasks_py.stat()
    key = f"{tasks_py.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    hit = user_cache_get(_TASKS_CACHE, key)
    if isinstance(hit, list):
        return frozenset(str(t) for t in hit)
    names = _parse_tasks(tasks_py)
    user_cache_put(_TASKS_CACHE, key, sorted(names), keep=8)
    return names


def _parse_tasks(tasks_py: Path) -> frozenset[str]:
    tree = ast.parse(tasks_py.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        if not (isinstance(target, ast.Name) and target.id.startswith("LABEL_TO_TASK_MAP")):
            continue
        if isinstance(node.value, ast.Dict):
            for key in node.value.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    names.add(key.value)
    return frozenset(names)


#: The task list of the pinned ai2-olmo-eval, shipped with the package.
SHIPPED_TASKS = Path(__file__).resolve().parent / "olmo_eval_tasks.json"


@lru_cache(maxsize=1)
def shipped() -> tuple[str, dict[str, str]]:
    """(ai2-olmo-eval version, {task label: metric type}) of the shipped list."""
    doc = json.loads(SHIPPED_TASKS.read_text(encoding="utf-8"))
    return str(doc["version"]), {str(k): str(v) for k, v in doc["tasks"].items()}


def installed_tasks() -> frozenset[str] | None:
    """Task labels the installed `olmo_eval` offers (None when the extra is missing)."""
    loc = eval_extra_location()
    if loc is None or not (loc / "tasks.py").is_file():
        return None
    return _tasks_in(loc / "tasks.py")


def known_tasks() -> frozenset[str]:
    """Task labels to check names against: the installed `olmo_eval`'s, else the shipped list."""
    installed = installed_tasks()
    return installed if installed is not None else frozenset(shipped()[1])


def task_source() -> str:
    """Where :func:`known_tasks` came from, for `plan`'s output."""
    if installed_tasks() is not None:
        return "the installed ai2-olmo-eval"
    return f"the task list shipped for ai2-olmo-eval {shipped()[0]} (the eval extra is not installed here; training needs it)"


def metric_type(task: str) -> str | None:
    """The task's ai2-olmo-eval metric type (acc, len_norm, bpb, ...) per the shipped list."""
    return shipped()[1].get(task)


def tokenizer_file() -> Path:
    """The vendored dolma2 tokenizer.json (`olmoablate.contract.sizes.dolma2_tokenizer_file`)."""
    return dolma2_tokenizer_file()


def problems(tasks: list[str]) -> list[tuple[int | None, str]]:
    """[(index of the offending task or None, message)] for a list of requested tasks."""
    if not tasks:
        return []
    out: list[tuple[int | None, str]] = []
    available = known_tasks()
    for i, task in enumerate(tasks):
        if task not in available:
            close = sorted(t for t in available if t.split("_")[0] == task.split("_")[0])[:8]
            hint = f"; similar: {', '.join(close)}" if close else ""
            out.append(
                (i, f"unknown downstream task {task!r} (not in olmo_eval's task list{hint})")
            )
    if not tokenizer_file().is_file():
        out.append(
            (
                None,
                f"downstream tasks need the dolma2 tokenizer file {tokenizer_file()} (fix: {FIX_TOKENIZER})",
            )
        )
    return out
