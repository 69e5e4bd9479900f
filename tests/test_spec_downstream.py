"""spec/downstream.py: the task list read from olmo_eval's source, cached per version of it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from olmoablate.spec import downstream


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
