"""The metrics store (report/metrics_store.py): one cache per run, the columnar copy
``metrics.arrow``; every answer equals a parse of the whole file, through misses, hits,
appends, rewrites, torn last lines and read-only folders."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from olmoablate.report import collect as store
from olmoablate.run import columnar
from olmoablate.run.metricsfile import Metrics, read_metrics


def _rows(lo: int, hi: int, **extra: float) -> str:
    out = []
    for s in range(lo, hi):
        row = {"step": s, "tokens": 64 * s, "train/CE loss": 5.0 - s / 1000, **extra}
        if s % 25 == 0:
            row["eval/x/CE loss"] = 4.0 + s / 3
        out.append(json.dumps(row))
    return "\n".join(out) + "\n"


def _same(a: Metrics, b: Metrics) -> None:
    np.testing.assert_array_equal(a.steps, b.steps)
    assert sorted(a.columns) == sorted(b.columns)
    for k in a.columns:
        np.testing.assert_array_equal(a.columns[k], b.columns[k])
    assert (a.rows_read, a.duplicate_rows, a.nonfinite) == (
        b.rows_read,
        b.duplicate_rows,
        b.nonfinite,
    )
    assert sorted(a.issues) == sorted(b.issues)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the store rebuilt a copy (a full parse of the file)."""
    calls = {"refresh": 0}
    real = columnar.refresh

    def counting(path: str | Path) -> object:
        calls["refresh"] += 1
        return real(path)

    monkeypatch.setattr(columnar, "refresh", counting)
    return calls


def _load(path: Path, want: store.Want | None = None) -> Metrics:
    got = store.load_run(path, want)
    _same(got, read_metrics(path, want))  # every answer equals a parse from scratch
    return got


def test_miss_hit_append_rewrite(tmp_path: Path, counted: dict[str, int]) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(_rows(1, 400))
    want = store.wanted(("train/CE loss",), ("eval/",))
    _load(path, want)
    assert counted["refresh"] == 1 and columnar.copy_path(path).is_file()  # miss: copy written
    assert not (tmp_path / ".report-cache").exists()  # the one cache is the copy
    _load(path, want)
    _load(path)  # other keys come from the same copy: it holds every key
    assert counted["refresh"] == 1  # hits
    with path.open("a") as fh:
        fh.write(_rows(400, 450, **{"optim/LR": 0.1}))
    _load(path, want)
    _load(path)
    assert counted["refresh"] == 1  # a small append is parsed on top of the copy, not stored
    assert columnar.load_copy(path)[1] < path.stat().st_size  # type: ignore[index]
    # a resumed job rewrites the file atomically (a new inode, fewer rows): the copy is stale
    tmp = path.with_suffix(".tmp")
    tmp.write_text(_rows(1, 200))
    os.replace(tmp, path)
    got = _load(path, want)
    assert counted["refresh"] == 2 and got.steps[-1] == 199
    # rewritten in place with other content: the probe catches it
    text = path.read_text().replace('"train/CE loss": 4.99', '"train/CE loss": 1.99', 1)
    path.write_text(text)
    _load(path, want)
    assert counted["refresh"] == 3


