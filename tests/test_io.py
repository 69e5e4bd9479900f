"""olmoablate/io.py: atomic writes and the best-effort user cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmoablate.io import user_cache_get, user_cache_path, user_cache_put, write_json_atomic


def test_user_cache_round_trip_and_keeps_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert user_cache_path("c.json") == tmp_path / "olmoablate" / "c.json"
    assert user_cache_get("c.json", "a") is None
    for i in range(5):
        user_cache_put("c.json", f"k{i}", {"i": i}, keep=3)
    assert [user_cache_get("c.json", f"k{i}") for i in range(5)] == [
        None,
        None,
        {"i": 2},
        {"i": 3},
        {"i": 4},
    ]
    user_cache_put("c.json", "k2", {"i": 22}, keep=3)  # re-put moves a key to the newest end
    user_cache_put("c.json", "k5", {"i": 5}, keep=3)
    assert list(json.loads(user_cache_path("c.json").read_text())) == ["k4", "k2", "k5"]


def test_user_cache_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file where the folder should be
    user_cache_put("c.json", "k", 1)
    assert user_cache_get("c.json", "k") is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "ok"))
    write_json_atomic(user_cache_path("c.json"), ["not", "a", "mapping"])
    assert user_cache_get("c.json", "k") is None
    user_cache_put("c.json", "k", 1)
    assert user_cache_get("c.json", "k") == 1
