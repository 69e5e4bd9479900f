"""Tests of olmoablate.run.columnar: the job's Arrow copy of metrics.jsonl reads back exactly what
parsing the JSON gives, follows appends, and is ignored as soon as it no longer matches."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from olmoablate.run import columnar
from olmoablate.run.metricsfile import Metrics, read_metrics
from olmoablate.testing import REPO


def _rows(lo: int, hi: int) -> str:
    out = []
    for s in range(lo, hi):
        row = {"step": s, "tokens": 64 * s, "train/CE loss": 5.0 - s / 1000, "step_time_s": 0.1}
        if s % 50 == 0:
            row["eval/lm/x/CE loss"] = 4.0 + s / 3
        if s == 7:
            row["train/CE loss"] = float("nan")
        out.append(json.dumps(row))
    return "\n".join(out) + "\n"


def _same(a: Metrics, b: Metrics) -> None:
    np.testing.assert_array_equal(a.steps, b.steps)
    assert sorted(a.columns) == sorted(b.columns)
    for k in a.columns:
        np.testing.assert_array_equal(a.columns[k], b.columns[k])  # NaN == NaN here
    assert (a.issues, a.rows_read, a.duplicate_rows, a.nonfinite) == (
        b.issues,
        b.rows_read,
        b.duplicate_rows,
        b.nonfinite,
    )


def _from_copy(path: Path, want=None) -> Metrics:  # noqa: ANN001
    loaded = columnar.load_copy(path, want)
    assert loaded is not None
    return loaded[0]


def test_copy_reads_back_the_parse_and_only_wanted_columns(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    # a requeue duplicate, a malformed line and a NaN: the copy carries the parse's issues
    path.write_text(_rows(1, 600) + _rows(590, 592) + "{not json\n" + _rows(592, 700))
    assert columnar.update_copy(path) == tmp_path / "metrics.arrow"
    _same(_from_copy(path), read_metrics(path))
    want = lambda k: k == "train/CE loss"  # noqa: E731
    part = _from_copy(path, want)
    assert list(part.columns) == ["train/CE loss"]
    _same(part, read_metrics(path, want))


def test_incremental_updates_equal_a_full_parse(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(_rows(1, 300))
    columnar.update_copy(path)
    with path.open("a") as fh:
        fh.write(_rows(300, 650))
        fh.write('{"step": 650, "tokens"')  # a line being written: not covered yet
    columnar.update_copy(path)
    body, offset, lines = columnar.load_copy(path)  # type: ignore[misc]
    assert lines == 649 and offset == path.stat().st_size - len('{"step": 650, "tokens"')
    full = read_metrics(tmp_path / "metrics.jsonl")
    np.testing.assert_array_equal(body.steps, full.steps)
    np.testing.assert_array_equal(body.columns["train/CE loss"], full.columns["train/CE loss"])


def test_a_rewritten_or_foreign_file_makes_the_copy_stale(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(_rows(1, 400))
    columnar.update_copy(path)
    # a resumed job rewrites the file: shorter than the copy's offset
    path.write_text(_rows(1, 100))
    assert columnar.load_copy(path) is None
    # same length, other content (the probe catches it)
    columnar.update_copy(path)
    text = path.read_text().replace('"tokens": 6336', '"tokens": 6337')
    path.write_text(text)
    assert columnar.load_copy(path) is None
    columnar.update_copy(path)  # rebuilt from the whole file
    _same(_from_copy(path), read_metrics(path))
    # an unreadable copy is ignored, not an error
    (tmp_path / "metrics.arrow").write_bytes(b"garbage")
    assert columnar.load_copy(path) is None
    columnar.remove_copy(path)
    assert not (tmp_path / "metrics.arrow").exists() and columnar.load_copy(path) is None
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_collect_from_copies_equals_collect_from_json(tmp_path: Path) -> None:
    from olmoablate.report.collect import collect
    from olmoablate.testing.synthetic import ArmTruth, SynthSpec, write_plan, write_run

    spec = SynthSpec(steps=300, eval_interval=30)
    root = tmp_path / "r"
    plan = write_plan(root, spec)
    for e in plan["runs"]:
        write_run(root, spec, e, ArmTruth(duplicate_steps=(100,)))
    plain = collect(root, use_cache=False)
    for e in plan["runs"]:
        columnar.update_copy(root / "runs" / e["run_id"] / "metrics.jsonl")
        with (root / "runs" / e["run_id"] / "metrics.jsonl").open("a") as fh:
            fh.write("")  # nothing appended: the copy covers the whole file
    fast = collect(root, use_cache=True)
    for rid, rd in plain.runs.items():
        assert rd.metrics is not None and fast.runs[rid].metrics is not None
        _same(fast.runs[rid].metrics, rd.metrics)


def test_collect_really_starts_from_the_copy(tmp_path: Path) -> None:
    """An edit in the middle of the file (outside the probed 4 KiB ends) is not seen through a
    valid copy: proof that the cold report read the copy, not the JSON."""
    from olmoablate.report.collect import collect
    from olmoablate.testing.synthetic import ArmTruth, SynthSpec, write_plan, write_run

    spec = SynthSpec(steps=400, eval_interval=40)
    root = tmp_path / "r"
    plan = write_plan(root, spec)
    for e in plan["runs"]:
        write_run(root, spec, e, ArmTruth())
    rid = plan["runs"][0]["run_id"]
    path = root / "runs" / rid / "metrics.jsonl"
    columnar.update_copy(path)
    lines = path.read_text().splitlines(keepends=True)
    row = json.loads(lines[200])
    old = row["tokens"]
    lines[200] = lines[200].replace(f'"tokens": {old}', f'"tokens": {old + 1}', 1)
    path.write_text("".join(lines))
    step = row["step"]
    fast = collect(root, use_cache=True).runs[rid].metrics
    plain = collect(root, use_cache=False).runs[rid].metrics
    assert fast is not None and plain is not None
    i = int(np.searchsorted(plain.steps, step))
    assert plain.columns["tokens"][i] == old + 1 and fast.columns["tokens"][i] == old


def test_columns_come_back_as_to_numpy_would_give_them() -> None:
    """The copy's columns are read straight from pyarrow's buffers (to_numpy imports pandas):
    sliced and multi-chunk columns, nulls and other types give what to_numpy gives."""
    import pyarrow as pa

    cases = [
        pa.chunked_array([pa.array([1.0, 2.0, 3.0]).slice(1), pa.array([4.0, -0.0])]),
        pa.chunked_array([pa.array(np.arange(5, dtype=np.int64)).slice(2)]),
        pa.chunked_array([pa.array([1.0, None, 3.0])]),
        pa.chunked_array([pa.array([1, 2], type=pa.int32())]),
        pa.chunked_array([], type=pa.float64()),
    ]
    for col in cases:
        got, want = columnar._numpy(col), col.to_numpy()
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_report_without_pyarrow(tmp_path: Path) -> None:
    """pyarrow made unimportable for real (a package that raises ImportError shadows it): the
    job's copy is skipped and a cold report still runs, no traceback."""
    import os
    import subprocess
    import sys

    from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results

    shadow = tmp_path / "shadow" / "pyarrow"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('pyarrow removed for this test')\n")
    make_results(tmp_path / "results" / "synth", SynthSpec(), {"sn_da": ArmTruth(offset=0.0)})
    repo = REPO
    env = {**os.environ, "PYTHONPATH": f"{shadow.parent}{os.pathsep}{repo}"}
    code = (
        "from olmoablate.run import columnar; assert not columnar.available(); "
        "import sys; assert columnar.update_copy(sys.argv[1]) is None"
    )
    metrics = next((tmp_path / "results" / "synth" / "runs").glob("*/metrics.jsonl"))
    subprocess.run([sys.executable, "-c", code, str(metrics)], env=env, check=True)
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "report", "synth", "--format", "json", "--no-cache"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "gate verdict:" in proc.stdout
