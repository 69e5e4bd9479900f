"""Spec loading and validation: every class of mistake gives `FILE:LINE: field: message`, exit 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from olmoablate.plan.load import SpecError, load_spec
from olmoablate.testing import MINIMAL_SPEC, REPO, TESTS

BAD = sorted((TESTS / "specs" / "bad").glob("*.yaml"))
LINE_RE = re.compile(r"^(?P<file>[^:]+\.ya?ml):(?P<line>\d+): (?P<field>[^:]+): (?P<msg>.+)$")


def _expected_field(path: Path) -> str:
    first = path.read_bytes().splitlines()[0].decode()
    assert first.startswith("# expect-field: "), path
    return first.removeprefix("# expect-field: ").strip()


def test_corpus_is_large_enough() -> None:
    assert len(BAD) >= 30


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_spec_names_file_line_and_field(path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    problems = info.value.problems
    assert problems, "a SpecError must carry at least one problem"
    expected = _expected_field(path)
    assert expected in [p.field for p in problems], [str(p) for p in problems]
    text_lines = path.read_bytes().splitlines()
    for p in problems:
        assert 1 <= p.line <= max(1, len(text_lines))
        assert LINE_RE.match(str(p)), str(p)


def test_bad_line_points_at_the_field() -> None:
    """The reported line is where the offending key is written, not the top of the file."""
    path = TESTS / "specs" / "bad" / "negative_lr.yaml"
    with pytest.raises(SpecError) as info:
        load_spec(path)
    (problem,) = [p for p in info.value.problems if p.field == "training.optimizer.lr"]
    assert "optimizer" in path.read_text().splitlines()[problem.line - 1]


def test_cli_on_whole_corpus_exit_2_no_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "validate", str(TESTS / "specs" / "bad")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    err_lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    for ln in err_lines:
        assert LINE_RE.match(ln), ln
    reported = {Path(LINE_RE.match(ln)["file"]).name for ln in err_lines}
    assert reported == {p.name for p in BAD}


def test_missing_file_is_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "validate", "does/not/exist.yaml"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "does/not/exist.yaml" in proc.stderr


def test_shipped_and_good_specs_load() -> None:
    for path in [
        *sorted((REPO / "specs").glob("*.yaml")),
        MINIMAL_SPEC,
    ]:
        ls = load_spec(path)
        assert ls.spec.variants and ls.per_size


def test_per_size_values_resolve(tmp_path: Path) -> None:
    text = (MINIMAL_SPEC).read_text()
    text = text.replace("sizes: [tiny]", "sizes: [tiny, tiny2]")
    text = text.replace(
        "custom_sizes:\n",
        "custom_sizes:\n  tiny2: {d_model: 64, n_layers: 4, n_heads: 4, mlp_hidden_size: 192, sliding_window: 32}\n",
    )
    text = text.replace("{lr: 1.0e-3}", "{lr: {tiny: 1.0e-3, default: 2.0e-3}}")
    text = text.replace("tokens: 4096", "tokens: {tiny2: 8192, default: 4096}")
    p = tmp_path / "s.yaml"
    p.write_text(text)
    ls = load_spec(p)
    assert ls.per_size["tiny"].training.optimizer.lr == 1e-3
    assert ls.per_size["tiny2"].training.optimizer.lr == 2e-3
    assert ls.per_size["tiny"].training.tokens == 4096
    assert ls.per_size["tiny2"].training.tokens == 8192


def test_token_counts_with_suffixes() -> None:
    from olmoablate.errors import parse_count, parse_minutes

    assert parse_count("2.5B") == 2_500_000_000
    assert parse_count("100M") == 100_000_000
    assert parse_count(3e9) == 3_000_000_000
    assert parse_minutes("2-00:00:00") == 2880
    assert parse_minutes("01:30:00") == 90
    with pytest.raises(ValueError):
        parse_count("1.5")


def test_data_mix_list_matches_olmo_core() -> None:
    from olmo_core.data import DataMix

    from olmoablate.plan.schema import OLMO_CORE_DATA_MIXES

    assert set(OLMO_CORE_DATA_MIXES) == {m.value for m in DataMix}


DOWNSTREAM_SPEC = """\
name: ds
sizes: [tiny]
custom_sizes:
  tiny: {d_model: 64, n_layers: 8, n_heads: 4, mlp_hidden_size: 192, sliding_window: 32}
variants:
  v: {depth_attention: {stride: 2}}
training:
  sequence_length: 64
  tokens: 4096
  global_batch_size: 256
  optimizer: {lr: 1.0e-3}
  data: {paths: [x.bin]}
evaluation:
  downstream: [TASKS]
topology: {gpus_per_node: 0}
"""


def test_downstream_without_eval_extra_uses_the_shipped_task_list(tmp_path: Path) -> None:
    """The light CI install (no ai2-olmo-eval): names are checked against the shipped list.

    `sys.modules[name] = None` is Python's own way to make a package absent."""
    code = (
        "import sys; sys.modules['olmo_eval'] = None; sys.argv = ['olmoablate', 'validate', sys.argv[1]];"
        "from olmoablate.cli import main; main()"
    )
    for tasks, rc in (("piqa, hellaswag", 0), ("piqa, hellaswagg", 2)):
        spec = tmp_path / "ds.yaml"
        spec.write_text(DOWNSTREAM_SPEC.replace("TASKS", tasks))
        proc = subprocess.run(
            [sys.executable, "-c", code, str(spec)], capture_output=True, text=True, cwd=REPO
        )
        assert proc.returncode == rc, proc.stderr
        if rc:
            (line,) = proc.stderr.strip().splitlines()
            assert line.startswith(f"{spec}:14: evaluation.downstream[1]: unknown downstream task")
            assert "'hellaswagg'" in line and "hellaswag" in line


def test_downstream_task_names_checked_against_olmo_eval(tmp_path: Path) -> None:
    from olmoablate.plan import checks as downstream

    assert {"piqa", "hellaswag", "arc_easy"} <= set(downstream.known_tasks())
    good = tmp_path / "good.yaml"
    good.write_text(DOWNSTREAM_SPEC.replace("TASKS", "piqa, hellaswag"))
    load_spec(good)
    bad = tmp_path / "bad.yaml"
    bad.write_text(DOWNSTREAM_SPEC.replace("TASKS", "piqa, hellaswagg"))
    with pytest.raises(SpecError) as info:
        load_spec(bad)
    assert [p.field for p in info.value.problems] == ["evaluation.downstream[1]"]


def test_compile_per_size_and_in_the_plan(tmp_path: Path) -> None:
    from olmoablate.plan.expand import build_plan

    text = (MINIMAL_SPEC).read_text()
    p = tmp_path / "s.yaml"
    p.write_text(text)
    assert load_spec(p).per_size["tiny"].training.compile == "auto"  # the one default
    p.write_text(text.replace("tokens: 4096", "tokens: 4096\n  compile: {tiny: false}"))
    ls = load_spec(p)
    assert ls.per_size["tiny"].training.compile is False
    runs = build_plan(ls).as_json()["runs"]
    assert {r["training"]["compile"] for r in runs} == {False}
    # true on this CPU topology is a request the job cannot honour (issue 27): refused
    p.write_text(text.replace("tokens: 4096", "tokens: 4096\n  compile: {tiny: true}"))
    with pytest.raises(SpecError, match=r"training\.compile.*needs CUDA GPUs"):
        load_spec(p)
