"""olmoablate/io.py: the best-effort user cache (one file per key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmoablate.io import user_cache_get, user_cache_path, user_cache_put, write_json_atomic


def test_user_cache_round_trip_and_keeps_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert user_cache_path("c") == tmp_path / "olmoablate" / "c"
    assert user_cache_get("c", "a") is None
    for i in range(5):
        user_cache_put("c", f"k{i}", {"i": i}, keep=3)
    assert [user_cache_get("c", f"k{i}") for i in range(5)] == [
        None,
        None,
        {"i": 2},
        {"i": 3},
        {"i": 4},
    ]
    user_cache_put("c", "k2", {"i": 22}, keep=3)  # re-put moves a key to the newest end
    user_cache_put("c", "k5", {"i": 5}, keep=3)
    assert {k: user_cache_get("c", k) for k in ("k3", "k4", "k2", "k5")} == {
        "k3": None,
        "k4": {"i": 4},
        "k2": {"i": 22},
        "k5": {"i": 5},
    }
    assert len(list(user_cache_path("c").glob("*.json"))) == 3  # one small file per key


def test_user_cache_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file where the folder should be
    user_cache_put("c", "k", 1)
    assert user_cache_get("c", "k") is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "ok"))
    user_cache_put("c", "k", 1)
    assert user_cache_get("c", "k") == 1
    (entry,) = user_cache_path("c").glob("*.json")
    write_json_atomic(entry, ["not", "a", "mapping"])
    assert user_cache_get("c", "k") is None
    write_json_atomic(entry, {"key": "another key", "value": 2})  # a hash collision is a miss
    assert user_cache_get("c", "k") is None
