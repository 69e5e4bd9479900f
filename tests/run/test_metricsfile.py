"""The fast metrics.jsonl reader agrees with json.loads and survives damaged files."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np

from olmoablate.run.metricsfile import read_metrics


def _reference(lines: list[str]) -> dict[str, dict[int, float]]:
    """json.loads per line, per-key last-row-wins by step: the contract the fast path must meet."""
    out: dict[str, dict[int, float]] = {}
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or not isinstance(row.get("step"), int | float):
            continue
        for k, v in row.items():
            if k != "step" and isinstance(v, int | float) and not isinstance(v, bool):
                out.setdefault(k, {})[int(row["step"])] = float(v)
    return out


def _check_equal(path: Path, lines: list[str]) -> None:
    m = read_metrics(path)
    ref = _reference(lines)
    assert set(m.columns) == set(ref), set(m.columns) ^ set(ref)
    for key, by_step in ref.items():
        col = m.columns[key]
        got = {
            int(s): float(v)
            for s, v in zip(m.steps, col, strict=True)
            if not math.isnan(v) or key in ref
        }
        for s, v in by_step.items():
            g = got[s]
            assert (math.isnan(v) and math.isnan(g)) or g == v, (key, s, g, v)


def _rows(n: int, rng: random.Random) -> list[str]:
    lines = []
    for s in range(1, n + 1):
        row = {
            "step": s,
            "tokens": s * 2048,
            "train/CE loss": rng.uniform(2, 11),
            "optim/LR (group 0)": 3e-3 * min(1.0, s / 10) * rng.random(),
            "optim/total grad norm": rng.lognormvariate(0, 2),
            "neg": -rng.random() * 10 ** rng.randint(-30, 30),
            "big": float(rng.randint(0, 10**18)),
            "optim/step skipped": 0.0,  # a constant column
        }
        if s % 97 == 0:
            row["train/CE loss"] = math.nan
        if s % 101 == 0:
            row["optim/total grad norm"] = math.inf if s % 2 else -math.inf
        if s % 50 == 0:
            row["eval/lm/x/CE loss"] = rng.uniform(2, 4)
        lines.append(json.dumps(row))
    return lines


def test_fast_path_matches_json_exactly(tmp_path: Path) -> None:
    lines = _rows(3000, random.Random(0))
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(lines) + "\n")
    _check_equal(p, lines)
    m = read_metrics(p)
    assert len(m) == 3000 and m.issues == [] and m.duplicate_rows == 0
    assert m.nonfinite["train/CE loss"] == 3000 // 97
    # eval rows: NaN where a row lacks the key
    assert np.isfinite(m.columns["eval/lm/x/CE loss"]).sum() == 60


def test_mixed_key_orders_strings_nested_and_escapes(tmp_path: Path) -> None:
    rng = random.Random(1)
    lines = _rows(700, rng)
    extra = []
    for s in range(701, 1401):
        r = {"tokens": s * 2048, "step": s, "train/CE loss": rng.random()}  # other key order
        if s % 3 == 0:
            r["note"] = 'a "quoted": string'  # string value with quotes and a colon
        if s % 5 == 0:
            r["nested"] = {"inner": 1.0}
        if s % 7 == 0:
            r['weird "key"'] = 1.5
        extra.append(json.dumps(r))
    lines += extra
    p = tmp_path / "m.jsonl"
    p.write_text("\r\n".join(lines) + "\r\n")  # CRLF too
    _check_equal(p, lines)


def test_requeue_duplicates_last_row_wins(tmp_path: Path) -> None:
    rows = [{"step": s, "tokens": s * 10, "train/CE loss": float(s)} for s in range(1, 601)]
    # the attempt before a requeue had logged steps 401..450 with other values; the resumed
    # attempt appended them again
    stale = [{"step": s, "tokens": s * 10, "train/CE loss": -1.0} for s in range(401, 451)]
    lines = [json.dumps(r) for r in rows[:450]] + [json.dumps(r) for r in stale]
    lines = (
        [json.dumps(r) for r in rows[:400]]
        + [json.dumps(r) for r in stale]
        + [json.dumps(r) for r in rows[400:]]
    )
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(lines) + "\n")
    m = read_metrics(p)
    assert len(m) == 600  # counted once
    assert m.duplicate_rows == 50
    assert np.array_equal(m.columns["train/CE loss"], np.arange(1, 601, dtype=float))
    assert any("duplicate step rows" in i for i in m.issues)


def test_truncated_last_line_and_malformed_middle_line(tmp_path: Path) -> None:
    lines = [json.dumps({"step": s, "train/CE loss": 1.0 / s}) for s in range(1, 401)]
    lines[10] = '{"step": 11, "train/CE loss": 0.09'  # torn line in the middle
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(lines) + "\n" + '{"step": 401, "train/CE lo')
    m = read_metrics(p)
    assert len(m) == 399
    assert 11 not in m.steps.tolist() and 401 not in m.steps.tolist()
    assert any("truncated last line" in i for i in m.issues)
    assert any("malformed line" in i and "line 11" in i for i in m.issues)


def test_complete_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1, "train/CE loss": 2.0}\n{"step": 2, "train/CE loss": 1.5}')
    m = read_metrics(p)
    assert m.steps.tolist() == [1, 2] and m.issues == []


def test_want_filter_reads_only_needed_columns(tmp_path: Path) -> None:
    lines = _rows(600, random.Random(2))
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(lines) + "\n")
    m = read_metrics(p, lambda k: k == "train/CE loss" or k.startswith("eval/"))
    assert set(m.columns) == {"train/CE loss", "eval/lm/x/CE loss"}


def test_empty_and_blank_files(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text("")
    assert len(read_metrics(p)) == 0
    p.write_text("\n\n")
    m = read_metrics(p)
    assert len(m) == 0 and m.issues == []


def test_large_uniform_files_take_the_vectorised_path(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import olmoablate.run.metricsfile as mod

    calls = {"n": 0}
    real = mod.json.loads

    def counting(text: object) -> object:
        calls["n"] += 1
        return real(text)  # type: ignore[arg-type]

    monkeypatch.setattr(mod.json, "loads", counting)
    lines = _rows(5000, random.Random(3))
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(lines) + "\n")
    m = read_metrics(p)
    assert len(m) == 5000
    assert calls["n"] < 200  # eval rows (100) + representatives, not 5000 lines


def _same(a, b) -> None:  # type: ignore[no-untyped-def]
    """Two Metrics hold exactly the same numbers (NaN where NaN) and the same bookkeeping."""
    assert a.steps.tolist() == b.steps.tolist()
    assert set(a.columns) == set(b.columns)
    for k in a.columns:
        assert np.array_equal(a.columns[k], b.columns[k], equal_nan=True), k
    assert a.nonfinite == b.nonfinite
    assert (a.rows_read, a.duplicate_rows) == (b.rows_read, b.duplicate_rows)
    assert sorted(a.issues) == sorted(b.issues)


def test_parts_appended_equal_the_full_parse(tmp_path: Path) -> None:
    """Parsing a file in two parts (the incremental cache's path) gives the full parse's
    numbers at every split, or None where only a full parse is exact (a step repeated across
    the split: per-key last-row-wins)."""
    from olmoablate.run.metricsfile import append, read_part

    lines = _rows(700, random.Random(4))  # NaN / +-Infinity values, eval rows, constant column
    lines[100] = lines[100][:40]  # torn lines in the middle
    lines[300] = lines[300][:40]
    for at, steps in ((503, (500, 501)), (203, (200,))):  # requeue duplicates: resumed rows last
        stale = [json.dumps({"step": s, "tokens": 1, "train/CE loss": -1.0}) for s in steps]
        lines[at:at] = stale
    text = "\n".join(lines) + "\n" + '{"step": 999, "tokens": 12'  # truncated last line
    full = tmp_path / "growing.jsonl"
    full.write_text(text)
    reference = read_metrics(full)
    assert reference.duplicate_rows == 3 and len(reference.issues) == 3

    def step_of(line: str) -> int | None:
        try:
            return int(json.loads(line)["step"])
        except ValueError:
            return None

    steps = [step_of(line) for line in lines]
    offsets = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    n_exact = n_refused = 0
    for k in [*range(0, len(offsets), 23), 203, 204, 499, 500, 505, 506, len(offsets) - 1]:
        cut = offsets[k]
        growing = tmp_path / "growing.jsonl"  # the same file, read before and after appends
        growing.write_text(text[:cut])
        first = read_part(growing, None)
        assert first.end == cut and first.lines == k and len(first.tail) == 0
        growing.write_text(text)
        rest = read_part(growing, None, start=cut, first_line=first.lines)
        body = append(first.body, rest.body)
        joined = append(body, rest.tail) if body is not None else None
        before = [s for s in steps[:k] if s is not None]
        after = [s for s in steps[k:] if s is not None]
        overlap = bool(before and after and min(after) <= max(before))
        assert (joined is None) == overlap, k  # refused exactly where a step repeats across
        if joined is None:
            n_refused += 1
            continue
        n_exact += 1
        _same(joined, reference)  # numbers and the issues' wording
    assert n_exact > 25 and n_refused >= 2


def test_append_with_a_new_key_and_empty_parts(tmp_path: Path) -> None:
    from olmoablate.run.metricsfile import Metrics, append

    a = Metrics(np.array([1, 2]), {"x": np.array([1.0, np.nan])}, ["a"], 2, 0, {"x": 1})
    b = Metrics(np.array([3]), {"y": np.array([5.0])}, [], 1, 0, {})
    m = append(a, b)
    assert m is not None and m.steps.tolist() == [1, 2, 3]
    assert np.array_equal(m.columns["x"], [1.0, np.nan, np.nan], equal_nan=True)
    assert np.array_equal(m.columns["y"], [np.nan, np.nan, 5.0], equal_nan=True)
    assert m.nonfinite == {"x": 1} and m.rows_read == 3 and m.issues == ["a"]
    empty = Metrics(np.empty(0, np.int64))
    assert append(a, empty) is not None and append(empty, b) is not None
    assert append(b, a) is None  # steps not after the first part's
