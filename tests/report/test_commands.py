"""`olmoablate report` through the real console script: exit codes, output, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "olmoablate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_report_by_name_prints_verdict_last(tmp_path: Path) -> None:
    make_results(
        tmp_path / "results" / "synth",
        SynthSpec(
            gate={
                "metric": "eval/lm/demo-heldout/CE loss",
                "min_effect": 0.01,
                "noise": {"floor": {"sd": 0.005, "known": True}},
            }
        ),
        {"sn_da": ArmTruth(offset=0.05)},  # worse: a stop verdict still exits 0
    )
    res = _cli("report", "synth", "--format", "md,json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("gate verdict: stop (") and last.endswith("report.md)")
    assert (
        json.loads((tmp_path / "results" / "synth" / "gate.json").read_text())["verdict"] == "stop"
    )
    assert not (tmp_path / "results" / "synth" / "report.html").exists()
    # opt-in exit codes for scripts: the report is still written, then exit 1 on the condition
    res = _cli("report", "synth", "--format", "json", "--fail-on", "inconclusive", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    res = _cli("report", "synth", "--format", "json", "--fail-on", "failed,stop", cwd=tmp_path)
    assert res.returncode == 1 and res.stderr.strip() == "--fail-on: verdict stop (gate)", res


def test_report_to_other_dir(tmp_path: Path) -> None:
    root = tmp_path / "copied" / "synth"
    make_results(root, SynthSpec(), {})
    res = _cli("report", str(root), "--out", str(tmp_path / "out"), "--format", "csv", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out" / "comparison.csv").is_file()
    assert (tmp_path / "out" / "gate.json").is_file()


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    res = _cli("report", "missing-spec", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "plan.json: not found" in res.stderr
    assert "Traceback" not in res.stderr
    root = tmp_path / "results" / "synth"
    make_results(root, SynthSpec(), {})
    res = _cli("report", "synth", "--format", "pdf", cwd=tmp_path)
    assert (
        res.returncode == 2
        and "--format" in res.stderr
        and "allowed: md, html, csv, json" in res.stderr
    )
    (root / "plan.json").write_text("[1, 2")
    res = _cli("report", "synth", cwd=tmp_path)
    assert res.returncode == 2 and "unreadable plan" in res.stderr and "Traceback" not in res.stderr