def test_large_appends_refresh_the_copy(
    tmp_path: Path, counted: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(_rows(1, 100))
    _load(path)
    monkeypatch.setattr(store, "REFRESH_ROWS", 50)
    with path.open("a") as fh:
        fh.write(_rows(100, 120))  # under the (patched) limit: parsed on top of the copy
    _load(path)
    assert counted["refresh"] == 1
    with path.open("a") as fh:
        fh.write(_rows(120, 200))  # over it: the copy is brought up to date
    _load(path)
    assert counted["refresh"] == 2
    assert columnar.load_copy(path)[1] == path.stat().st_size  # type: ignore[index]


def test_partial_last_line_is_read_but_never_stored(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(_rows(1, 50) + '{"step": 50, "tokens": 3200, "train/CE loss": 4.9}')
    got = _load(path)
    assert got.steps[-1] == 50  # a complete object without its newline counts
    body, offset, _ = columnar.load_copy(path)  # type: ignore[misc]
    assert body.steps[-1] == 49 and offset == path.read_bytes().rfind(b"\n") + 1
    with path.open("a") as fh:
        fh.write('\n{"step": 51, "tok')  # the writer is in the middle of a row
    got = _load(path)
    assert got.steps[-1] == 50 and any("truncated last line" in i for i in got.issues)
    with path.open("a") as fh:
        fh.write('ens": 3264, "train/CE loss": 4.8}\n')
    assert _load(path).steps[-1] == 51


def test_overlapping_append_is_parsed_in_full(tmp_path: Path, counted: dict[str, int]) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(_rows(1, 100))
    _load(path)
    with path.open("a") as fh:
        fh.write(_rows(90, 110))  # a requeued job re-logged steps 90..99
    got = _load(path)
    assert counted["refresh"] == 2 and got.duplicate_rows == 10


def test_unwritable_copy_is_parsed_each_time(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A read-only results copy (or one on a full disk) still gets exact answers, no copy."""
    path = tmp_path / "metrics.jsonl"
    path.write_text(_rows(1, 100))

    def denied(*a, **k):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(columnar, "_write", denied)
    _load(path)
    _load(path, store.wanted(("train/CE loss",), ()))
    assert not columnar.copy_path(path).exists()


def test_copy_of_a_replaced_file_is_not_written(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The file is replaced (a resumed job) between the parse and the copy's write: no copy,
    since its probe would vouch for the new file with the old rows."""
    path = tmp_path / "metrics.jsonl"
    path.write_text(_rows(1, 100))
    real = columnar.read_part

    def replacing(*a, **k):  # type: ignore[no-untyped-def]
        part = real(*a, **k)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(_rows(1, 100).replace("5.0", "6.0"))
        os.replace(tmp, path)
        return part

    monkeypatch.setattr(columnar, "read_part", replacing)
    columnar.refresh(path)
    assert not columnar.copy_path(path).exists()


def test_no_cache_parses_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(_rows(1, 100))
    jobs: list[store.Job] = [("r", path, ("train/CE loss",), ())]
    got = store.load_metrics_many(jobs, use_cache=False)["r"]
    assert list(got.columns) == ["train/CE loss"] and not columnar.copy_path(path).exists()
    cached = store.load_metrics_many(jobs, use_cache=True)["r"]
    _same(cached, got)
    assert columnar.copy_path(path).exists()


def test_an_older_release_copy_seeds_the_new_one(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A results folder of the release before the store has the job's zstd metrics.parquet:
    the first read starts the new copy from it (parsing only the rows after it), not from a
    parse of the whole JSON; a legacy copy that no longer matches the file is ignored."""
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    path = tmp_path / "metrics.jsonl"
    path.write_text(_rows(1, 300))
    columnar.update_copy(path)
    with ipc.open_file(str(columnar.copy_path(path))) as reader:
        table = reader.read_all()
    meta = json.loads(table.schema.metadata[b"olmoablate"])
    meta["version"] = 1
    table = table.replace_schema_metadata({b"olmoablate": json.dumps(meta).encode()})
    pq.write_table(table, tmp_path / "metrics.parquet", compression="zstd")
    columnar.copy_path(path).unlink()
    with path.open("a") as fh:
        fh.write(_rows(300, 320))
    starts: list[int] = []
    real = columnar.read_part

    def recording(p, want, start=0, first_line=0):  # type: ignore[no-untyped-def]
        starts.append(start)
        return real(p, want, start, first_line)

    monkeypatch.setattr(columnar, "read_part", recording)
    _load(path)
    assert starts == [meta["offset"]]  # only the appended rows were parsed
    assert columnar.load_copy(path)[1] == path.stat().st_size  # type: ignore[index]
    # a legacy copy of another file is not used
    columnar.copy_path(path).unlink()
    path.write_text(_rows(1, 100))
    starts.clear()
    _load(path)
    assert starts == [0]
